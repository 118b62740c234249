package filesys

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"

	"github.com/plumeria-fs/plumeria/filesys/fstest"
	"github.com/plumeria-fs/plumeria/filesys/layout"
	"github.com/plumeria-fs/plumeria/lock"
)

// TestDataCache: file data read or written here is served from the fs
// node's cache; a write updates it, a hole punch and a truncate drop it,
// and a revoke of the inode's lock drops it so that another node's change
// (made on the volume directly here) is read afterwards.
func TestDataCache(t *testing.T) {
	ctx := context.Background()
	dev := readCounter{memDevice: formatted(t), from: layout.DataBase, to: ^uint64(0), n: new(atomic.Int64)}
	fs, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "p", Session: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close(ctx)
	a, err := fs.Create(ctx, RootIno, "f", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("0123456789abcdef"), 200<<10/16) // 200 KiB: four pages
	if _, err := fs.Write(ctx, a.Ino, a.Gen, want, 0, false); err != nil {
		t.Fatal(err)
	}
	read := func(what string, want []byte, volumeReads int64) {
		t.Helper()
		before := dev.n.Load()
		got := make([]byte, len(want))
		n, err := fs.Read(ctx, a.Ino, a.Gen, got, 0)
		if err != nil || !bytes.Equal(got[:n], want) {
			t.Fatalf("%s: read %d bytes, %v; content differs: %v", what, n, err, !bytes.Equal(got[:n], want))
		}
		if r := dev.n.Load() - before; r != volumeReads {
			t.Errorf("%s: %d volume reads, want %d", what, r, volumeReads)
		}
	}
	read("first read", want, 1) // the four pages missing, read with one volume read
	read("second read", want, 0)
	copy(want[70000:], "written here")
	if _, err := fs.Write(ctx, a.Ino, a.Gen, []byte("written here"), 70000, false); err != nil {
		t.Fatal(err)
	}
	read("read after a write", want, 0)

	if err := fs.Fallocate(ctx, a.Ino, 65536, 4096, fallocPunchHole|fallocKeepSize); err != nil {
		t.Fatal(err)
	}
	clear(want[65536 : 65536+4096])
	read("read after a hole punch", want, 1)

	// Another node takes the lock and changes the file on the volume.
	if err := fs.Revoke(ctx, "v", inodeLock(a.Ino), lock.None); err != nil {
		t.Fatal(err)
	}
	copy(want[1000:], "another node")
	if err := dev.WriteData(ctx, []byte("another node"), layout.ExtentAddr(a.Ino)+1000); err != nil {
		t.Fatal(err)
	}
	read("read after a revoke", want, 1)

	size := uint64(100)
	if _, err := fs.Setattr(ctx, a.Ino, SetAttr{Size: &size}); err != nil {
		t.Fatal(err)
	}
	size = 150 << 10
	if _, err := fs.Setattr(ctx, a.Ino, SetAttr{Size: &size}); err != nil {
		t.Fatal(err)
	}
	want = append(want[:100], make([]byte, 150<<10-100)...)
	read("read after truncate down and up", want, 1)
}

// TestDataCacheBounded: the cache holds at most its bound, least recently
// used pages out first.
func TestDataCacheBounded(t *testing.T) {
	var c pageCache
	c.init(3*pageBytes, newStats(nil, "bounded"))
	for i := range uint64(5) {
		c.put(7, i, make([]byte, pageBytes))
	}
	if c.bytes != 3*pageBytes || len(c.pages) != 3 {
		t.Fatalf("%d bytes in %d pages, want 3 pages", c.bytes, len(c.pages))
	}
	p := make([]byte, 1)
	for i, want := range []bool{false, false, true, true, true} {
		if got := c.get(7, uint64(i), 0, p); got != want {
			t.Errorf("page %d cached %v, want %v", i, got, want)
		}
	}
	c.drop(7)
	if c.bytes != 0 || len(c.pages) != 0 || len(c.byIno) != 0 {
		t.Errorf("after drop: %d bytes, %d pages, %d inodes", c.bytes, len(c.pages), len(c.byIno))
	}
}
