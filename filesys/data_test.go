package filesys

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/plumeria-fs/plumeria/filesys/fstest"
	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// dataCounter counts file data writes.
type dataCounter struct {
	*memDevice
	n *atomic.Int64
}

func (d dataCounter) WriteData(ctx context.Context, p []byte, off uint64) error {
	if off >= layout.DataBase {
		d.n.Add(1)
	}
	return d.memDevice.WriteData(ctx, p, off)
}

// TestDataCoalesced: a file written sequentially in small pieces reaches
// the volume in few large writes; rewrites over, before and after a
// gathered run land in the order they were made; reads here and after a
// remount return exactly what was written.
func TestDataCoalesced(t *testing.T) {
	ctx := context.Background()
	mem := formatted(t)
	dev := dataCounter{memDevice: mem, n: new(atomic.Int64)}
	fs, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "p", Session: 1, DataCacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	a, err := fs.Create(ctx, RootIno, "f", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	want := make([]byte, 0, 2<<20)
	for len(want) < 2<<20 {
		p := make([]byte, 10240)
		for i := range p {
			p[i] = byte(rng.IntN(256))
		}
		if _, err := fs.Write(ctx, a.Ino, a.Gen, p, uint64(len(want)), false); err != nil {
			t.Fatal(err)
		}
		want = append(want, p...)
	}
	// Rewrites: inside what is gathered now, then before it, then a
	// byte-by-byte append.
	for _, w := range []struct {
		off int
		s   string
	}{{len(want) - 5000, "rewritten at the end"}, {100, "rewritten early"}, {len(want) - 10, "overlaps the end and grows"}} {
		if _, err := fs.Write(ctx, a.Ino, a.Gen, []byte(w.s), uint64(w.off), false); err != nil {
			t.Fatal(err)
		}
		if end := w.off + len(w.s); end > len(want) {
			want = append(want, make([]byte, end-len(want))...)
		}
		copy(want[w.off:], w.s)
	}
	if err := fs.Fsync(ctx, a.Ino, false); err != nil {
		t.Fatal(err)
	}
	if n := dev.n.Load(); n > 8 {
		t.Errorf("%d data writes for 2 MiB written in 10 KiB pieces, want a few", n)
	}
	got := make([]byte, len(want)+1)
	if n, err := fs.Read(ctx, a.Ino, a.Gen, got, 0); err != nil || !bytes.Equal(got[:n], want) {
		t.Fatalf("read back %d bytes, %v: content differs", n, err)
	}
	if err := fs.Close(ctx); err != nil {
		t.Fatal(err)
	}
	fs2 := openSolo(t, mem, "q")
	defer fs2.Close(ctx)
	if n, err := fs2.Read(ctx, a.Ino, a.Gen, got, 0); err != nil || !bytes.Equal(got[:n], want) {
		t.Fatalf("after a remount: read %d bytes, %v: content differs", n, err)
	}
}
