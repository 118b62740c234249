package filesys

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys/fstest"
	"github.com/plumeria-fs/plumeria/filesys/layout"
)

type memDevice = fstest.MemDevice

func newMemDevice() *memDevice { return fstest.NewMemDevice() }

func openSolo(t *testing.T, dev *memDevice, id string) *FS {
	t.Helper()
	fs, err := Open(context.Background(), Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: id, Session: 1})
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func formatted(t *testing.T) *memDevice {
	dev := newMemDevice()
	if _, err := Format(context.Background(), dev, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	return dev
}

func TestFormatRefusesTwice(t *testing.T) {
	dev := formatted(t)
	if _, err := Format(context.Background(), dev, false, time.Now()); !errors.Is(err, ErrFormatted) {
		t.Fatalf("second format: %v", err)
	}
	if _, err := Format(context.Background(), dev, true, time.Now()); err != nil {
		t.Fatalf("forced format: %v", err)
	}
}

func TestBasicOps(t *testing.T) {
	ctx := context.Background()
	dev := formatted(t)
	fs := openSolo(t, dev, "a")
	c := Caller{Uid: 1, Gid: 2}
	d, err := fs.Mkdir(ctx, RootIno, "d", 0o755, c)
	if err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create(ctx, d.Ino, "f", 0o644, c, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Create(ctx, d.Ino, "f", 0o644, c, true); !errors.Is(err, ErrExists) {
		t.Fatalf("exclusive create of existing: %v", err)
	}
	small := []byte("hello world")
	if _, err := fs.Write(ctx, f.Ino, 0, small, 0, false); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1000) // 16000 bytes: leaves the inode
	if _, err := fs.Write(ctx, f.Ino, 0, big, 5, false); err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{}, small[:5]...), big...)
	got := make([]byte, len(want)+10)
	n, err := fs.Read(ctx, f.Ino, 0, got, 0)
	if err != nil || n != len(want) || !bytes.Equal(got[:n], want) {
		t.Fatalf("read %d %v", n, err)
	}
	if err := fs.Rmdir(ctx, RootIno, "d"); !errors.Is(err, ErrNotEmpty) {
		t.Fatal("rmdir of non-empty dir")
	}
	if err := fs.Rename(ctx, d.Ino, "f", RootIno, "g", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Lookup(ctx, d.Ino, "f"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("old name: %v", err)
	}
	g, err := fs.Lookup(ctx, RootIno, "g")
	if err != nil || g.Ino != f.Ino || g.Size != uint64(len(want)) {
		t.Fatalf("new name: %+v %v", g, err)
	}
	if err := fs.Rename(ctx, RootIno, "d", d.Ino, "x", 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("dir into itself: %v", err)
	}
	for i := 0; i < 500; i++ {
		if _, err := fs.Create(ctx, d.Ino, fmt.Sprintf("file-%04d", i), 0o600, c, true); err != nil {
			t.Fatal(err)
		}
	}
	var names int
	after := uint64(0)
	for {
		ents, done, err := fs.ReadDir(ctx, d.Ino, after, 64)
		if err != nil {
			t.Fatal(err)
		}
		names += len(ents)
		if len(ents) > 0 {
			after = ents[len(ents)-1].Cookie
		}
		if done {
			break
		}
	}
	if names != 500 {
		t.Fatalf("listed %d names, want 500", names)
	}
	if err := fs.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Remount: everything is there.
	fs2 := openSolo(t, dev, "a")
	g2, err := fs2.Lookup(ctx, RootIno, "g")
	if err != nil || g2.Size != g.Size {
		t.Fatalf("after remount: %+v %v", g2, err)
	}
	if err := fs2.Unlink(ctx, RootIno, "g"); err != nil {
		t.Fatal(err)
	}
	fs2.Close(ctx)
}

// TestRecoveryReplaysLog: a node that stops without writing back (a
// crash) leaves its changes in its log; Recover by another node applies
// them.
func TestRecoveryReplaysLog(t *testing.T) {
	ctx := context.Background()
	dev := formatted(t)
	a, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "a", Session: 1, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if _, err := a.Mkdir(ctx, RootIno, fmt.Sprintf("dir-%d", i), 0o755, Caller{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// Crash: a's cache is lost; nothing was written back.
	close(a.stop)
	a.flusher.Wait()
	b := openSolo(t, dev, "b")
	if _, err := b.Lookup(ctx, RootIno, "dir-7"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("before recovery the change must not be in place: %v", err)
	}
	if err := b.Recover(ctx, "v", "a", 1); err != nil {
		t.Fatal(err)
	}
	b.cache = newCache() // drop what b read before the replay
	for i := 0; i < 50; i++ {
		if _, err := b.Lookup(ctx, RootIno, fmt.Sprintf("dir-%d", i)); err != nil {
			t.Fatalf("dir-%d after recovery: %v", i, err)
		}
	}
	b.Close(ctx)
}

// TestTruncateCrash: after a crash, a file truncated since its last fsync
// is either as fsync'd or truncated, never its old size over zeros; and a
// file grown again after a truncate reads zeros past the cut.
func TestTruncateCrash(t *testing.T) {
	ctx := context.Background()
	dev := formatted(t)
	a, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "a", Session: 1, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789"), 1000) // past the inline area
	small, big := uint64(3000), uint64(len(data))
	var files [2]Attr
	for i := range files {
		if files[i], err = a.Create(ctx, RootIno, fmt.Sprintf("f%d", i), 0o644, Caller{}, true); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Write(ctx, files[i].Ino, 0, data, 0, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// f0: down and up again; f1: down only.
	for _, size := range []uint64{small, big} {
		if _, err := a.Setattr(ctx, files[0].Ino, SetAttr{Size: &size}); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, len(data))
	want := append(append([]byte(nil), data[:small]...), make([]byte, big-small)...)
	if n, err := a.Read(ctx, files[0].Ino, 0, got, 0); err != nil || n != len(data) || !bytes.Equal(got, want) {
		t.Fatalf("after truncate down and up: %d bytes, %v; want the first %d then zeros", n, err, small)
	}
	if _, err := a.Setattr(ctx, files[1].Ino, SetAttr{Size: &small}); err != nil {
		t.Fatal(err)
	}
	// Crash: the last truncate never reached the log.
	b := crashAndRecover(t, a, dev)
	defer b.Close(ctx)
	n, err := b.Read(ctx, files[1].Ino, 0, got, 0)
	if err != nil || !(n == len(data) && bytes.Equal(got[:n], data) || n == int(small) && bytes.Equal(got[:n], data[:small])) {
		t.Fatalf("truncated file after the crash: %d bytes, %v; want %d or %d bytes of what was written", n, err, len(data), small)
	}
}

// TestUnlinkCrash: freeing a deleted file's data must wait until the
// record that freed it is durable: a crash before that brings the file
// back (the unlink lost with the log's tail), and it must hold its bytes,
// not zeros (ordered data: no file shows bytes it was not given).
func TestUnlinkCrash(t *testing.T) {
	ctx := context.Background()
	dev := formatted(t)
	a, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "a", Session: 1, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789"), 1000) // past the inline area
	f, err := a.Create(ctx, RootIno, "f", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write(ctx, f.Ino, 0, data, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Unlink(ctx, RootIno, "f"); err != nil {
		t.Fatal(err)
	}
	// Crash: whatever the log holds now is all that survives.
	b := crashAndRecover(t, a, dev)
	defer b.Close(ctx)
	attr, err := b.Lookup(ctx, RootIno, "f")
	if errors.Is(err, ErrNotFound) {
		return // the unlink was durable
	}
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if n, err := b.Read(ctx, attr.Ino, 0, got, 0); err != nil || n != len(data) || !bytes.Equal(got, data) {
		t.Fatalf("the unlinked file is back after the crash but reads %d bytes (%v) starting %q; want what was written", n, err, got[:16])
	}
}

// crashAndRecover stops node a (ID "a", session 1) as a crash would, with
// its log as it is on dev, and returns node b after b recovered a's log,
// with an empty cache.
func crashAndRecover(t *testing.T, a *FS, dev *memDevice) *FS {
	t.Helper()
	close(a.stop)
	a.flusher.Wait()
	b := openSolo(t, dev, "b")
	if err := b.Recover(context.Background(), "v", "a", 1); err != nil {
		t.Fatal(err)
	}
	b.cache = newCache()
	return b
}

// hookDevice runs onWrite before each write it passes on, of every kind.
type hookDevice struct {
	*memDevice
	onWrite func(off uint64)
}

func (d hookDevice) hook(off uint64) {
	if d.onWrite != nil {
		d.onWrite(off)
	}
}

func (d hookDevice) WriteData(ctx context.Context, p []byte, off uint64) error {
	d.hook(off)
	return d.memDevice.WriteData(ctx, p, off)
}

func (d hookDevice) WriteMeta(ctx context.Context, p []byte, off uint64) error {
	d.hook(off)
	return d.memDevice.WriteMeta(ctx, p, off)
}

func (d hookDevice) WriteMetaBlocks(ctx context.Context, p []byte, off uint64) error {
	d.hook(off)
	return d.memDevice.WriteMetaBlocks(ctx, p, off)
}

// TestWriteBackHotBlock: a block changed again while it is written back
// stays dirty, but its first unwritten record moves past what was written,
// so a block every operation changes (a busy directory) does not pin the
// log's tail until the log fills and operations stall.
func TestWriteBackHotBlock(t *testing.T) {
	ctx := context.Background()
	dev := hookDevice{memDevice: formatted(t)}
	var fs *FS
	changeAgain := false
	dev.onWrite = func(off uint64) {
		if changeAgain && off <= layout.InodeAddr(RootIno) && layout.InodeAddr(RootIno) < off+layout.BlockBytes*writeBackRunMax {
			changeAgain = false
			mode := uint32(0o700)
			if _, err := fs.Setattr(ctx, RootIno, SetAttr{Mode: &mode}); err != nil {
				t.Error(err)
			}
		}
	}
	fs, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "p", Session: 1, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close(ctx)
	mode := uint32(0o755)
	if _, err := fs.Setattr(ctx, RootIno, SetAttr{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	root := func() cblock {
		fs.cache.mu.Lock()
		defer fs.cache.mu.Unlock()
		return *fs.cache.blocks[layout.InodeAddr(RootIno)]
	}
	first := root().firstLSN
	changeAgain = true
	if err := fs.writeBackAll(ctx); err != nil {
		t.Fatal(err)
	}
	b := root()
	if !b.dirty {
		t.Fatal("the root inode was changed during its write-back but is clean")
	}
	if b.firstLSN <= first || b.firstLSN > b.lastLSN {
		t.Errorf("first unwritten record of the root inode is %d, want after %d (written back) and at most %d", b.firstLSN, first, b.lastLSN)
	}
}

// readCounter counts the device reads that start in [from, to).
type readCounter struct {
	*memDevice
	from, to uint64
	n        *atomic.Int64
}

func (d readCounter) ReadAt(ctx context.Context, p []byte, off uint64) error {
	if d.from <= off && off < d.to {
		d.n.Add(1)
	}
	return d.memDevice.ReadAt(ctx, p, off)
}

// TestDirReadAhead: a growing directory reads its next hash blocks from
// the volume dirReadAhead at a time, not one read per split.
func TestDirReadAhead(t *testing.T) {
	ctx := context.Background()
	dev := readCounter{memDevice: formatted(t), from: layout.DirBase, to: ^uint64(0), n: new(atomic.Int64)}
	fs, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "p", Session: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close(ctx)
	d, err := fs.Mkdir(ctx, RootIno, "d", 0o755, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3000 {
		if _, err := fs.Create(ctx, d.Ino, fmt.Sprintf("file-with-a-longish-name-%06d", i), 0o644, Caller{}, true); err != nil {
			t.Fatal(err)
		}
	}
	blocks := 0
	fs.cache.mu.Lock()
	for a := range fs.cache.blocks {
		if layout.DirBlockAddr(d.Ino, 0) <= a && a < layout.DirBlockAddr(d.Ino, layout.DirBlocksMax) {
			blocks++
		}
	}
	fs.cache.mu.Unlock()
	if reads := dev.n.Load(); blocks < 32 || reads > int64(blocks/8) {
		t.Errorf("%d directory block reads for %d cached blocks, want at most one per 8", reads, blocks)
	}
}

// TestSyncCancelledIsNotFatal: a sync whose caller stops waiting (an
// interrupted fsync, a janitor stopped by the unmount) returns the
// context's error and leaves the file system working; the records are
// made durable all the same.
func TestSyncCancelledIsNotFatal(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	var once sync.Once
	held := make(chan struct{}, 1)
	var armed atomic.Bool
	dev := hookDevice{memDevice: formatted(t)}
	dev.onWrite = func(off uint64) {
		if armed.Load() && layout.LogBase <= off && off < layout.LogAddr(layout.SlotsMax) {
			select {
			case held <- struct{}{}:
			default:
			}
			<-release
		}
	}
	fs, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "p", Session: 1, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close(ctx)
	defer once.Do(func() { close(release) })
	armed.Store(true)
	if _, err := fs.Mkdir(ctx, RootIno, "d", 0o755, Caller{}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- fs.Sync(cctx) }()
	<-held // the log write is under way and cannot finish
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled sync: %v, want context.Canceled", err)
	}
	if err := fs.failed(); err != nil {
		t.Fatalf("a cancelled sync stopped the file system: %v", err)
	}
	once.Do(func() { close(release) })
	if err := fs.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Mkdir(ctx, RootIno, "e", 0o755, Caller{}); err != nil {
		t.Fatal(err)
	}
}
