package filesys

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

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

// gatedDev holds file data writes that start in [lo, hi) until open is
// closed.
type gatedDev struct {
	*memDevice
	lo, hi uint64
	open   chan struct{}
}

func (d gatedDev) WriteData(ctx context.Context, p []byte, off uint64) error {
	if off >= d.lo && off < d.hi {
		<-d.open
	}
	return d.memDevice.WriteData(ctx, p, off)
}

// TestReadWaitsOnlyForOverlappingWrites: a read of pages no write under
// way touches does not wait for the file's other writes (random reads and
// writes of one file used to wait for each other), while a read of a page
// a write is still writing waits for it and returns its bytes.
func TestReadWaitsOnlyForOverlappingWrites(t *testing.T) {
	ctx := context.Background()
	mem := formatted(t)
	fs0, err := Open(ctx, Config{Dev: mem, Locker: fstest.SoloLocker{}, Table: "v", ID: "p", Session: 1})
	if err != nil {
		t.Fatal(err)
	}
	a, err := fs0.Create(ctx, RootIno, "f", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	old := bytes.Repeat([]byte{1}, 1<<20)
	if _, err := fs0.Write(ctx, a.Ino, a.Gen, old, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := fs0.Close(ctx); err != nil {
		t.Fatal(err)
	}
	base := layout.ExtentAddr(a.Ino)
	dev := gatedDev{memDevice: mem, lo: base, hi: base + pageBytes, open: make(chan struct{})}
	fs, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "p", Session: 2})
	if err != nil {
		t.Fatal(err)
	}
	// A write of the first page, held at the device.
	if _, err := fs.Write(ctx, a.Ino, a.Gen, bytes.Repeat([]byte{2}, 4096), 0, false); err != nil {
		t.Fatal(err)
	}
	fs.data.mu.Lock()
	fs.data.startAllLocked()
	fs.data.mu.Unlock()
	far := make([]byte, 4096)
	done := make(chan error, 1)
	go func() {
		_, err := fs.Read(ctx, a.Ino, a.Gen, far, 10*pageBytes)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil || !bytes.Equal(far, old[:4096]) {
			t.Fatalf("far read: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read of another page waited for a write under way")
	}
	near := make([]byte, 4096)
	go func() {
		_, err := fs.Read(ctx, a.Ino, a.Gen, near, 4096*2)
		done <- err
	}()
	select {
	case <-done:
		t.Fatal("a read of the page a write is writing did not wait for it")
	case <-time.After(200 * time.Millisecond):
	}
	close(dev.open)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4096)
	if _, err := fs.Read(ctx, a.Ino, a.Gen, got, 0); err != nil || !bytes.Equal(got, bytes.Repeat([]byte{2}, 4096)) {
		t.Fatalf("read of the written page: %v", err)
	}
	if err := fs.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWriteIndex: the write-behind's overlap index (inoWrites) answers as a
// scan of every write under way would, through random adds and removes of
// writes of all sizes (some spanning many slots, some ranges wider than
// the writes under way), and the oldest write under way is tracked as the
// lowest sequence number not finished.
func TestWriteIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var d dataWriter
	d.init(nil)
	const ino = 7
	live := map[uint64]dataWrite{}
	randRange := func() (uint64, uint64) {
		off := rng.Uint64N(4 << 20)
		n := uint64(1 + rng.IntN(4096))
		switch rng.IntN(4) {
		case 0:
			n = uint64(1 + rng.IntN(1<<20))
		case 1:
			n = ^uint64(0) - off // to the end of the extent: settle(ino)
		}
		return off, off + n
	}
	for step := range 20000 {
		if len(live) == 0 || rng.IntN(3) > 0 {
			off, end := randRange()
			if end-off > 1<<21 {
				end = off + 1<<20
			}
			w := dataWrite{ino: ino, off: off, end: end}
			live[d.addLocked(w)] = w
		} else {
			for s, w := range live { // a random one finishes
				delete(live, s)
				d.doneLocked(s, w)
				break
			}
		}
		oldest := d.seq + 1
		for s := range live {
			oldest = min(oldest, s)
		}
		if d.oldest != oldest {
			t.Fatalf("step %d: oldest %d, want %d", step, d.oldest, oldest)
		}
		off, end := randRange()
		before := uint64(rng.Int64N(int64(d.seq) + 2))
		want := false
		for s, w := range live {
			want = want || (s < before && w.off < end && off < w.end)
		}
		if got := d.overlapsBeforeLocked(dataWrite{ino: ino, off: off, end: end}, before); got != want {
			t.Fatalf("step %d: overlap of [%d, %d) before %d = %v, want %v (%d writes under way)", step, off, end, before, got, want, len(live))
		}
	}
}
