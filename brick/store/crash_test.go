package store

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/internal/testseed"
)

// crashBatch is batch id of a crash workload: three puts, a tombstone
// and a ref, each on a key of its own, so a batch's visibility can be
// judged alone.
func crashBatch(id uint64) []Op {
	return []Op{
		putOp(Key{Vol: 1, Block: 3 * id}, id),
		putOp(Key{Vol: 1, Block: 3*id + 1, Gen: 4}, id),
		{Kind: OpTombstone, Key: Key{Vol: 2, Block: id}, Seq: id},
		refOp(Key{Vol: 3, Block: id, Gen: 1}, id),
		putOp(Key{Vol: 1, Block: 3*id + 2}, id),
	}
}

// batchVisible reports whether batch id is wholly visible (true) or wholly
// absent (false), and fails the test if it is partly visible.
func batchVisible(t *testing.T, s *Store, id uint64) bool {
	t.Helper()
	ops := crashBatch(id)
	seen := 0
	for _, op := range ops {
		data, e, err := s.Get(op.Key)
		switch {
		case errors.Is(err, ErrNotFound):
			continue
		case err != nil:
			t.Fatalf("batch %d: Get %v: %v", id, op.Key, err)
		case e.Seq != op.Seq || e.Tombstone != (op.Kind == OpTombstone) || e.Ref != (op.Kind == OpRef) ||
			string(data) != string(op.Data)+string(op.Ref):
			t.Fatalf("batch %d: Get %v = %+v, wrong contents", id, op.Key, e)
		}
		seen++
	}
	if seen != 0 && seen != len(ops) {
		t.Fatalf("batch %d partly visible: %d of %d ops", id, seen, len(ops))
	}
	return seen == len(ops)
}

// crashDir builds a store directory from an index checkpoint and the
// segment files of src as they are now.
func crashDir(t *testing.T, index, src string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "index"), os.DirFS(index)); err != nil {
		t.Fatal(err)
	}
	copySegments(t, src, dir)
	return dir
}

// TestCrashTornTail cuts the last segment at random offsets after the
// index checkpoint: every batch that ended before the cut must be there,
// every other batch wholly absent.
func TestCrashTornTail(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 1))
	dir := t.TempDir()
	opts := Options{SegmentBytes: 128 << 10}
	s := openT(t, dir, opts)
	type pos struct {
		seg uint64
		end int64
	}
	var ends []pos
	apply := func(id uint64) {
		mustApply(t, s, crashBatch(id)...)
		seg, end := headPos(s)
		ends = append(ends, pos{seg, end})
	}
	for id := range uint64(20) {
		apply(id)
	}
	index := filepath.Join(t.TempDir(), "index")
	checkpointIndex(t, s, index)
	ckptSeg, ckptEnd := headPos(s)
	for id := uint64(20); id < 80; id++ {
		apply(id)
	}
	lastSeg, lastEnd := headPos(s)
	if lastSeg < ckptSeg+2 {
		t.Fatalf("workload spans segments %d..%d; want replay over several", ckptSeg, lastSeg)
	}
	lo := int64(0)
	if ckptSeg == lastSeg {
		lo = ckptEnd
	}
	for trial := range 8 {
		cut := lo + rng.Int64N(lastEnd-lo+1)
		if trial == 0 {
			cut = lastEnd - 1 // one byte short of the last commit record
		}
		crash := crashDir(t, index, dir)
		if err := os.Truncate(filepath.Join(crash, segName(lastSeg)), cut); err != nil {
			t.Fatal(err)
		}
		c, err := Open(crash, opts)
		if err != nil {
			t.Fatalf("cut at %d: Open: %v", cut, err)
		}
		for id, p := range ends {
			want := p.seg < lastSeg || p.end <= cut
			if got := batchVisible(t, c, uint64(id)); got != want {
				t.Fatalf("cut at %d: batch %d (ends %d:%d) visible %v, want %v", cut, id, p.seg, p.end, got, want)
			}
		}
		// The torn tail is gone and the store takes writes after it.
		mustApply(t, c, crashBatch(1000)...)
		if !batchVisible(t, c, 1000) {
			t.Fatal("batch after recovery not visible")
		}
		c.Close()
	}
}

// TestCrashCopyWhileWriting copies a store while 16 writers run: every
// batch acknowledged before the copy started must be there, and no batch
// may be partly visible.
func TestCrashCopyWhileWriting(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{SegmentBytes: 256 << 10})
	var next atomic.Uint64
	var stop atomic.Bool
	var mu sync.Mutex
	acked := map[uint64]bool{}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for !stop.Load() {
				id := next.Add(1)
				if err := s.Apply(context.Background(), crashBatch(id)); err != nil {
					t.Errorf("Apply %d: %v", id, err)
					return
				}
				mu.Lock()
				acked[id] = true
				mu.Unlock()
			}
		})
	}
	waitFor := func(n uint64) {
		for next.Load() < n && !t.Failed() {
			time.Sleep(time.Millisecond)
		}
	}
	waitFor(50)
	index := filepath.Join(t.TempDir(), "index")
	checkpointIndex(t, s, index)
	waitFor(250)
	mu.Lock()
	before := make(map[uint64]bool, len(acked))
	for id := range acked {
		before[id] = true
	}
	mu.Unlock()
	crash := crashDir(t, index, dir) // while the writers go on
	stop.Store(true)
	wg.Wait()

	c := openT(t, crash, Options{SegmentBytes: 256 << 10})
	visible := 0
	for id := uint64(1); id <= next.Load(); id++ {
		v := batchVisible(t, c, id)
		if before[id] && !v {
			t.Fatalf("batch %d acknowledged before the copy is missing", id)
		}
		if v {
			visible++
		}
	}
	t.Logf("%d batches acknowledged before the copy, %d visible after recovery, %d started", len(before), visible, next.Load())
}

// TestBitRotHeader rots the header of a record in the middle of a sealed
// segment, once where the index knows the record and once where recovery
// must replay past it: Open succeeds and only that record is affected.
func TestBitRotHeader(t *testing.T) {
	for _, replay := range []bool{false, true} {
		t.Run("replay="+strconv.FormatBool(replay), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{SegmentBytes: SegmentBytesMin}
			s := openT(t, dir, opts)
			index := filepath.Join(t.TempDir(), "index")
			checkpointIndex(t, s, index) // empty index: recovery replays everything
			for id := range uint64(30) {
				mustApply(t, s, crashBatch(id)...)
			}
			victim := crashBatch(10)[0].Key
			loc := location(t, s, victim)
			if loc.seg == s.headID.Load() {
				t.Fatal("victim not in a sealed segment")
			}
			s.Close()
			if replay {
				dir = crashDir(t, index, dir)
			}
			flipByte(t, dir, loc.seg, int64(loc.off)+20) // the block field

			c := openT(t, dir, opts)
			_, _, err := c.Get(victim)
			if replay && !errors.Is(err, ErrNotFound) || !replay && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Get rotten record: %v", err)
			}
			for id := range uint64(30) {
				if id != 10 && !batchVisible(t, c, id) {
					t.Fatalf("batch %d lost", id)
				}
			}
		})
	}
}
