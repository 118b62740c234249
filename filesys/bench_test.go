package filesys

import (
	"context"
	"errors"
	"fmt"
	"github.com/plumeria-fs/plumeria/filesys/layout"
	"sync"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys/fstest"
	"github.com/plumeria-fs/plumeria/lock"
)

// benchFS is a formatted in-memory volume with one directory of n files,
// mounted by one node with the single-node locker: the file system's own
// cost per operation, without FUSE, the network or the lock service.
func benchFS(b *testing.B, n int) (*FS, uint64, []string) {
	b.Helper()
	ctx := context.Background()
	dev := newMemDevice()
	if _, err := Format(ctx, dev, false, time.Now()); err != nil {
		b.Fatal(err)
	}
	fs, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "bench", Session: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fs.Close(ctx) })
	d, err := fs.Mkdir(ctx, RootIno, "d", 0o755, Caller{})
	if err != nil {
		b.Fatal(err)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("file-%06d", i)
		if _, err := fs.Create(ctx, d.Ino, names[i], 0o644, Caller{}, true); err != nil {
			b.Fatal(err)
		}
	}
	return fs, d.Ino, names
}

// BenchmarkStat is what a stat(2) through FUSE asks: LOOKUP, then GETATTR.
func BenchmarkStat(b *testing.B) {
	fs, dir, names := benchFS(b, 1000)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		a, err := fs.Lookup(ctx, dir, names[i%len(names)])
		if err != nil {
			b.Fatal(err)
		}
		if _, err := fs.Getattr(ctx, a.Ino); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCreate creates empty files in one directory.
func BenchmarkCreate(b *testing.B) {
	fs, dir, _ := benchFS(b, 0)
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		if _, err := fs.Create(ctx, dir, fmt.Sprintf("new-%08d", i), 0o644, Caller{}, true); err != nil {
			b.Fatal(err)
		}
	}
}

// countingLocker is the single-node locker that records what was asked.
type countingLocker struct {
	fstest.SoloLocker
	mu   sync.Mutex
	asks map[uint64]int
}

func (c *countingLocker) Acquire(ctx context.Context, table string, l uint64, mode lock.Mode) error {
	c.mu.Lock()
	c.asks[l]++
	c.mu.Unlock()
	return nil
}

// TestInodeLockPrefetch: after a create, the locks of the next free
// inodes of its group are asked for in a batch, ahead of the creates that
// need them, and their inode blocks are cached; the creates that follow
// keep the batches ahead of them.
func TestInodeLockPrefetch(t *testing.T) {
	ctx := context.Background()
	dev := newMemDevice()
	if _, err := Format(ctx, dev, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	lk := &countingLocker{asks: map[uint64]int{}}
	fs, err := Open(ctx, Config{Dev: dev, Locker: lk, Table: "v", ID: "p", Session: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close(ctx)
	a, err := fs.Create(ctx, RootIno, "f", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	fs.prefetch.wg.Wait()
	check := func(from, to uint64) {
		t.Helper()
		lk.mu.Lock()
		defer lk.mu.Unlock()
		for ino := from; ino <= to; ino++ {
			if lk.asks[inodeLock(ino)] == 0 || lk.asks[iopenLock(ino)] == 0 {
				t.Errorf("inode %d (after new inode %d) was not locked ahead", ino, a.Ino)
			}
			fs.cache.mu.Lock()
			cached := fs.cache.blocks[layout.InodeAddr(ino)] != nil
			fs.cache.mu.Unlock()
			if !cached {
				t.Errorf("inode %d's block was not read ahead", ino)
			}
		}
	}
	check(a.Ino+1, a.Ino+prefetchBatch)
	last := a
	for i := range 2 * prefetchBatch {
		if last, err = fs.Create(ctx, RootIno, fmt.Sprintf("g%d", i), 0o644, Caller{}, true); err != nil {
			t.Fatal(err)
		}
	}
	fs.prefetch.wg.Wait()
	check(last.Ino+1, last.Ino+prefetchLow/2) // a batch may have been under way at the last trigger
}

// TestAllocPassesOverABusyInode: a free inode whose lock an operation
// holds (a rename that locked it before another node freed it, waiting for
// the group this create holds) is passed over instead of waited for.
func TestAllocPassesOverABusyInode(t *testing.T) {
	ctx := context.Background()
	fs := openSolo(t, formatted(t), "p")
	defer fs.Close(ctx)
	a, err := fs.Create(ctx, RootIno, "a", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	fs.prefetch.wg.Wait()
	busy := fs.locks.get(inodeLock(a.Ino + 1))
	busy.Lock()
	defer func() { busy.Unlock(); fs.locks.put(inodeLock(a.Ino + 1)) }()
	done := make(chan struct{})
	var b Attr
	go func() {
		defer close(done)
		b, err = fs.Create(ctx, RootIno, "b", 0o644, Caller{}, true)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("create waited for a busy free inode")
	}
	if err != nil || b.Ino == a.Ino+1 {
		t.Fatalf("create: %+v %v (inode %d is busy)", b, err, a.Ino+1)
	}
}

// TestReadWriteCheckGeneration: a read or write through a handle of a
// freed file whose number a new file took is ErrStale, not the new file.
func TestReadWriteCheckGeneration(t *testing.T) {
	ctx := context.Background()
	fs := openSolo(t, formatted(t), "p")
	defer fs.Close(ctx)
	old, err := fs.Create(ctx, RootIno, "old", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Unlink(ctx, RootIno, "old"); err != nil {
		t.Fatal(err)
	}
	fs.prefetch.wg.Wait()
	var reused Attr
	for i := 0; reused.Ino != old.Ino; i++ {
		if i > 100 {
			t.Skip("the freed inode number was not reused")
		}
		if reused, err = fs.Create(ctx, RootIno, fmt.Sprintf("new%d", i), 0o644, Caller{}, true); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fs.Write(ctx, old.Ino, old.Gen, []byte("x"), 0, false); !errors.Is(err, ErrStale) {
		t.Fatalf("write through the old generation: %v", err)
	}
	if _, err := fs.Read(ctx, old.Ino, old.Gen, make([]byte, 1), 0); !errors.Is(err, ErrStale) {
		t.Fatalf("read through the old generation: %v", err)
	}
	if _, err := fs.Write(ctx, reused.Ino, reused.Gen, []byte("x"), 0, false); err != nil {
		t.Fatal(err)
	}
}
