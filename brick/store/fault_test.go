package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
)

// faultFile fails writes or syncs with the error stored in its switches.
type faultFile struct {
	*os.File
	writeErr, syncErr *atomic.Pointer[error]
}

// WriteAt writes half of p before failing, as a disk that fills up mid-write.
func (f faultFile) WriteAt(p []byte, off int64) (int, error) {
	if e := f.writeErr.Load(); e != nil {
		n, _ := f.File.WriteAt(p[:len(p)/2], off)
		return n, *e
	}
	return f.File.WriteAt(p, off)
}

func (f faultFile) Sync() error {
	if e := f.syncErr.Load(); e != nil {
		return *e
	}
	return f.File.Sync()
}

type faults struct{ writeErr, syncErr atomic.Pointer[error] }

func (fs *faults) options(o Options) Options {
	o.wrapFile = func(f *os.File) segFile { return faultFile{File: f, writeErr: &fs.writeErr, syncErr: &fs.syncErr} }
	return o
}

func fileSize(t *testing.T, dir string, seg uint64) int64 {
	t.Helper()
	fi, err := os.Stat(filepath.Join(dir, segName(seg)))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func TestDiskFull(t *testing.T) {
	dir := t.TempDir()
	var fs faults
	opts := fs.options(Options{SegmentBytes: SegmentBytesMin})
	s := openT(t, dir, opts)
	for i := range uint64(20) {
		mustApply(t, s, putOp(Key{Block: i}, 1))
	}
	seg, size := headPos(s)

	enospc := error(syscall.ENOSPC)
	fs.writeErr.Store(&enospc)
	err := s.Apply(context.Background(), []Op{putOp(Key{Block: 100}, 1), putOp(Key{Block: 101}, 1)})
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Apply on full disk = %v, want ErrNoSpace", err)
	}
	if s2, n := headPos(s); s2 != seg || n != size || fileSize(t, dir, seg) != size {
		t.Fatalf("partial write not truncated: head %d size %d file %d, want %d %d", s2, n, fileSize(t, dir, seg), seg, size)
	}
	checkNotFound(t, s, Key{Block: 100})
	for i := range uint64(20) {
		checkPut(t, s, Key{Block: i}, 1)
	}

	fs.writeErr.Store(nil) // space freed
	mustApply(t, s, putOp(Key{Block: 102}, 1))
	s.Close()
	s = openT(t, dir, opts)
	checkPut(t, s, Key{Block: 102}, 1)
	checkNotFound(t, s, Key{Block: 100})
	checkNotFound(t, s, Key{Block: 101})
}

func TestSyncFailureBreaksStore(t *testing.T) {
	dir := t.TempDir()
	var fs faults
	opts := fs.options(Options{})
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, putOp(Key{Block: 1}, 1))
	eio := error(syscall.EIO)
	fs.syncErr.Store(&eio)
	if err := s.Apply(context.Background(), []Op{putOp(Key{Block: 2}, 1)}); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Apply with failing fsync = %v", err)
	}
	fs.syncErr.Store(nil)
	if err := s.Apply(context.Background(), []Op{putOp(Key{Block: 3}, 1)}); err == nil {
		t.Fatal("Apply on a broken store succeeded")
	}
	s.Close()
	s = openT(t, dir, opts)
	checkPut(t, s, Key{Block: 1}, 1)
	mustApply(t, s, putOp(Key{Block: 3}, 1))
	checkPut(t, s, Key{Block: 3}, 1)
}
