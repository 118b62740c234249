package filesys

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys/fstest"
	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// logCountDevice counts writes to the log region.
type logCountDevice struct {
	*memDevice
	logWrites atomic.Int64
}

func (d *logCountDevice) WriteMeta(ctx context.Context, p []byte, off uint64) error {
	if layout.LogBase <= off && off < layout.LogAddr(layout.SlotsMax) {
		d.logWrites.Add(1)
	}
	return d.memDevice.WriteMeta(ctx, p, off)
}

// TestFdatasync: fdatasync of an overwrite inside a file's size writes the
// data and no log batch (only new times are pending for the file); one
// after a change that may expose data (an append, an inline file's bytes)
// writes the log too, and after a crash the recovered file has the
// appended size and every fdatasync'd byte. It fails if fdatasync always
// skips the log (the append is lost) or never does.
func TestFdatasync(t *testing.T) {
	ctx := context.Background()
	dev := &logCountDevice{memDevice: formatted(t)}
	a, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "a", Session: 1, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	f, err := a.Create(ctx, RootIno, "f", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	small, err := a.Create(ctx, RootIno, "small", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB: past the inline area
	if _, err := a.Write(ctx, f.Ino, f.Gen, data, 0, false); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write(ctx, small.Ino, small.Gen, []byte("tiny"), 0, false); err != nil {
		t.Fatal(err)
	}
	if err := a.Fsync(ctx, f.Ino, false); err != nil {
		t.Fatal(err)
	}

	over := bytes.Repeat([]byte("O"), 4096)
	before := dev.logWrites.Load()
	if _, err := a.Write(ctx, f.Ino, f.Gen, over, 8192, false); err != nil {
		t.Fatal(err)
	}
	if err := a.Fsync(ctx, f.Ino, true); err != nil {
		t.Fatal(err)
	}
	if n := dev.logWrites.Load() - before; n != 0 {
		t.Errorf("fdatasync of an overwrite inside the size wrote the log %d times", n)
	}
	copy(data[8192:], over)
	got := make([]byte, len(over))
	if err := dev.ReadAt(ctx, got, layout.ExtentAddr(f.Ino)+8192); err != nil || !bytes.Equal(got, over) {
		t.Fatalf("after fdatasync the volume does not hold the overwrite (err %v)", err)
	}

	// An append makes bytes visible: fdatasync must write the log.
	tail := bytes.Repeat([]byte("T"), 4096)
	before = dev.logWrites.Load()
	if _, err := a.Write(ctx, f.Ino, f.Gen, tail, uint64(len(data)), false); err != nil {
		t.Fatal(err)
	}
	if err := a.Fsync(ctx, f.Ino, true); err != nil {
		t.Fatal(err)
	}
	if dev.logWrites.Load() == before {
		t.Error("fdatasync after an append wrote no log batch")
	}
	data = append(data, tail...)
	// An inline file's bytes live in its inode: its log record is the data.
	before = dev.logWrites.Load()
	if _, err := a.Write(ctx, small.Ino, small.Gen, []byte("TINY"), 0, false); err != nil {
		t.Fatal(err)
	}
	if err := a.Fsync(ctx, small.Ino, true); err != nil {
		t.Fatal(err)
	}
	if dev.logWrites.Load() == before {
		t.Error("fdatasync of an inline file wrote no log batch")
	}

	// A directory's entries are its data: a new entry makes fdatasync of
	// the directory write the log.
	before = dev.logWrites.Load()
	if _, err := a.Create(ctx, RootIno, "later", 0o644, Caller{}, true); err != nil {
		t.Fatal(err)
	}
	if err := a.Fsync(ctx, RootIno, true); err != nil {
		t.Fatal(err)
	}
	if dev.logWrites.Load() == before {
		t.Error("fdatasync of a directory after a create wrote no log batch")
	}

	// Crash: a's cache is lost; b replays a's log.
	close(a.stop)
	a.flusher.Wait()
	b := openSolo(t, dev.memDevice, "b")
	if err := b.Recover(ctx, "v", "a", 1); err != nil {
		t.Fatal(err)
	}
	b.cache = newCache()
	attr, err := b.Getattr(ctx, f.Ino)
	if err != nil {
		t.Fatal(err)
	}
	if attr.Size != uint64(len(data)) {
		t.Fatalf("after the crash the file has %d bytes, want %d (the fdatasync'd append)", attr.Size, len(data))
	}
	buf := make([]byte, len(data))
	if n, err := b.Read(ctx, f.Ino, f.Gen, buf, 0); err != nil || n != len(data) || !bytes.Equal(buf, data) {
		t.Fatalf("after the crash the file's bytes differ (n %d, err %v)", n, err)
	}
	if n, err := b.Read(ctx, small.Ino, small.Gen, buf[:4], 0); err != nil || n != 4 || string(buf[:4]) != "TINY" {
		t.Fatalf("after the crash the inline file reads %q (err %v), want TINY", buf[:n], err)
	}
	if _, err := b.Lookup(ctx, RootIno, "later"); err != nil {
		t.Fatalf("after the crash the entry fdatasync'd with its directory is gone: %v", err)
	}
	b.Close(ctx)
}
