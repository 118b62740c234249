package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/plumeria-fs/plumeria/internal/limits"
)

// versions spells a block's versions: "1 2t 5" is a put at gen 1, a
// tombstone at 2, a put at 5.
func versions(spec string) (gens []uint64, tomb []bool) {
	for _, f := range strings.Fields(spec) {
		t := strings.HasSuffix(f, "t")
		var g uint64
		fmt.Sscan(strings.TrimSuffix(f, "t"), &g)
		gens, tomb = append(gens, g), append(tomb, t)
	}
	return gens, tomb
}

func TestSurvivors(t *testing.T) {
	for _, tc := range []struct {
		versions string
		snaps    []uint64
		live     uint64
		keep     string // the versions kept, spelt as versions
	}{
		{"", nil, 3, ""},
		{"1", nil, 1, "1"},
		{"1 2 3", nil, 3, "3"},                     // no snapshot left: only the newest
		{"1 2 3", []uint64{1}, 3, "1 3"},           // s1 deleted... s2 deleted: 2 goes
		{"1 2 3", []uint64{2}, 3, "2 3"},           // A (gen 1) only s1 saw
		{"1 2 3", []uint64{1, 2}, 3, "1 2 3"},      // nothing deleted
		{"1 3", []uint64{2}, 3, "1 3"},             // s2 sees 1 (not rewritten under 2)
		{"1 2", []uint64{2, 2, 2}, 3, "2"},         // repeats
		{"1 2 3", []uint64{5, 0}, 3, "3"},          // gens no version has
		{"1 2t", nil, 2, ""},                       // decommitted, no snapshot: nothing left
		{"1 2t", []uint64{1}, 2, "1 2t"},           // the tombstone hides 1 from live
		{"1 2t 3t", []uint64{1, 2}, 3, "1 2t"},     // a second tombstone hides nothing more
		{"1t 2", []uint64{1}, 2, "2"},              // a tombstone first hides nothing
		{"1 2t 3", []uint64{2}, 3, "3"},            // s2 reads zeros with or without 1 and 2t
		{"1 2 3t 4", []uint64{3}, 4, "4"},          // s3 reads zeros: as if nothing were there
		{"1 2t 3 4t", []uint64{1, 3}, 4, "1 3 4t"}, // nobody reads 2t
		{"1 2t 3 4t", []uint64{1, 2, 3}, 4, "1 2t 3 4t"},
		{"1 2t 3 4t", []uint64{3}, 4, "3 4t"},
		{"1 2 7", []uint64{1}, 3, "1 2 7"}, // above live: untouched, and 2 is live's
		{"1 2 3", []uint64{1}, 2, "1 2 3"}, // live 2 sees 2; 3 above live
		{"1t", nil, 1, ""},                 // a lone tombstone
		{"1t 2t", []uint64{1}, 2, ""},
	} {
		gens, tomb := versions(tc.versions)
		keep := Survivors(gens, tomb, tc.snaps, tc.live)
		var got []string
		for i, k := range keep {
			if k {
				f := fmt.Sprint(gens[i])
				if tomb[i] {
					f += "t"
				}
				got = append(got, f)
			}
		}
		if strings.Join(got, " ") != tc.keep {
			t.Errorf("Survivors(%q, snaps %v, live %d) keeps %q, want %q", tc.versions, tc.snaps, tc.live, strings.Join(got, " "), tc.keep)
		}
	}
}

// view is what a reader at gen r reads of a block with versions gens
// (only those present): the index of the put it sees, or -1 for zeros.
func view(gens []uint64, tomb, present []bool, r uint64) int {
	for i := len(gens) - 1; i >= 0; i-- {
		if present[i] && gens[i] <= r {
			if tomb[i] {
				return -1
			}
			return i
		}
	}
	return -1
}

// checkSurvivors checks Survivors against the reading rule: every reader
// (snaps and live) reads the same after removing the dropped versions in
// ascending order, after each removal; each version kept at or below live
// is needed (removing it alone changes some reader's read); versions above
// live are kept.
func checkSurvivors(t *testing.T, gens []uint64, tomb []bool, snaps []uint64, live uint64) {
	t.Helper()
	keep := Survivors(gens, tomb, snaps, live)
	readers := append(slices.Clone(snaps), live)
	present := make([]bool, len(gens))
	for i := range present {
		present[i] = true
	}
	want := make([]int, len(readers))
	for j, r := range readers {
		want[j] = view(gens, tomb, present, r)
	}
	spec := fmt.Sprintf("versions %v tombstones %v snaps %v live %d: keep %v", gens, tomb, snaps, live, keep)
	for i := range gens {
		if gens[i] > live && !keep[i] {
			t.Fatalf("%s: dropped version %d above live", spec, gens[i])
		}
		if keep[i] {
			continue
		}
		present[i] = false
		for j, r := range readers {
			if got := view(gens, tomb, present, r); got != want[j] {
				t.Fatalf("%s: after dropping gen %d, reader %d reads version %d, not %d", spec, gens[i], r, got, want[j])
			}
		}
	}
	for i := range gens {
		if !keep[i] || gens[i] > live {
			continue
		}
		present[i] = false
		needed := false
		for j, r := range readers {
			needed = needed || view(gens, tomb, present, r) != want[j]
		}
		present[i] = true
		if !needed {
			t.Fatalf("%s: kept gen %d although no reader needs it", spec, gens[i])
		}
	}
}

// TestSurvivorsRandom compares Survivors with the reading rule on random
// histories (seeded: a failure prints its case).
func TestSurvivorsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		gens, tomb, snaps, live := randomVersions(rng)
		checkSurvivors(t, gens, tomb, snaps, live)
	}
}

func randomVersions(rng *rand.Rand) (gens []uint64, tomb []bool, snaps []uint64, live uint64) {
	maxGen := uint64(1 + rng.IntN(10))
	for g := range maxGen + 1 {
		if rng.IntN(2) == 0 {
			gens, tomb = append(gens, g), append(tomb, rng.IntN(3) == 0)
		}
	}
	for range rng.IntN(5) {
		snaps = append(snaps, uint64(rng.IntN(int(maxGen)+2)))
	}
	return gens, tomb, snaps, uint64(rng.IntN(int(maxGen) + 2))
}

// FuzzSurvivors: bytes spell versions (gen steps, tombstone bit), snapshot
// gens and the live gen.
func FuzzSurvivors(f *testing.F) {
	f.Add([]byte{1, 2, 3}, []byte{1}, uint8(3))
	f.Add([]byte{1, 0x81, 1}, []byte{2, 2}, uint8(4))
	f.Fuzz(func(t *testing.T, steps, snapBytes []byte, live uint8) {
		if len(steps) > 64 || len(snapBytes) > 64 {
			return
		}
		var gens []uint64
		var tomb []bool
		g := uint64(0)
		for i, b := range steps {
			if i > 0 {
				g += uint64(b&0x7f) + 1
			} else {
				g = uint64(b & 0x7f)
			}
			gens, tomb = append(gens, g), append(tomb, b&0x80 != 0)
		}
		var snaps []uint64
		for _, b := range snapBytes {
			snaps = append(snaps, uint64(b))
		}
		checkSurvivors(t, gens, tomb, snaps, uint64(live))
	})
}

// history builds a volume's blocks in s the way a brick does: writes go to
// the live gen, a snapshot records the live gen and bumps it, a decommit
// removes a block only the live gen has and hides one a snapshot sees
// behind a tombstone (brick.decommitOps). It returns the snapshots' gens
// by name and the live gen.
type history struct {
	s     *Store
	vol   uint64
	gen   uint64
	seq   uint64
	snaps map[string]uint64
}

func (h *history) put(t *testing.T, blocks ...uint64) {
	t.Helper()
	var ops []Op
	for _, b := range blocks {
		h.seq++
		ops = append(ops, putOp(Key{Vol: h.vol, Block: b, Gen: h.gen}, h.seq))
	}
	mustApply(t, h.s, ops...)
}

func (h *history) decommit(t *testing.T, b uint64) {
	t.Helper()
	var older, cur *Entry
	if err := h.s.Scan(h.vol, b, b+1, func(e Entry) bool {
		if e.Gen == h.gen {
			cur = &e
		} else {
			older = &e
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	h.seq++
	switch {
	case older == nil && cur != nil:
		mustApply(t, h.s, Op{Kind: OpRemove, Key: cur.Key, Seq: h.seq})
	case older == nil, cur != nil && cur.Tombstone, cur == nil && older.Tombstone:
	default:
		mustApply(t, h.s, Op{Kind: OpTombstone, Key: Key{Vol: h.vol, Block: b, Gen: h.gen}, Seq: h.seq})
	}
}

func (h *history) snapshot(name string) {
	h.snaps[name] = h.gen
	h.gen++
}

func (h *history) snapGens() []uint64 {
	var gens []uint64
	for _, g := range h.snaps {
		gens = append(gens, g)
	}
	return gens
}

// reads returns what each reader (snapshots by name, "" the live volume)
// reads of blocks [0, n): the data, zeros for a tombstone or no version.
func (h *history) reads(t *testing.T, n uint64) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	readers := map[string]uint64{"": h.gen}
	for name, g := range h.snaps {
		readers[name] = g
	}
	for name, g := range readers {
		buf := make([]byte, n*limits.BlockBytes)
		for b := range n {
			data, _, err := h.s.Latest(h.vol, b, g)
			if err != nil && !errors.Is(err, ErrNotFound) {
				t.Fatalf("Latest vol %d block %d gen %d: %v", h.vol, b, g, err)
			}
			copy(buf[b*limits.BlockBytes:], data)
		}
		out[name] = buf
	}
	return out
}

func sameReads(t *testing.T, what string, got, want map[string][]byte) {
	t.Helper()
	for name, w := range want {
		if g, ok := got[name]; !ok || !bytes.Equal(g, w) {
			t.Errorf("%s: reader %q reads other bytes", what, name)
		}
	}
}

// TestPrune: A, snapshot s1, B over most of it, snapshot s2, C over part
// of that and a decommit, then s1 is deleted. The prune keeps what s2 and
// the live volume read byte for byte, drops the versions only s1 saw
// (live bytes drop by their records), a second prune finds nothing, and
// the cleaner then reclaims their segments.
func TestPrune(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: SegmentBytesMin}
	s := openT(t, dir, opts)
	const n = 64
	h := &history{s: s, vol: 7, gen: 1, snaps: map[string]uint64{}}
	all := make([]uint64, n)
	for i := range all {
		all[i] = uint64(i)
	}
	h.put(t, all...)      // A
	h.snapshot("s1")      // sees A
	h.put(t, all[:48]...) // B over blocks 0..47
	h.snapshot("s2")      // sees B, and A at 48..63
	h.put(t, all[:16]...) // C over 0..15
	h.decommit(t, 20)     // tombstone over B (s2 sees it)
	h.decommit(t, 50)     // tombstone over A (s1, s2 see it)
	other := &history{s: s, vol: 8, gen: 1, snaps: map[string]uint64{}}
	other.put(t, 0, 1) // another volume: untouched
	other.snapshot("x")
	other.put(t, 0, 1)

	delete(h.snaps, "s1")
	before := h.reads(t, n)
	otherBefore := other.reads(t, 2)
	st0 := s.Stats()
	var batches [][]Op
	pst, err := s.Prune(context.Background(), h.vol, 0, ^uint64(0), h.snapGens(), h.gen, func(ctx context.Context, ops []Op) error {
		if len(ops) > BatchOpsMax {
			t.Errorf("batch of %d ops", len(ops))
		}
		batches = append(batches, slices.Clone(ops))
		return s.Apply(ctx, ops)
	})
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	// Only s1 saw A at 0..47: 48 versions, in 48 blocks.
	if pst.Versions != 48 || pst.Blocks != 48 || pst.Bytes != 48*putRecordBytes {
		t.Errorf("Prune removed %+v, want 48 versions of 48 blocks, %d bytes", pst, 48*putRecordBytes)
	}
	var removed []Key
	for _, b := range batches {
		for _, op := range b {
			if op.Kind != OpRemove || op.Key.Vol != h.vol || op.Key.Gen != 1 {
				t.Errorf("Prune removed %+v", op)
			}
			removed = append(removed, op.Key)
		}
	}
	if !slices.IsSortedFunc(removed, compareKeys) {
		t.Errorf("removals not in key order: %v", removed)
	}
	sameReads(t, "after prune", h.reads(t, n), before)
	sameReads(t, "other volume after prune", other.reads(t, 2), otherBefore)
	st1 := s.Stats()
	if st0.LiveBytes-st1.LiveBytes != pst.Bytes || st0.Entries-st1.Entries != pst.Versions {
		t.Errorf("live bytes %d → %d, entries %d → %d; want -%d and -%d", st0.LiveBytes, st1.LiveBytes, st0.Entries, st1.Entries, pst.Bytes, pst.Versions)
	}
	if again, err := s.Prune(context.Background(), h.vol, 0, ^uint64(0), h.snapGens(), h.gen, nil); err != nil || again != (PruneStats{}) {
		t.Errorf("second Prune: %+v, %v; want nothing", again, err)
	}

	// s2 deleted too: only the live volume's versions stay, and the
	// tombstones hide nothing anyone reads any more.
	delete(h.snaps, "s2")
	before = h.reads(t, n)
	pst, err = s.Prune(context.Background(), h.vol, 0, ^uint64(0), nil, h.gen, nil)
	if err != nil {
		t.Fatal(err)
	}
	// B at 0..15, and at 20 and 50 the tombstone and what it hid.
	if pst.Versions != 16+2+2 {
		t.Errorf("second deletion pruned %+v, want 20 versions", pst)
	}
	sameReads(t, "after pruning s2", h.reads(t, n), before)
	for _, b := range []uint64{20, 50} {
		if err := s.Scan(h.vol, b, b+1, func(e Entry) bool { t.Errorf("block %d keeps %+v", b, e); return true }); err != nil {
			t.Fatal(err)
		}
	}

	// The cleaner reclaims what the prunes left without a reader.
	st1 = s.Stats()
	if _, err := s.Clean(context.Background()); err != nil {
		t.Fatal(err)
	}
	st2 := s.Stats()
	t.Logf("before prune %+v\nafter prune  %+v\nafter clean  %+v", st0, st1, st2)
	if st2.UsedBytes >= st1.UsedBytes || st2.LiveBytes != st1.LiveBytes || st2.CleanedBytes == 0 {
		t.Errorf("Clean after prune: used %d → %d, live %d → %d", st1.UsedBytes, st2.UsedBytes, st1.LiveBytes, st2.LiveBytes)
	}
	sameReads(t, "after clean", h.reads(t, n), before)

	// And all of it survives a restart (the index replays the removals).
	s.Close()
	h.s = openT(t, dir, opts)
	other.s = h.s
	sameReads(t, "after reopen", h.reads(t, n), before)
	sameReads(t, "other volume after reopen", other.reads(t, 2), otherBefore)
	if st := h.s.Stats(); st.LiveBytes != st2.LiveBytes || st.Entries != st2.Entries {
		t.Errorf("after reopen %+v, want live %d entries %d", st, st2.LiveBytes, st2.Entries)
	}
}

// TestPruneStopped: a prune whose removals fail part way (a full disk, a
// crash) has removed only versions nobody reads, in order, and running it
// again finishes the job.
func TestPruneStopped(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 20 {
		dir := t.TempDir()
		s := openT(t, dir, Options{SegmentBytes: SegmentBytesMin})
		h := randomHistory(t, rng, s, 40)
		for name := range h.snaps {
			if rng.IntN(2) == 0 {
				delete(h.snaps, name)
			}
		}
		want := h.reads(t, 40)
		calls, failAt := 0, 1+rng.IntN(3)
		errFull := errors.New("disk full")
		_, err := s.Prune(context.Background(), h.vol, 0, 40, h.snapGens(), h.gen, func(ctx context.Context, ops []Op) error {
			if calls++; calls == failAt {
				// Part of this batch reached the disk, in order.
				if err := s.Apply(ctx, ops[:rng.IntN(len(ops)+1)]); err != nil {
					return err
				}
				return errFull
			}
			// Small batches: blocks' versions split across them.
			for len(ops) > 0 {
				k := min(len(ops), 1+rng.IntN(3))
				if err := s.Apply(ctx, ops[:k]); err != nil {
					return err
				}
				ops = ops[k:]
			}
			return nil
		})
		if err != nil && !errors.Is(err, errFull) {
			t.Fatalf("round %d: Prune: %v", round, err)
		}
		sameReads(t, fmt.Sprintf("round %d, stopped prune", round), h.reads(t, 40), want)
		s.Close()
		s = openT(t, dir, Options{SegmentBytes: SegmentBytesMin})
		h.s = s
		if _, err := s.Prune(context.Background(), h.vol, 0, 40, h.snapGens(), h.gen, nil); err != nil {
			t.Fatalf("round %d: Prune again: %v", round, err)
		}
		sameReads(t, fmt.Sprintf("round %d, prune again", round), h.reads(t, 40), want)
		if again, _ := s.Prune(context.Background(), h.vol, 0, 40, h.snapGens(), h.gen, nil); again != (PruneStats{}) {
			t.Errorf("round %d: a third prune removed %+v", round, again)
		}
	}
}

// randomHistory writes, decommits and snapshots blocks [0, n) at random.
func randomHistory(t *testing.T, rng *rand.Rand, s *Store, n uint64) *history {
	t.Helper()
	h := &history{s: s, vol: 3, gen: 1, snaps: map[string]uint64{}}
	for i := range 60 {
		switch r := rng.IntN(10); {
		case r < 6:
			var blocks []uint64
			for b := range n {
				if rng.IntN(3) == 0 {
					blocks = append(blocks, b)
				}
			}
			if len(blocks) > 0 {
				h.put(t, blocks...)
			}
		case r < 8:
			h.decommit(t, uint64(rng.IntN(int(n))))
		default:
			h.snapshot(fmt.Sprintf("s%d", i))
		}
	}
	return h
}

// TestPruneRandom: random histories, random deletions; every remaining
// reader reads the same bytes after the prune, and the prune leaves no
// version Survivors would drop.
func TestPruneRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for round := range 20 {
		s := openT(t, t.TempDir(), Options{SegmentBytes: SegmentBytesMin})
		h := randomHistory(t, rng, s, 32)
		for name := range h.snaps {
			if rng.IntN(3) == 0 {
				delete(h.snaps, name)
			}
		}
		want := h.reads(t, 32)
		if _, err := s.Prune(context.Background(), h.vol, 0, ^uint64(0), h.snapGens(), h.gen, nil); err != nil {
			t.Fatal(err)
		}
		sameReads(t, fmt.Sprintf("round %d", round), h.reads(t, 32), want)
		var gens []uint64
		var tomb []bool
		check := func() {
			for i, k := range Survivors(gens, tomb, h.snapGens(), h.gen) {
				if !k {
					t.Errorf("round %d: gen %d of a block left behind (versions %v)", round, gens[i], gens)
				}
			}
			gens, tomb = gens[:0], tomb[:0]
		}
		last := ^uint64(0)
		if err := s.Scan(h.vol, 0, ^uint64(0), func(e Entry) bool {
			if e.Block != last {
				check()
				last = e.Block
			}
			gens, tomb = append(gens, e.Gen), append(tomb, e.Tombstone)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		check()
	}
}
