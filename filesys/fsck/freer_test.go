package fsck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/filesys/fstest"
)

// crashImages passes everything to a MemDevice and, while armed, keeps a
// copy of the volume before each write of any kind and each decommit:
// each copy is what a crash of the node at that instant leaves.
type crashImages struct {
	*memDevice
	mu     sync.Mutex
	armed  bool
	images []*memDevice
}

func (d *crashImages) snap() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.armed {
		d.images = append(d.images, d.Clone())
	}
}

func (d *crashImages) WriteData(ctx context.Context, p []byte, off uint64) error {
	d.snap()
	return d.memDevice.WriteData(ctx, p, off)
}

func (d *crashImages) WriteMeta(ctx context.Context, p []byte, off uint64) error {
	d.snap()
	return d.memDevice.WriteMeta(ctx, p, off)
}

func (d *crashImages) WriteMetaBlocks(ctx context.Context, p []byte, off uint64) error {
	d.snap()
	return d.memDevice.WriteMetaBlocks(ctx, p, off)
}

func (d *crashImages) Decommit(ctx context.Context, off, n uint64) error {
	d.snap()
	return d.memDevice.Decommit(ctx, off, n)
}

// TestFreerCrashPoints: a node unlinks files the kernel holds (they become
// orphans), then the kernel forgets them and the freer frees them in
// batches: log sync, decommits, one transaction. A crash before any write
// of that work, or after it, leaves a volume that recovery and the next
// node's janitor bring to a clean state (fsck finds nothing), where every
// other file is intact and each unlinked file is either gone or back
// whole with its data (its unlink lost with the log's tail), never zeros.
func TestFreerCrashPoints(t *testing.T) {
	ctx := context.Background()
	tr := build(t)
	dev := &crashImages{memDevice: tr.dev}
	fs, err := filesys.Open(ctx, filesys.Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "o", Session: 1, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c := filesys.Caller{}
	x := must(fs.Mkdir(ctx, filesys.RootIno, "x", 0o755, c))
	const n = 12
	contents := map[string][]byte{}
	var files []filesys.Attr
	for i := range n {
		name := fmt.Sprintf("f%d", i)
		data := []byte(name + " small")
		if i%2 == 0 {
			data = bytes.Repeat([]byte(name+" has data past the inline area "), 400)
		}
		f := must(fs.Create(ctx, x.Ino, name, 0o644, c, true))
		must(fs.Write(ctx, f.Ino, f.Gen, data, 0, false))
		fs.Hold(f.Ino) // the kernel knows it
		contents[name] = data
		files = append(files, f)
	}
	if err := fs.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := fs.Unlink(ctx, x.Ino, fmt.Sprintf("f%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// The unlinks are in the log's memory only: the freer's sync writes them.
	dev.mu.Lock()
	dev.armed = true
	dev.mu.Unlock()
	for _, f := range files {
		fs.Unhold(ctx, f.Ino)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, f := range files {
		for {
			_, err := fs.Getattr(ctx, f.Ino)
			if errors.Is(err, filesys.ErrNotFound) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("inode %d not freed: %v", f.Ino, err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := fs.Sync(ctx); err != nil { // the frees' record
		t.Fatal(err)
	}
	dev.mu.Lock()
	dev.armed = false
	images := append(dev.images, dev.Clone())
	dev.mu.Unlock()
	fs.Halt()
	t.Logf("%d crash points", len(images))
	back := 0
	for k, img := range images {
		if err := filesys.RecoverLog(ctx, img, "o", 1, filesys.RecoverOptions{}); err != nil {
			t.Fatalf("crash point %d: recovery: %v", k, err)
		}
		p := openFS(t, img, "p", 0) // its janitor frees the crashed node's orphans
		for name, data := range contents {
			ino, err := lookupPath(ctx, p, "x/"+name)
			if errors.Is(err, filesys.ErrNotFound) {
				continue
			}
			if err != nil {
				t.Fatalf("crash point %d: %v", k, err)
			}
			back++
			got := make([]byte, len(data)+10)
			if m, err := p.Read(ctx, ino, 0, got, 0); err != nil || !bytes.Equal(got[:m], data) {
				t.Fatalf("crash point %d: %s is back after the crash but reads %d bytes (%v) %q; want its data", k, name, m, err, got[:min(m, 20)])
			}
		}
		if err := p.Close(ctx); err != nil {
			t.Fatalf("crash point %d: %v", k, err)
		}
		rep := check(t, img, false)
		if len(rep.Problems) != 0 {
			t.Fatalf("crash point %d of %d: fsck:\n%s", k, len(images), lines(rep))
		}
		(&tree{dev: img, want: tr.want, ino: tr.ino}).verify(t)
	}
	if back == 0 {
		t.Error("no crash point lost the unlinks: the crash points start too late")
	}
}
