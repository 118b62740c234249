package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
)

func k7(block, gen uint64) Key { return Key{Vol: 7, Block: block, Gen: gen} }

// filledStore holds vol 7: block 1 gens 0, 2 and a tombstone at 4; block 2
// gen 5; and vol 3 block 9.
func filledStore(t *testing.T) *Store {
	s := openT(t, t.TempDir(), Options{})
	mustApply(t, s, putOp(k7(1, 0), 10), putOp(k7(1, 2), 11), putOp(k7(2, 5), 12))
	mustApply(t, s, Op{Kind: OpTombstone, Key: k7(1, 4), Seq: 13}, putOp(Key{Vol: 3, Block: 9}, 14))
	return s
}

func TestRoundTrip(t *testing.T) {
	s := filledStore(t)
	k := k7
	checkPut(t, s, k(1, 0), 10)
	checkPut(t, s, k(1, 2), 11)
	checkNotFound(t, s, k(1, 1))
	if data, e, err := s.Get(k(1, 4)); err != nil || data != nil || !e.Tombstone || e.Seq != 13 {
		t.Fatalf("Get tombstone: data %d bytes, entry %+v, err %v", len(data), e, err)
	}

	// Overwrite, then remove: the older gen shows through again.
	mustApply(t, s, putOp(k(1, 2), 20))
	checkPut(t, s, k(1, 2), 20)
	mustApply(t, s, Op{Kind: OpRemove, Key: k(1, 4), Seq: 21}, Op{Kind: OpRemove, Key: k(9, 9), Seq: 22})
	checkNotFound(t, s, k(1, 4))
	if _, e, err := s.Latest(7, 1, 10); err != nil || e.Gen != 2 || e.Seq != 20 {
		t.Fatalf("Latest after remove: %+v %v", e, err)
	}

	var got []Key
	err := s.Scan(7, 1, 3, func(e Entry) bool { got = append(got, e.Key); return true })
	want := []Key{k(1, 0), k(1, 2), k(2, 5)}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Scan = %v %v, want %v", got, err, want)
	}
	got = nil
	s.Scan(7, 0, ^uint64(0), func(e Entry) bool { got = append(got, e.Key); return len(got) < 2 })
	if !slices.Equal(got, want[:2]) {
		t.Fatalf("Scan stopped early = %v, want %v", got, want[:2])
	}
	if vols, err := s.Vols(); err != nil || !slices.Equal(vols, []uint64{3, 7}) {
		t.Fatalf("Vols = %v %v", vols, err)
	}
	if st := s.Stats(); st.Entries != 4 || st.LiveBytes != 4*putRecordBytes {
		t.Fatalf("Stats = %+v, want 4 entries of %d bytes", st, putRecordBytes)
	}
}

// TestLatest: Latest returns the greatest gen <= maxGen, tombstones included.
func TestLatest(t *testing.T) {
	s := filledStore(t)
	latest := []struct {
		block, maxGen uint64
		wantGen       uint64 // with wantSeq 0: ErrNotFound
		wantSeq       uint64
		tomb          bool
	}{
		{block: 1, maxGen: 0, wantGen: 0, wantSeq: 10},
		{block: 1, maxGen: 1, wantGen: 0, wantSeq: 10},
		{block: 1, maxGen: 3, wantGen: 2, wantSeq: 11},
		{block: 1, maxGen: 4, wantGen: 4, wantSeq: 13, tomb: true},
		{block: 1, maxGen: ^uint64(0), wantGen: 4, wantSeq: 13, tomb: true},
		{block: 2, maxGen: 4},
		{block: 2, maxGen: 5, wantGen: 5, wantSeq: 12},
		{block: 3, maxGen: 100},
	}
	for _, c := range latest {
		t.Run(fmt.Sprintf("block=%d,max=%d", c.block, c.maxGen), func(t *testing.T) {
			data, e, err := s.Latest(7, c.block, c.maxGen)
			if c.wantSeq == 0 {
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("got %+v %v, want ErrNotFound", e, err)
				}
				return
			}
			if err != nil || e.Gen != c.wantGen || e.Seq != c.wantSeq || e.Tombstone != c.tomb {
				t.Fatalf("got %+v %v, want gen %d seq %d tomb %v", e, err, c.wantGen, c.wantSeq, c.tomb)
			}
			if c.tomb != (data == nil) || (!c.tomb && string(data) != string(blockData(e.Key, e.Seq))) {
				t.Fatalf("wrong data for %+v", e)
			}
		})
	}

}

func TestScanManyChunks(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	const n = 3*scanEntriesMax + 7
	ops := make([]Op, 0, n)
	for i := range uint64(n) {
		ops = append(ops, Op{Kind: OpTombstone, Key: Key{Vol: 1, Block: i / 2, Gen: i % 2}, Seq: i})
	}
	mustApply(t, s, ops...)
	var i uint64
	err := s.Scan(1, 0, n, func(e Entry) bool {
		if e.Seq != i {
			t.Fatalf("entry %d has seq %d", i, e.Seq)
		}
		i++
		return true
	})
	if err != nil || i != n {
		t.Fatalf("Scan saw %d of %d entries: %v", i, n, err)
	}
}

func TestApplyInvalid(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	good := putOp(Key{Vol: 1}, 1)
	cases := map[string][]Op{
		"short put":           {good, {Kind: OpPut, Key: Key{Vol: 1, Block: 1}, Data: make([]byte, 10)}},
		"tombstone with data": {good, {Kind: OpTombstone, Key: Key{Vol: 1, Block: 1}, Data: make([]byte, 1)}},
		"unknown kind":        {good, {Kind: 9}},
		"too many ops":        make([]Op, BatchOpsMax+1),
	}
	for name, ops := range cases {
		t.Run(name, func(t *testing.T) {
			if err := s.Apply(context.Background(), ops); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Apply = %v, want ErrInvalid", err)
			}
			checkNotFound(t, s, good.Key)
		})
	}
}

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: SegmentBytesMin}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range uint64(100) {
		mustApply(t, s, putOp(Key{Vol: i % 3, Block: i}, i), Op{Kind: OpTombstone, Key: Key{Vol: 9, Block: i}, Seq: i})
	}
	before := s.Stats()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(context.Background(), []Op{putOp(Key{}, 1)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Apply after Close = %v", err)
	}
	if _, _, err := s.Get(Key{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close = %v", err)
	}

	s = openT(t, dir, opts)
	for i := range uint64(100) {
		checkPut(t, s, Key{Vol: i % 3, Block: i}, i)
	}
	after := s.Stats()
	if after.Entries != before.Entries || after.LiveBytes != before.LiveBytes ||
		after.UsedBytes != before.UsedBytes || after.Segments != before.Segments || after.Segments < 3 {
		t.Fatalf("stats before close %+v, after reopen %+v", before, after)
	}
}

func TestCorruptData(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	keys := []Key{{Vol: 1, Block: 1}, {Vol: 1, Block: 2}, {Vol: 1, Block: 3}}
	for _, k := range keys {
		mustApply(t, s, putOp(k, 5))
	}
	bad := location(t, s, keys[1])
	s.Close()
	flipByte(t, dir, bad.seg, int64(bad.off)+headerBytes+1000)

	s = openT(t, dir, Options{})
	checkPut(t, s, keys[0], 5)
	checkPut(t, s, keys[2], 5)
	data, e, err := s.Get(keys[1])
	if !errors.Is(err, ErrCorrupt) || data != nil || e.Key != keys[1] || e.Seq != 5 {
		t.Fatalf("Get corrupt block: %d bytes, %+v, %v; want ErrCorrupt", len(data), e, err)
	}
	if _, _, err := s.Latest(1, 2, 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Latest corrupt block: %v", err)
	}
	if n := s.Stats().CorruptReads; n != 2 {
		t.Fatalf("CorruptReads = %d, want 2", n)
	}
	// Repair by rewriting, as the brick does from a replica.
	mustApply(t, s, putOp(keys[1], 6))
	checkPut(t, s, keys[1], 6)
}

func TestGroupCommit(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{SegmentBytes: 1 << 20})
	const writers, each = 32, 40
	var wg sync.WaitGroup
	for w := range uint64(writers) {
		wg.Go(func() {
			for i := range uint64(each) {
				k := Key{Vol: w, Block: i}
				if err := s.Apply(context.Background(), []Op{putOp(k, i), putOp(Key{Vol: w, Block: i, Gen: 1}, i)}); err != nil {
					t.Errorf("Apply: %v", err)
					return
				}
				checkPut(t, s, k, i) // read your write
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	t.Logf("batches %d commits %d (%.1f batches/fsync)", st.Batches, st.Commits, float64(st.Batches)/float64(st.Commits))
	if st.Batches != writers*each || st.Batches <= st.Commits {
		t.Fatalf("Stats %+v: want %d batches in fewer commits", st, writers*each)
	}
	s.Close()
	s = openT(t, dir, Options{SegmentBytes: 1 << 20})
	for w := range uint64(writers) {
		for i := range uint64(each) {
			checkPut(t, s, Key{Vol: w, Block: i}, i)
			checkPut(t, s, Key{Vol: w, Block: i, Gen: 1}, i)
		}
	}
}

func TestCapacity(t *testing.T) {
	dir := t.TempDir()
	opts := Options{CapacityBytes: 256 << 10, SegmentBytes: SegmentBytesMin}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	var acked uint64
	for ; ; acked++ {
		err := s.Apply(context.Background(), []Op{putOp(Key{Block: acked}, 1)})
		if errors.Is(err, ErrNoSpace) {
			break
		}
		if err != nil || acked > 1000 {
			t.Fatalf("Apply %d: %v", acked, err)
		}
	}
	st := s.Stats()
	if st.UsedBytes > opts.CapacityBytes || acked == 0 {
		t.Fatalf("after %d puts: %+v", acked, st)
	}
	// Metadata still fits, in the space kept back for it, then not.
	reserved := 0
	for ; ; reserved++ {
		err := s.ApplyReserved(context.Background(), []Op{putOp(Key{Block: acked + uint64(reserved)}, 1)})
		if errors.Is(err, ErrNoSpace) {
			break
		}
		if err != nil || reserved > 1000 {
			t.Fatalf("ApplyReserved %d: %v", reserved, err)
		}
	}
	if reserved == 0 {
		t.Fatal("a full store kept no space for metadata")
	}
	if st := s.Stats(); st.UsedBytes > opts.CapacityBytes-s.reserve {
		t.Fatalf("metadata used the cleaner's reserve: %+v", st)
	}
	for i := range acked {
		checkPut(t, s, Key{Block: i}, 1)
	}
	acked += uint64(reserved)
	s.Close()
	// More capacity: the same store takes writes again.
	opts.CapacityBytes *= 2
	s = openT(t, dir, opts)
	mustApply(t, s, putOp(Key{Block: acked}, 1))
	for i := range acked + 1 {
		checkPut(t, s, Key{Block: i}, 1)
	}
}
