package filesys

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys/fstest"
	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// kindDevice records the kind of every write.
type kindDevice struct {
	*memDevice
	mu     sync.Mutex
	writes []kindWrite
}

type kindWrite struct {
	kind string // "data", "meta" or "blocks"
	off  uint64
	n    int
}

func (d *kindDevice) record(kind string, p []byte, off uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writes = append(d.writes, kindWrite{kind, off, len(p)})
}

func (d *kindDevice) WriteData(ctx context.Context, p []byte, off uint64) error {
	d.record("data", p, off)
	return d.memDevice.WriteData(ctx, p, off)
}

func (d *kindDevice) WriteMeta(ctx context.Context, p []byte, off uint64) error {
	d.record("meta", p, off)
	return d.memDevice.WriteMeta(ctx, p, off)
}

func (d *kindDevice) WriteMetaBlocks(ctx context.Context, p []byte, off uint64) error {
	d.record("blocks", p, off)
	return d.memDevice.WriteMetaBlocks(ctx, p, off)
}

// take returns the writes since the last take.
func (d *kindDevice) take() []kindWrite {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.writes
	d.writes = nil
	return w
}

// mountedKind is the kind of write a mounted node (or recovery) uses at
// off: file data in the extents, the redo log in the log regions, whole
// versioned blocks for every other metadata block.
func mountedKind(off uint64) string {
	switch {
	case off >= layout.DataBase:
		return "data"
	case off >= layout.LogBase && off < layout.RGBase:
		return "meta"
	}
	return "blocks"
}

// checkKinds fails on a write of the wrong kind and returns how many of
// each kind there were.
func checkKinds(t *testing.T, what string, ws []kindWrite, want func(off uint64) string) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, w := range ws {
		n[w.kind]++
		if k := want(w.off); w.kind != k {
			t.Errorf("%s: %s write of %d bytes at %#x, want %s", what, w.kind, w.n, w.off, k)
		}
		if w.kind == "blocks" && (w.off%layout.BlockBytes != 0 || w.n%layout.BlockBytes != 0) {
			t.Errorf("%s: versioned write of %d bytes at %#x: not whole blocks", what, w.n, w.off)
		}
	}
	return n
}

// TestWriteKinds: file data are WriteData, the redo log WriteMeta (it may
// use the bricks' metadata reserve), every other metadata block
// WriteMetaBlocks (reserve, versioned), in a mount and in recovery alike;
// format and fsck's ReplayLog write everything with WriteData.
func TestWriteKinds(t *testing.T) {
	ctx := context.Background()
	dev := &kindDevice{memDevice: newMemDevice()}
	if _, err := Format(ctx, dev, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	always := func(k string) func(uint64) string { return func(uint64) string { return k } }
	checkKinds(t, "format", dev.take(), always("data"))

	a, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "a", Session: 1})
	if err != nil {
		t.Fatal(err)
	}
	work(t, a, "a")
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	n := checkKinds(t, "mount", dev.take(), mountedKind)
	for _, k := range []string{"data", "meta", "blocks"} {
		if n[k] == 0 {
			t.Errorf("mount: no %s write", k)
		}
	}

	b, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "b", Session: 1, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	work(t, b, "b")
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	b.Halt()
	dev.take()
	if err := RecoverLog(ctx, dev, "b", 1, RecoverOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := checkKinds(t, "recovery", dev.take(), always("blocks")); n["blocks"] < 2 {
		t.Errorf("recovery wrote %d blocks, want the replayed ones and the slot", n["blocks"])
	}

	c, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "c", Session: 1, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	work(t, c, "c")
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	c.Halt()
	dev.take()
	if n, err := ReplayLog(ctx, dev, c.slot); err != nil || n == 0 {
		t.Fatalf("replay: %d blocks, %v", n, err)
	}
	checkKinds(t, "fsck's replay", dev.take(), always("data"))
}

// work makes changes of every kind: a directory past its inode (hash
// blocks), file data written, fsync'd and cut, a symlink whose target
// lives in its extent, a file unlinked while open (an orphan).
func work(t *testing.T, fs *FS, name string) {
	t.Helper()
	ctx := context.Background()
	c := Caller{}
	d, err := fs.Mkdir(ctx, RootIno, name, 0o755, c)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := fs.Mkdir(ctx, d.Ino, fmt.Sprintf("sub-%d-%s", i, strings.Repeat("x", 60)), 0o755, c); err != nil {
			t.Fatal(err)
		}
	}
	f, err := fs.Create(ctx, d.Ino, "f", 0o644, c, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Write(ctx, f.Ino, 0, bytes.Repeat([]byte{7}, 64<<10), 0, false); err != nil {
		t.Fatal(err)
	}
	if err := fs.Fsync(ctx, f.Ino, false); err != nil {
		t.Fatal(err)
	}
	size := uint64(10000)
	if _, err := fs.Setattr(ctx, f.Ino, SetAttr{Size: &size}); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Symlink(ctx, d.Ino, "l", strings.Repeat("t", SymlinkBytesMax), c); err != nil {
		t.Fatal(err)
	}
	if err := fs.Open(ctx, f.Ino, f.Gen); err != nil {
		t.Fatal(err)
	}
	if err := fs.Unlink(ctx, d.Ino, "f"); err != nil {
		t.Fatal(err)
	}
	fs.Release(ctx, f.Ino)
}
