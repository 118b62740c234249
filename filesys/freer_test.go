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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plumeria-fs/plumeria/filesys/fstest"
	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// decommitCounter counts Decommit calls.
type decommitCounter struct {
	*memDevice
	n atomic.Int64
}

func (d *decommitCounter) Decommit(ctx context.Context, off, n uint64) error {
	d.n.Add(1)
	return d.memDevice.Decommit(ctx, off, n)
}

// unlinkHeld creates n files in directory "d" (every other one with data
// past the inline area), lets the kernel hold each (Hold) and unlinks them
// all, as rm does through FUSE: each becomes an orphan of this node.
func unlinkHeld(t *testing.T, fs *FS, n int) (files []Attr, data []byte) {
	t.Helper()
	ctx := context.Background()
	d, err := fs.Mkdir(ctx, RootIno, "d", 0o755, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Repeat([]byte("0123456789"), 1000)
	for i := range n {
		f, err := fs.Create(ctx, d.Ino, fmt.Sprintf("f%d", i), 0o644, Caller{}, true)
		if err != nil {
			t.Fatal(err)
		}
		p := data[:100]
		if i%2 == 0 {
			p = data
		}
		if _, err := fs.Write(ctx, f.Ino, f.Gen, p, 0, false); err != nil {
			t.Fatal(err)
		}
		fs.Hold(f.Ino)
		files = append(files, f)
	}
	for i := range n {
		if err := fs.Unlink(ctx, d.Ino, fmt.Sprintf("f%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := fs.orph.Len(); got != n {
		t.Fatalf("%d orphans listed after the unlinks, want %d", got, n)
	}
	return files, data
}

// forgetAll drops the kernel's hold on every file, each on a goroutine of
// its own as the FUSE adapter does, while the test holds the barrier: the
// freer's first batch waits for it and the rest queue up meanwhile.
func forgetAll(t *testing.T, fs *FS, files []Attr) {
	t.Helper()
	ctx := context.Background()
	h, err := fs.acquire(ctx, w(barrierLock))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fs.Unhold(ctx, f.Ino)
		}()
	}
	returned := make(chan struct{})
	go func() { wg.Wait(); close(returned) }()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Log("Unhold waits for the barrier: it frees the file itself")
	}
	h.release()
	<-returned
}

func waitOrphans(t *testing.T, fs *FS, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for fs.orph.Len() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d orphans still listed, want %d", fs.orph.Len(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFreerBatches: orphans the kernel forgets are freed several per
// transaction, and the extents of those with data are decommitted behind
// one log sync per batch, each once; the freed inodes record clean extents
// (no third transaction per file) and their table entries are cleared.
func TestFreerBatches(t *testing.T) {
	ctx := context.Background()
	dev := &decommitCounter{memDevice: formatted(t)}
	fs, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "a", Session: 1,
		FlushInterval: time.Hour, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close(ctx)
	const n = 128
	files, _ := unlinkHeld(t, fs, n)
	if err := fs.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	before, decommits := fs.LogStats(), dev.n.Load()
	forgetAll(t, fs, files)
	waitOrphans(t, fs, 0)
	for deadline := time.Now().Add(10 * time.Second); testutil.ToFloat64(fs.stats.orphansFreed) < n && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // counted just after the commit that cleared the table
	}
	if err := fs.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	after := fs.LogStats()
	// Three batches at most: the first (taken before the barrier was
	// released), then two of freeBatchMax. A transaction each, and a log
	// write each (the sync before the decommits) plus the last Sync.
	if recs := after.Records - before.Records; recs > 3 {
		t.Errorf("freeing %d orphans took %d transactions, want at most 3", n, recs)
	}
	if writes := after.Batches - before.Batches; writes > 4 {
		t.Errorf("freeing %d orphans took %d log writes, want at most 4", n, writes)
	}
	if got := dev.n.Load() - decommits; got != n/2 {
		t.Errorf("%d decommits, want one per file with data (%d)", got, n/2)
	}
	if got := testutil.ToFloat64(fs.stats.orphansFreed); got != n {
		t.Errorf("orphans freed %v, want %d", got, n)
	}
	zeros := make([]byte, 10000)
	for _, f := range files {
		if _, err := fs.Getattr(ctx, f.Ino); !errors.Is(err, ErrNotFound) {
			t.Fatalf("inode %d after the freer: %v, want not found", f.Ino, err)
		}
		b, err := fs.newTx(ctx).read(layout.InodeAddr(f.Ino), inodeLock(f.Ino))
		if err != nil {
			t.Fatal(err)
		}
		if in, _, err := layout.DecodeInode(b, f.Ino); err != nil || !in.Free() || in.HWM != 0 || in.Gen != f.Gen {
			t.Fatalf("freed inode %d: %+v, %v; want free, generation %d, clean extent", f.Ino, in, err, f.Gen)
		}
		got := make([]byte, len(zeros))
		if err := dev.ReadAt(ctx, got, layout.ExtentAddr(f.Ino)); err != nil || !bytes.Equal(got, zeros) {
			t.Fatalf("extent of freed inode %d not cleared (%v)", f.Ino, err)
		}
	}
}

// TestFreerKeepsReopened: an orphan opened again (by handle) after the
// kernel forgot it, before the freer got to it, is not freed: its data
// stay readable until its last Release frees it.
func TestFreerKeepsReopened(t *testing.T) {
	ctx := context.Background()
	fs := openWithRegistry(t, formatted(t), "a", prometheus.NewRegistry())
	defer fs.Close(ctx)
	files, data := unlinkHeld(t, fs, 2)
	h, err := fs.acquire(ctx, w(barrierLock))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		go fs.Unhold(ctx, f.Ino)
	}
	time.Sleep(10 * time.Millisecond) // the freer takes them and waits for the barrier
	f := files[0]
	if err := fs.Open(ctx, f.Ino, f.Gen); err != nil {
		t.Fatalf("open of an orphan not yet freed: %v", err)
	}
	h.release()
	waitOrphans(t, fs, 1)
	got := make([]byte, len(data))
	if n, err := fs.Read(ctx, f.Ino, f.Gen, got, 0); err != nil || n != len(data) || !bytes.Equal(got, data) {
		t.Fatalf("reopened orphan reads %d bytes, %v; want its data", n, err)
	}
	fs.Release(ctx, f.Ino)
	if got := fs.orph.Len(); got != 0 {
		t.Fatalf("%d orphans listed after the last release, want 0", got)
	}
	if _, err := fs.Getattr(ctx, f.Ino); !errors.Is(err, ErrNotFound) {
		t.Fatalf("orphan after its last release: %v, want not found", err)
	}
}

// TestFreerDrainedAtUnmount: orphans still queued when the node unmounts
// are freed by Close: the slot is freed, not left for a janitor.
func TestFreerDrainedAtUnmount(t *testing.T) {
	ctx := context.Background()
	dev := formatted(t)
	fs := openWithRegistry(t, dev, "a", prometheus.NewRegistry())
	files, _ := unlinkHeld(t, fs, 40)
	for _, f := range files {
		fs.Unhold(ctx, f.Ino)
	}
	if err := fs.Close(ctx); err != nil {
		t.Fatal(err)
	}
	b := openSolo(t, dev, "b")
	defer b.Close(ctx)
	slots, _, err := b.readSlots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range slots {
		if s.Used && s.Name == "a" {
			t.Fatalf("log slot %d of the unmounted node still used (recovered %v): its orphans were not freed", i, s.Recovered)
		}
	}
}

// TestDistinctBatch: a batch holds distinct inodes, at most freeBatchMax,
// and keeps the queue's order.
func TestDistinctBatch(t *testing.T) {
	var q []orphanRef
	for i := range freeBatchMax + 10 {
		q = append(q, orphanRef{ino: uint64(100 + i%(freeBatchMax+5)), gen: uint64(i)})
	}
	batch, rest := distinctBatch(q)
	if len(batch) != freeBatchMax || len(batch)+len(rest) != len(q) {
		t.Fatalf("batch %d, rest %d of %d", len(batch), len(rest), len(q))
	}
	seen := map[uint64]bool{}
	for i, u := range batch {
		if seen[u.ino] || u != q[i] {
			t.Fatalf("batch[%d] = %+v (duplicate %v)", i, u, seen[u.ino])
		}
		seen[u.ino] = true
	}
	batch, rest = distinctBatch(rest)
	if len(batch) != 10 || len(rest) != 0 {
		t.Fatalf("second batch %d, rest %d", len(batch), len(rest))
	}
}
