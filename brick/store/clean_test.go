package store

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// overwrite puts every key of vol 1 blocks [0, keys) rounds times, four
// keys per batch; the last round's seq is rounds.
func overwrite(t *testing.T, s *Store, keys, rounds uint64) {
	t.Helper()
	for seq := uint64(1); seq <= rounds; seq++ {
		for b := uint64(0); b < keys; b += 4 {
			var ops []Op
			for i := b; i < min(b+4, keys); i++ {
				ops = append(ops, putOp(Key{Vol: 1, Block: i}, seq))
			}
			mustApply(t, s, ops...)
		}
	}
}

func TestClean(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: SegmentBytesMin}
	s := openT(t, dir, opts)
	const keys, rounds = 40, 12
	overwrite(t, s, keys, rounds)
	before := s.Stats()
	n, err := s.Clean(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	after := s.Stats()
	t.Logf("before %+v\nafter  %+v", before, after)
	if n == 0 || after.CleanedBytes != n || after.UsedBytes >= before.UsedBytes/2 ||
		after.LiveBytes != before.LiveBytes || after.Entries != keys {
		t.Fatalf("Clean reclaimed %d", n)
	}
	for i := range uint64(keys) {
		checkPut(t, s, Key{Vol: 1, Block: i}, rounds)
	}
	s.Close()
	s = openT(t, dir, opts)
	if st := s.Stats(); st.UsedBytes != after.UsedBytes || st.LiveBytes != after.LiveBytes || st.Segments != after.Segments {
		t.Fatalf("after reopen %+v, want %+v", st, after)
	}
	for i := range uint64(keys) {
		checkPut(t, s, Key{Vol: 1, Block: i}, rounds)
	}
}

// TestCleanConcurrent runs the cleaner while writers overwrite and readers
// read: a read must always return the data of the entry it reports.
func TestCleanConcurrent(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: SegmentBytesMin}
	s := openT(t, dir, opts)
	const keys, writers = 32, 4
	var last [keys]atomic.Uint64 // last acknowledged seq per key
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range uint64(writers) {
		wg.Go(func() {
			for seq := uint64(1); !stop.Load(); seq++ {
				for b := w; b < keys; b += writers {
					mustApply(t, s, putOp(Key{Vol: 1, Block: b}, seq))
					last[b].Store(seq)
				}
			}
		})
	}
	wg.Go(func() {
		for b := uint64(0); !stop.Load(); b = (b + 1) % keys {
			data, e, err := s.Get(Key{Vol: 1, Block: b})
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil || string(data) != string(blockData(e.Key, e.Seq)) {
				t.Errorf("Get %d during cleaning: %+v %v", b, e, err)
				return
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	cleaner := make(chan struct{})
	go func() { s.RunCleaner(ctx, 5*time.Millisecond); close(cleaner) }()
	for s.Stats().CleanedBytes < 2<<20 && !t.Failed() {
		time.Sleep(10 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	cancel()
	<-cleaner
	t.Logf("%+v", s.Stats())
	check := func(s *Store) {
		for b := range uint64(keys) {
			checkPut(t, s, Key{Vol: 1, Block: b}, last[b].Load())
		}
	}
	check(s)
	s.Close()
	check(openT(t, dir, opts))
}

// TestCleanKeepsCorrupt: the cleaner moves a corrupt record verbatim, so
// it still reads as corrupt (and is not laundered into good-looking data).
func TestCleanKeepsCorrupt(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: SegmentBytesMin}
	s := openT(t, dir, opts)
	bad, good := Key{Vol: 5, Block: 1}, Key{Vol: 5, Block: 2}
	mustApply(t, s, putOp(bad, 1), putOp(good, 1), Op{Kind: OpTombstone, Key: Key{Vol: 5, Block: 3}, Seq: 1})
	overwrite(t, s, 8, 4) // seal the first segment, mostly dead
	loc := location(t, s, bad)
	s.Close()
	flipByte(t, dir, loc.seg, int64(loc.off)+headerBytes+7)

	s = openT(t, dir, opts)
	if _, err := s.Clean(context.Background()); err != nil {
		t.Fatal(err)
	}
	if now := location(t, s, bad); now.seg == loc.seg {
		t.Fatalf("record not moved: %+v", now)
	}
	if _, _, err := s.Get(bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get moved corrupt record: %v", err)
	}
	checkPut(t, s, good, 1)
	if _, e, err := s.Get(Key{Vol: 5, Block: 3}); err != nil || !e.Tombstone {
		t.Fatalf("moved tombstone: %+v %v", e, err)
	}
	s.Close()
	s = openT(t, dir, opts)
	if _, _, err := s.Get(bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get moved corrupt record after reopen: %v", err)
	}
}

// TestStaleMove: a move committed after the key was overwritten or removed
// must not bring the old record back, live or when replayed after a crash.
func TestStaleMove(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{})
	index := filepath.Join(t.TempDir(), "index")
	checkpointIndex(t, s, index)
	over, gone, kept := Key{Vol: 1, Block: 1}, Key{Vol: 1, Block: 2}, Key{Vol: 1, Block: 3}
	mustApply(t, s, putOp(over, 1), putOp(gone, 1), putOp(kept, 1))
	var stale []moved
	for _, k := range []Key{over, gone, kept} {
		e := location(t, s, k)
		rec := make([]byte, e.len)
		if err := s.readSegmentAt(s.mu.segs[e.seg], rec, int64(e.off)); err != nil {
			t.Fatal(err)
		}
		stale = append(stale, moved{seg: e.seg, off: e.off, rec: rec})
	}
	mustApply(t, s, putOp(over, 2), Op{Kind: OpRemove, Key: gone, Seq: 2})
	if err := s.moveRecords(context.Background(), stale); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		t.Helper()
		checkPut(t, s, over, 2)
		checkNotFound(t, s, gone)
		checkPut(t, s, kept, 1)
	}
	check(s)
	if e := location(t, s, kept); e.off == stale[2].off {
		t.Fatal("live move not applied")
	}
	s.Close()
	check(openT(t, crashDir(t, index, dir), Options{}))
}
