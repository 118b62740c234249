package filesys

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

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
	fs, dev, a := countedFile(t, Config{})
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
	fill := c.beginFill(7, 0, 4)
	for i := range uint64(5) {
		c.putFilled(fill, i, make([]byte, pageBytes))
	}
	c.endFill(fill)
	if len(c.fills) != 0 {
		t.Fatalf("%d fills left after endFill", len(c.fills))
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

// gatedDevice holds every volume read of [from, to) until gate is closed,
// after telling reached (buffered, one message).
type gatedDevice struct {
	*memDevice
	from, to uint64
	reached  chan struct{}
	gate     chan struct{}
}

func (d gatedDevice) ReadAt(ctx context.Context, p []byte, off uint64) error {
	if d.from <= off && off < d.to {
		select {
		case d.reached <- struct{}{}:
		default: // told already
		}
		<-d.gate
	}
	return d.memDevice.ReadAt(ctx, p, off)
}

// TestReadDoesNotHoldWrites: a read waiting for the volume does not keep a
// write to the same file on this node waiting, and the bytes it read
// before that write are not cached over it. Fails if Read keeps the local
// lock across its volume read (the write times out) or caches its pages
// regardless (the second read returns the old bytes).
func TestReadDoesNotHoldWrites(t *testing.T) {
	ctx := context.Background()
	mem := formatted(t)
	fs, err := Open(ctx, Config{Dev: mem, Locker: fstest.SoloLocker{}, Table: "v", ID: "p", Session: 1})
	if err != nil {
		t.Fatal(err)
	}
	a, err := fs.Create(ctx, RootIno, "f", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	old := bytes.Repeat([]byte("o"), 2*pageBytes)
	if _, err := fs.Write(ctx, a.Ino, a.Gen, old, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := fs.Close(ctx); err != nil { // nothing cached
		t.Fatal(err)
	}
	dev := gatedDevice{memDevice: mem, from: layout.ExtentAddr(a.Ino), to: layout.ExtentAddr(a.Ino) + layout.ExtentBytes,
		reached: make(chan struct{}, 1), gate: make(chan struct{})}
	fs, err = Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "p", Session: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close(ctx)
	got := make(chan []byte, 1)
	go func() {
		p := make([]byte, 2*pageBytes)
		n, err := fs.Read(ctx, a.Ino, a.Gen, p, 0)
		if err != nil {
			t.Error(err)
		}
		got <- p[:n]
	}()
	<-dev.reached // the read waits for the volume
	wrote := make(chan error, 1)
	go func() {
		_, err := fs.Write(ctx, a.Ino, a.Gen, []byte("new"), 10, false)
		wrote <- err
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(dev.gate)
		t.Fatal("a write waited for a read's volume read of the same file")
	}
	close(dev.gate)
	if p := <-got; !bytes.Equal(p, old) && !bytes.Equal(p[:13], append(bytes.Repeat([]byte("o"), 10), "new"...)) {
		t.Fatalf("the overlapping read returned neither the old nor the new bytes")
	}
	// Later reads go to the volume (the gate is open) or the cache, and
	// must see the write.
	want := append(append(bytes.Repeat([]byte("o"), 10), "new"...), old[13:]...)
	p := make([]byte, 2*pageBytes)
	n, err := fs.Read(ctx, a.Ino, a.Gen, p, 0)
	if err != nil || !bytes.Equal(p[:n], want) {
		t.Fatalf("read after the write: %d bytes, %v; content differs (stale page cached): %v", n, err, !bytes.Equal(p[:n], want))
	}
}

// TestPageFillRanges: a read's pages are cached unless a change here
// touched one of the pages it may fetch; changes elsewhere in the file do
// not count (random reads and writes of one file would otherwise never
// cache anything).
func TestPageFillRanges(t *testing.T) {
	var c pageCache
	c.init(16*pageBytes, newStats(nil, "fills"))
	cached := func(idx uint64) bool { return c.has(7, idx) }
	f := c.beginFill(7, 2, 3)
	c.write(7, []byte("x"), 5*pageBytes) // another page of the file
	c.write(8, []byte("x"), 2*pageBytes) // another file
	c.putFilled(f, 2, make([]byte, pageBytes))
	if !cached(2) {
		t.Fatal("a change to another page kept a read's page out of the cache")
	}
	c.write(7, []byte("xy"), 4*pageBytes-1) // the last byte of page 3
	c.putFilled(f, 3, make([]byte, pageBytes))
	if cached(3) {
		t.Fatal("a page was cached although a write changed it during the read")
	}
	c.endFill(f)
	g := c.beginFill(7, 9, 9)
	c.drop(7)
	c.putFilled(g, 9, make([]byte, pageBytes))
	if cached(9) {
		t.Fatal("a page was cached although the file's pages were dropped during the read")
	}
	c.endFill(g)
	if len(c.fills) != 0 {
		t.Fatalf("%d inodes with fills left", len(c.fills))
	}
}

// TestDataCacheStream: a read of four or more whole pages that are not
// cached (the kernel's read-ahead of a sequential reader) goes straight to
// the volume and is not cached; smaller reads are.
func TestDataCacheStream(t *testing.T) {
	ctx := context.Background()
	fs, dev, a := countedFile(t, Config{StreamReads: true})
	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<20/16)
	if _, err := fs.Write(ctx, a.Ino, a.Gen, want, 0, false); err != nil {
		t.Fatal(err)
	}
	read := func(what string, off, n int, volumeReads int64) {
		t.Helper()
		before := dev.n.Load()
		got := make([]byte, n)
		m, err := fs.Read(ctx, a.Ino, a.Gen, got, uint64(off))
		if err != nil || m != n || !bytes.Equal(got, want[off:off+n]) {
			t.Fatalf("%s: read %d of %d bytes, %v; content differs: %v", what, m, n, err, !bytes.Equal(got[:m], want[off:off+m]))
		}
		if r := dev.n.Load() - before; r != volumeReads {
			t.Errorf("%s: %d volume reads, want %d", what, r, volumeReads)
		}
	}
	read("1 MiB read", 0, 1<<20, 1)
	read("the same again (streamed: not cached)", 0, 1<<20, 1)
	read("three pages and a half", 0, 3*pageBytes+100, 1)
	read("the same again (cached)", 0, 3*pageBytes+100, 0)
	// Pages 0-3 cached now, 4-15 not: the read takes the four from the
	// cache and streams the twelve after them.
	read("1 MiB read, a third cached", 0, 1<<20, 1)
	read("an unaligned 1 MiB read", 1000, 1<<20-1000, 1)
	if got, want := testutil.ToFloat64(fs.stats.streamed), float64(2<<20+2*12*pageBytes); got != want {
		t.Errorf("streamed bytes: %v, want %v", got, want)
	}
}

// countedFile opens a file system with cfg on a fresh device that counts
// its data reads (closed when the test ends) and creates file f in it.
func countedFile(t *testing.T, cfg Config) (*FS, readCounter, Attr) {
	t.Helper()
	ctx := context.Background()
	dev := readCounter{memDevice: formatted(t), from: layout.DataBase, to: ^uint64(0), n: new(atomic.Int64)}
	cfg.Dev, cfg.Locker, cfg.Table, cfg.ID, cfg.Session = dev, fstest.SoloLocker{}, "v", "p", 1
	fs, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close(ctx) })
	a, err := fs.Create(ctx, RootIno, "f", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	return fs, dev, a
}
