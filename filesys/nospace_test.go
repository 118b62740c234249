package filesys

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/plumeria-fs/plumeria/filesys/fstest"
)

// fullData refuses writes of file data as a full brick does, while
// metadata and log writes still fit (the bricks' reserve).
type fullData struct {
	*memDevice
	full atomic.Bool
}

func (d *fullData) WriteData(ctx context.Context, p []byte, off uint64) error {
	if d.full.Load() {
		return fmt.Errorf("volume v: %w: brick b1 is full", ErrNoSpace)
	}
	return d.memDevice.WriteData(ctx, p, off)
}

// TestDataNoSpace: a brick refusing file data for lack of space costs the
// writer those bytes and an ENOSPC (at fsync for a write already taken,
// at write(2) afterwards), not the node: the file system goes on, its log
// included, and nothing else is lost.
func TestDataNoSpace(t *testing.T) {
	ctx := context.Background()
	dev := &fullData{memDevice: formatted(t)}
	fs, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "a", Session: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := Caller{}
	f, err := fs.Create(ctx, RootIno, "f", 0o644, c, true)
	if err != nil {
		t.Fatal(err)
	}
	first := bytes.Repeat([]byte{1}, 64<<10)
	if _, err := fs.Write(ctx, f.Ino, 0, first, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := fs.Fsync(ctx, f.Ino, false); err != nil {
		t.Fatal(err)
	}

	dev.full.Store(true)
	// Taken by write-behind: reported by fsync (or close), once.
	if _, err := fs.Write(ctx, f.Ino, 0, bytes.Repeat([]byte{2}, 64<<10), 64<<10, false); err != nil {
		t.Fatalf("write-behind write: %v", err)
	}
	if err := fs.Fsync(ctx, f.Ino, false); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("fsync after a data write a full brick refused: %v, want ErrNoSpace", err)
	}
	// The node goes on: metadata changes commit and sync.
	g, err := fs.Create(ctx, RootIno, "g", 0o644, c, true)
	if err != nil {
		t.Fatalf("create after a refused data write: %v", err)
	}
	if err := fs.Sync(ctx); err != nil {
		t.Fatalf("log sync after a refused data write: %v", err)
	}
	// Written through now: write(2) fails and changes nothing.
	before, err := fs.Getattr(ctx, f.Ino)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Write(ctx, f.Ino, 0, []byte("more"), before.Size, false); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("write on a full volume: %v, want ErrNoSpace", err)
	}
	if after, err := fs.Getattr(ctx, f.Ino); err != nil || after.Size != before.Size {
		t.Fatalf("size after a refused write: %d (%v), want %d", after.Size, err, before.Size)
	}

	dev.full.Store(false)
	last := []byte("after space was freed")
	if _, err := fs.Write(ctx, g.Ino, 0, bytes.Repeat(last, 1000), 0, false); err != nil {
		t.Fatalf("write once space is back: %v", err)
	}
	if err := fs.Fsync(ctx, g.Ino, false); err != nil {
		t.Fatal(err)
	}
	if err := fs.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}

	fs2 := openSolo(t, dev.memDevice, "b")
	defer fs2.Close(ctx)
	got := make([]byte, 64<<10)
	if n, err := fs2.Read(ctx, f.Ino, 0, got, 0); err != nil || n != len(got) || !bytes.Equal(got, first) {
		t.Fatalf("fsync'd bytes before the full brick: n=%d err=%v", n, err)
	}
	want := bytes.Repeat(last, 1000)
	got = make([]byte, len(want))
	if n, err := fs2.Read(ctx, g.Ino, 0, got, 0); err != nil || n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("bytes written after space was freed: n=%d err=%v", n, err)
	}
}
