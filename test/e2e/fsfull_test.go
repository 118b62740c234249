package e2e

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestFSVolumeFull: bricks with a small --capacity fill up with file data.
// The writer gets ENOSPC (from write or fsync) and nothing else happens:
// the fs node stays up, files written before read back, a small file can
// still be created, the big one deleted, and once the bricks have reclaimed
// its space large writes work again; fsck is clean afterwards.
func TestFSVolumeFull(t *testing.T) {
	c := newFSCluster(t, "--capacity", "96MiB")
	mnt := c.mountNode("n1")
	writeSynced := func(name string, data []byte) error {
		f, err := os.Create(filepath.Join(mnt, name))
		if err != nil {
			return err
		}
		_, err = f.Write(data)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
	kept := bytes.Repeat([]byte("kept "), 100_000) // 500 KB in the file's extent
	if err := writeSynced("before", kept); err != nil {
		t.Fatal(err)
	}

	f, err := os.Create(filepath.Join(mnt, "big"))
	if err != nil {
		t.Fatal(err)
	}
	buf := bytes.Repeat([]byte{0xb1}, 1<<20)
	var full error
	written := 0
	for i := 0; i < 1024 && full == nil; i++ {
		if _, err := f.Write(buf); err != nil {
			full = err
			break
		}
		written++
		if i%8 == 7 {
			full = f.Sync()
		}
	}
	if full == nil {
		full = f.Sync()
	}
	f.Close()
	if !errors.Is(full, syscall.ENOSPC) {
		t.Fatalf("after %d MiB: %v, want ENOSPC", written, full)
	}
	t.Logf("ENOSPC after %d MiB: %v", written, full)

	if !c.proc("n1").running() {
		t.Fatal("the fs node stopped when the volume filled up")
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "before")); err != nil || !bytes.Equal(got, kept) {
		t.Fatalf("a file written before the volume filled up: %d bytes, %v", len(got), err)
	}
	if err := writeSynced("small", []byte("metadata still commits")); err != nil {
		t.Fatalf("a small file on a full volume: %v", err)
	}
	if err := os.Remove(filepath.Join(mnt, "big")); err != nil {
		t.Fatalf("deleting on a full volume: %v", err)
	}
	c.waitFor(3*time.Minute, "a large write to work again after the delete", func() (bool, string) {
		err := writeSynced("after", buf)
		if err == nil {
			return true, ""
		}
		return false, err.Error()
	})
	c.stop("n1")
	r := c.run(5*time.Minute, nil, "fsck", c.coordArg(), "--volume", "fs")
	if r.code != 0 {
		t.Fatalf("fsck after the volume filled up: %v", r)
	}
}
