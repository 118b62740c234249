package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestRetainedSurvivors(t *testing.T) {
	for _, tc := range []struct {
		versions string
		snaps    []uint64 // generations
		live     uint64   // generation
		keep     []uint32
		below    uint32
		stay     string
	}{
		{"", nil, 3, nil, 5, ""},
		{"1.1 1.2 1.3 1.4 1.5", nil, 1, []uint32{2, 4}, 5, "1.2 1.4 1.5"},
		{"1.1 1.2 1.3 1.4 1.5", nil, 1, nil, 5, "1.5"},
		{"1.1 1.2 1.3 1.4 1.5", nil, 1, nil, 6, "1.5"}, // live reads 1.5
		{"1.1 1.2 1.3 1.4 1.5", nil, 1, nil, 1, "1.1 1.2 1.3 1.4 1.5"},
		{"1.1 1.3", nil, 1, []uint32{2}, 5, "1.1 1.3"},         // version 2 reads 1.1
		{"1.1 1.2 1.7", nil, 1, nil, 5, "1.2 1.7"},             // versions 5 and 6 read 1.2
		{"1.1 1.2 2.3 2.4", []uint64{1}, 2, nil, 5, "1.2 2.4"}, // the snapshot reads 1.2
		{"1.1 1.2 2.3 2.4", []uint64{1}, 2, []uint32{3}, 5, "1.2 2.3 2.4"},
		{"1.1 1.2t", nil, 1, nil, 5, ""},                 // version 1 dropped: the tombstone hides nothing
		{"1.1 1.2t", nil, 1, []uint32{1}, 5, "1.1 1.2t"}, // it hides version 1 from live
		{"1.1 1.2t 1.3", nil, 1, []uint32{2}, 5, "1.3"},  // version 2 reads zeros without it
		{"1.1 1.2t 1.3", nil, 1, []uint32{1, 2}, 5, "1.1 1.2t 1.3"},
		{"1.1 1.2t 1.6t", nil, 1, []uint32{1}, 5, "1.1 1.2t 1.6t"}, // above below: left as is
		{"1.1 1.u 2.2", []uint64{1}, 2, nil, 5, "1.1 1.u 2.2"},     // unversioned: left as is; (s1, 5) reads 1.1
		{"1.1 1.u 2.2", nil, 2, nil, 5, "1.u 2.2"},
		{"1.1 2.2 3.3", []uint64{1}, 2, nil, 5, "1.1 2.2 3.3"}, // above live: untouched
	} {
		gens, tomb := fileVersions(tc.versions)
		var snaps []uint64
		for _, g := range tc.snaps {
			snaps = append(snaps, readGen(g))
		}
		stay := RetainedSurvivors(gens, tomb, snaps, readGen(tc.live), tc.keep, tc.below)
		if got := spellFileVersions(gens, tomb, stay); got != tc.stay {
			t.Errorf("RetainedSurvivors(%q, snaps %v, live %d, keep %v, below %d) keeps %q, want %q",
				tc.versions, tc.snaps, tc.live, tc.keep, tc.below, got, tc.stay)
		}
		checkRetainedSurvivors(t, gens, tomb, snaps, readGen(tc.live), tc.keep, tc.below)
	}
}

// retainedReaders lists the readers RetainedSurvivors promises to keep
// reading the same: every reader gen alone, (live, k) for k in keep, and
// (R, f) for f >= below at every reader gen R, at the file versions that
// stand for all of them (those present, and one above each, below, the
// greatest).
func retainedReaders(gens, snaps []uint64, live uint64, keep []uint32, below uint32) []Reader {
	fs := []uint32{below, versionMax}
	for _, g := range gens {
		for _, f := range []uint32{uint32(g), uint32(g) + 1} {
			if f >= below && f <= versionMax {
				fs = append(fs, f)
			}
		}
	}
	var out []Reader
	for _, r := range append(slices.Clone(snaps), live) {
		out = append(out, Reader{Gen: r})
		for _, f := range fs {
			out = append(out, Reader{Gen: r, Version: f})
		}
	}
	for _, k := range keep {
		out = append(out, Reader{Gen: live, Version: k})
	}
	return out
}

// checkRetainedSurvivors checks RetainedSurvivors against the reading
// rule: every retained reader reads the same after removing the dropped
// versions in ascending order, after each removal; entries of file
// versions at or above below, and above live, stay; every put that stays
// below below is read by a retained reader, and stays under
// FileVersionSurvivors too (which retains every version); deciding again
// on what is left drops nothing.
func checkRetainedSurvivors(t *testing.T, gens []uint64, tomb []bool, snaps []uint64, live uint64, keep []uint32, below uint32) {
	t.Helper()
	stay := RetainedSurvivors(gens, tomb, snaps, live, keep, below)
	spec := fmt.Sprintf("versions %q snaps %x live %x keep %v below %d: keeps %q",
		spellFileVersions(gens, tomb, nil), snaps, live, keep, below, spellFileVersions(gens, tomb, stay))
	readers := retainedReaders(gens, snaps, live, keep, below)
	present := make([]bool, len(gens))
	for i := range present {
		present[i] = true
	}
	want := make([]int, len(readers))
	read := make([]bool, len(gens))
	for j, r := range readers {
		if want[j] = versionView(gens, tomb, present, r); want[j] >= 0 {
			read[want[j]] = true
		}
	}
	all := FileVersionSurvivors(gens, tomb, snaps, live)
	for i, g := range gens {
		switch {
		case (g > live || uint32(g) >= below) && !stay[i]:
			t.Fatalf("%s: dropped %x, above live or of a file version not below %d", spec, g, below)
		case stay[i] && !tomb[i] && g <= live && uint32(g) < below && !read[i]:
			t.Fatalf("%s: kept put %x that no retained reader reads", spec, g)
		case stay[i] && !tomb[i] && uint32(g) < below && !all[i]:
			t.Fatalf("%s: kept put %x that FileVersionSurvivors drops", spec, g)
		}
	}
	for i := range gens {
		if stay[i] {
			continue
		}
		present[i] = false
		for j, r := range readers {
			if got := versionView(gens, tomb, present, r); got != want[j] {
				t.Fatalf("%s: after dropping %x, reader %v reads version %d, not %d", spec, gens[i], r, got, want[j])
			}
		}
	}
	var left []uint64
	var ltomb []bool
	for i := range gens {
		if stay[i] {
			left, ltomb = append(left, gens[i]), append(ltomb, tomb[i])
		}
	}
	if again := RetainedSurvivors(left, ltomb, snaps, live, keep, below); slices.Contains(again, false) {
		t.Fatalf("%s: deciding again on what is left drops %q", spec, spellFileVersions(left, ltomb, slices.Collect(func(yield func(bool) bool) {
			for _, k := range again {
				if !yield(!k) {
					return
				}
			}
		})))
	}
}

// TestRetainedSurvivorsRandom compares RetainedSurvivors with the reading
// rule on random histories written as a file system does, with random
// kept versions and bounds (seeded: a failure prints its case).
func TestRetainedSurvivorsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 20000 {
		gens, tomb, snaps, live := randomFileVersions(rng)
		below := uint32(1 + rng.IntN(14))
		var keep []uint32
		for range rng.IntN(4) {
			if below > 1 {
				keep = append(keep, uint32(1+rng.IntN(int(below)-1)))
			}
		}
		checkRetainedSurvivors(t, gens, tomb, snaps, live, keep, below)
	}
}

// FuzzRetainedSurvivors: bytes spell versions (generation steps, file
// version steps, tombstone bit), snapshot generations, the live one, the
// kept versions and the bound. File versions need not grow within a
// generation here: the reading rule holds for any history.
func FuzzRetainedSurvivors(f *testing.F) {
	f.Add([]byte{1, 2, 3}, []byte{0, 1, 2}, []byte{1}, uint8(3), []byte{1}, uint8(2))
	f.Add([]byte{1, 0x81, 0}, []byte{0xff, 2, 1}, []byte{0, 2}, uint8(2), []byte{}, uint8(3))
	f.Fuzz(func(t *testing.T, genSteps, versions, snapBytes []byte, live uint8, keepBytes []byte, below uint8) {
		if len(genSteps) > 48 || len(snapBytes) > 16 || len(keepBytes) > 16 || below == 0 {
			return
		}
		var gens []uint64
		var tomb []bool
		g := uint64(0)
		for i, b := range genSteps {
			if i > 0 {
				g += uint64(b & 0x03)
			}
			v := uint32(unv)
			if i < len(versions) && versions[i] != 0xff {
				v = uint32(versions[i])
			}
			k := fvGen(g, v)
			if n := len(gens); n > 0 && gens[n-1] >= k {
				continue // keep gens ascending, no repeats
			}
			gens, tomb = append(gens, k), append(tomb, b&0x80 != 0)
		}
		var snaps []uint64
		for _, b := range snapBytes {
			snaps = append(snaps, readGen(uint64(b&0x0f)))
		}
		var keep []uint32
		for _, b := range keepBytes {
			if b != 0 && b < below {
				keep = append(keep, uint32(b))
			}
		}
		checkRetainedSurvivors(t, gens, tomb, snaps, readGen(uint64(live&0x0f)), keep, uint32(below))
	})
}

// TestPruneRetained: on a block with five file versions in two
// generations (a snapshot between versions 2 and 3, a decommit at 4) and
// a block of another range, keeping versions 2 and 4 below 5 drops the
// entries of versions 1 and 3 only in the blocks asked for, every
// retained reader reads the same bytes, and a second prune removes
// nothing.
func TestPruneRetained(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	seq := uint64(0)
	write := func(block uint64, spec string) {
		gens, tomb := fileVersions(spec)
		for i, g := range gens {
			seq++
			k := Key{Vol: 7, Block: block, Gen: g}
			if tomb[i] {
				mustApply(t, s, Op{Kind: OpTombstone, Key: k, Seq: seq})
			} else {
				mustApply(t, s, putOp(k, seq))
			}
		}
	}
	write(1, "1.1 1.2 2.3 2.4t 2.5")
	write(2, "1.1 2.3 2.4")
	write(3, "1.1 1.2 2.3") // not asked for
	snaps, live := []uint64{readGen(1)}, readGen(2)
	readers := []Reader{{Gen: live}, {Gen: snaps[0]}, {Gen: live, Version: 2}, {Gen: live, Version: 4}, {Gen: live, Version: 5}}
	read := func() map[string][]byte {
		out := map[string][]byte{}
		for b := uint64(1); b <= 3; b++ {
			for _, r := range readers {
				data, _, err := s.LatestAt(7, b, r)
				if err != nil && !errors.Is(err, ErrNotFound) {
					t.Fatal(err)
				}
				out[fmt.Sprintf("block %d %v", b, r)] = data
			}
		}
		return out
	}
	list := func(b uint64) string {
		var gens []uint64
		var tomb []bool
		if err := s.Scan(7, b, b+1, func(e Entry) bool { gens, tomb = append(gens, e.Gen), append(tomb, e.Tombstone); return true }); err != nil {
			t.Fatal(err)
		}
		return spellFileVersions(gens, tomb, nil)
	}
	before := read()
	ctx := context.Background()
	in := func(b uint64) bool { return b != 3 }
	st, err := s.PruneRetained(ctx, 7, 0, 100, in, snaps, live, []uint32{4, 2, 2}, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Block 1: 1.1 (read by none: the snapshot reads 1.2) and 2.3.
	// Block 2: 2.3 only (1.1 is version 2's and the snapshot's).
	if st.Versions != 3 || st.Blocks != 2 || st.Bytes <= 0 {
		t.Errorf("pruned %+v, want 3 versions of 2 blocks", st)
	}
	for b, want := range map[uint64]string{1: "1.2 2.4t 2.5", 2: "1.1 2.4", 3: "1.1 1.2 2.3"} {
		if got := list(b); got != want {
			t.Errorf("block %d left %q, want %q", b, got, want)
		}
	}
	after := read()
	for k, b := range before {
		if !bytes.Equal(after[k], b) {
			t.Errorf("%s reads other bytes after the prune", k)
		}
	}
	if st, err := s.PruneRetained(ctx, 7, 0, 100, in, snaps, live, []uint32{2, 4}, 5, nil); err != nil || st != (PruneStats{}) {
		t.Errorf("second prune: %+v, %v; want nothing removed", st, err)
	}
}
