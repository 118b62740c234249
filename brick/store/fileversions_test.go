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
)

// fvGen is the store gen of generation g and file version f.
func fvGen(g uint64, f uint32) uint64 { return g<<32 | uint64(f) }

const unv = versionUnversioned

// fileVersions spells a block's versions on a volume with file versions:
// "1.2 1.3t 2.u" is a put of file version 2 in generation 1, a tombstone
// of version 3 in generation 1, and an unversioned put in generation 2.
func fileVersions(spec string) (gens []uint64, tomb []bool) {
	for _, w := range strings.Fields(spec) {
		t := strings.HasSuffix(w, "t")
		g, f, _ := strings.Cut(strings.TrimSuffix(w, "t"), ".")
		var gen, ver uint64
		fmt.Sscan(g, &gen)
		if f == "u" {
			ver = unv
		} else {
			fmt.Sscan(f, &ver)
		}
		gens, tomb = append(gens, fvGen(gen, uint32(ver))), append(tomb, t)
	}
	return gens, tomb
}

func spellFileVersions(gens []uint64, tomb []bool, keep []bool) string {
	var out []string
	for i, g := range gens {
		if keep != nil && !keep[i] {
			continue
		}
		f := fmt.Sprint(uint32(g))
		if uint32(g) == unv {
			f = "u"
		}
		w := fmt.Sprintf("%d.%s", g>>32, f)
		if tomb[i] {
			w += "t"
		}
		out = append(out, w)
	}
	return strings.Join(out, " ")
}

// readGen is the gen a reader of generation g reads at.
func readGen(g uint64) uint64 { return fvGen(g, unv) }

func TestFileVersionSurvivors(t *testing.T) {
	for _, tc := range []struct {
		versions string
		snaps    []uint64 // generations
		live     uint64   // generation
		keep     string
	}{
		{"", nil, 3, ""},
		{"1.1 1.2 1.3", nil, 1, "1.1 1.2 1.3"},         // every file version stays
		{"1.u 2.u 3.u", nil, 3, "3.u"},                 // only unversioned writes: as Survivors
		{"1.u 2.u 3.u", []uint64{1}, 3, "1.u 3.u"},     // as Survivors
		{"1.1 2.1 3.1", nil, 3, "3.1"},                 // one file version rewritten after snapshots
		{"1.1 2.1 3.1", []uint64{2}, 3, "2.1 3.1"},     // s2 reads 2.1
		{"1.1 1.2 2.3 2.4", nil, 2, "1.1 1.2 2.3 2.4"}, // a snapshot deleted between versions
		{"1.1 1.u 2.2", nil, 2, "1.1 2.2"},             // 1.u only the deleted snapshot at 1 read
		{"1.1 1.2t", nil, 1, "1.1 1.2t"},               // decommitted at version 2: version 1 stays
		{"1.2t", nil, 1, ""},                           // a lone tombstone
		{"1.1t 1.2", nil, 1, "1.2"},                    // a tombstone first hides nothing
		{"1.1 1.2t 1.3t", nil, 1, "1.1 1.2t"},          // a second tombstone hides nothing more
		{"1.1 1.2t 1.3", nil, 1, "1.1 1.2t 1.3"},       // version 2 reads zeros
		{"1.1 2.1 3.1", []uint64{1}, 2, "1.1 2.1 3.1"}, // above live: untouched
		{"1.5 2.3", nil, 2, "1.5 2.3"},                 // a block reused: version 5 stays though 2.3 hides it from readers of 5
		{"1.1 1.2 2.u 3.u", []uint64{2}, 3, "1.1 1.2 2.u 3.u"},
		{"1.1 1.2 2.u 3.u", nil, 3, "1.1 1.2 3.u"}, // 2.u only the deleted s2 read
	} {
		gens, tomb := fileVersions(tc.versions)
		var snaps []uint64
		for _, g := range tc.snaps {
			snaps = append(snaps, readGen(g))
		}
		if got := spellFileVersions(gens, tomb, FileVersionSurvivors(gens, tomb, snaps, readGen(tc.live))); got != tc.keep {
			t.Errorf("FileVersionSurvivors(%q, snaps %v, live %d) keeps %q, want %q", tc.versions, tc.snaps, tc.live, got, tc.keep)
		}
		checkFileVersionSurvivors(t, gens, tomb, snaps, readGen(tc.live))
	}
}

// versionView is what version reader (r, f) reads of a block with
// versions gens (only those present): the index of the put it sees, or
// -1 for zeros. f 0 is a reader of every file version.
func versionView(gens []uint64, tomb, present []bool, r Reader) int {
	for i := len(gens) - 1; i >= 0; i-- {
		if present[i] && r.accepts(gens[i]) {
			if tomb[i] {
				return -1
			}
			return i
		}
	}
	return -1
}

// checkFileVersionSurvivors checks FileVersionSurvivors against the
// reading rule: every reader at snaps and live, alone or combined with a
// version reader at any file version (those present, those in between,
// and beyond), reads the same after removing the dropped versions in
// ascending order, after each removal; the newest entry of each file
// version at or below live stays or, a tombstone, leaves its readers
// reading zeros; versions above live stay. Where every entry is
// unversioned it keeps what Survivors keeps.
func checkFileVersionSurvivors(t *testing.T, gens []uint64, tomb []bool, snaps []uint64, live uint64) {
	t.Helper()
	keep := FileVersionSurvivors(gens, tomb, snaps, live)
	spec := fmt.Sprintf("versions %q snaps %x live %x: keeps %q", spellFileVersions(gens, tomb, nil), snaps, live, spellFileVersions(gens, tomb, keep))
	fs := []uint32{0, 1, unv - 1, unv}
	for _, g := range gens {
		f := uint32(g)
		fs = append(fs, f, f+1, max(f, 1)-1)
	}
	var readers []Reader
	for _, r := range append(slices.Clone(snaps), live) {
		for _, f := range fs {
			readers = append(readers, Reader{Gen: r, Version: f})
		}
	}
	present := make([]bool, len(gens))
	for i := range present {
		present[i] = true
	}
	want := make([]int, len(readers))
	for j, r := range readers {
		want[j] = versionView(gens, tomb, present, r)
	}
	newest := map[uint32]int{}
	for i, g := range gens {
		if g > live && !keep[i] {
			t.Fatalf("%s: dropped version %x above live", spec, g)
		}
		if g <= live && uint32(g) != unv {
			newest[uint32(g)] = i
		}
	}
	for _, i := range newest {
		if !keep[i] && !tomb[i] {
			t.Fatalf("%s: dropped the newest put of file version %d", spec, uint32(gens[i]))
		}
	}
	for i := range gens {
		if keep[i] {
			continue
		}
		present[i] = false
		for j, r := range readers {
			if got := versionView(gens, tomb, present, r); got != want[j] {
				t.Fatalf("%s: after dropping %x, reader %v reads version %d, not %d", spec, gens[i], r, got, want[j])
			}
		}
	}
	allUnversioned := true
	for _, g := range gens {
		allUnversioned = allUnversioned && uint32(g) == unv
	}
	if allUnversioned && !slices.Equal(keep, Survivors(gens, tomb, snaps, live)) {
		t.Fatalf("%s: only unversioned entries, but Survivors keeps %v", spec, Survivors(gens, tomb, snaps, live))
	}
}

// TestFileVersionSurvivorsRandom compares FileVersionSurvivors with the
// reading rule on random histories written as a file system does: within
// a generation a block's file versions never decrease (seeded: a failure
// prints its case).
func TestFileVersionSurvivorsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		gens, tomb, snaps, live := randomFileVersions(rng)
		checkFileVersionSurvivors(t, gens, tomb, snaps, live)
	}
}

func randomFileVersions(rng *rand.Rand) (gens []uint64, tomb []bool, snaps []uint64, live uint64) {
	maxGen := uint64(1 + rng.IntN(4))
	for g := range maxGen + 1 {
		f := uint32(rng.IntN(3))
		for range rng.IntN(4) {
			f += uint32(1 + rng.IntN(3))
			v := f
			if rng.IntN(6) == 0 {
				v = unv
			}
			gens, tomb = append(gens, fvGen(g, v)), append(tomb, rng.IntN(4) == 0)
			if v == unv {
				break
			}
		}
	}
	for range rng.IntN(4) {
		snaps = append(snaps, readGen(uint64(rng.IntN(int(maxGen)+2))))
	}
	return gens, tomb, snaps, readGen(uint64(rng.IntN(int(maxGen) + 2)))
}

// FuzzFileVersionSurvivors: bytes spell versions (generation steps, file
// version steps, tombstone bit), snapshot generations and the live one.
// File versions need not grow within a generation here: the reading rule
// holds for any history.
func FuzzFileVersionSurvivors(f *testing.F) {
	f.Add([]byte{1, 2, 3}, []byte{0, 1, 2}, []byte{1}, uint8(3))
	f.Add([]byte{1, 0x81, 0}, []byte{0xff, 2, 1}, []byte{0, 2}, uint8(2))
	f.Fuzz(func(t *testing.T, genSteps, versions, snapBytes []byte, live uint8) {
		if len(genSteps) > 48 || len(snapBytes) > 16 {
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
		checkFileVersionSurvivors(t, gens, tomb, snaps, readGen(uint64(live&0x0f)))
	})
}

// TestLatestAtFileVersions: version readers over a block's entries in two
// snapshot generations and several file versions, with tombstones, read
// alone (LatestAt) and over a range (LatestRangeAt), with and without dst.
func TestLatestAtFileVersions(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	// Block 1: gen 1 writes versions 1 and 2 and an unversioned write
	// (the generation's last); gen 2 (after a snapshot at 1) writes
	// versions 3 and 4, then decommits at 5; gen 3 writes version 6.
	// Block 2: version 2 in gen 1, a tombstone at version 3 in gen 2.
	// Block 3: only unversioned writes, in gens 1 and 3.
	type w struct {
		block, gen uint64
		f          uint32
		tomb       bool
	}
	writes := []w{
		{1, 1, 1, false}, {1, 1, 2, false}, {1, 1, unv, false},
		{1, 2, 3, false}, {1, 2, 4, false}, {1, 2, 5, true},
		{1, 3, 6, false},
		{2, 1, 2, false}, {2, 2, 3, true},
		{3, 1, unv, false}, {3, 3, unv, false},
	}
	seqOf := map[Key]uint64{}
	for i, x := range writes {
		k := Key{Vol: 7, Block: x.block, Gen: fvGen(x.gen, x.f)}
		seqOf[k] = uint64(i + 1)
		if x.tomb {
			mustApply(t, s, Op{Kind: OpTombstone, Key: k, Seq: uint64(i + 1)})
		} else {
			mustApply(t, s, putOp(k, uint64(i+1)))
		}
	}
	// want spells what a reader reads of blocks 1, 2, 3: the key's
	// "gen.version" of the put, "0" for zeros (a tombstone or nothing).
	for _, tc := range []struct {
		r    Reader
		want [3]string
	}{
		{Reader{Gen: readGen(3)}, [3]string{"3.6", "0", "3.u"}},             // live
		{Reader{Gen: readGen(1)}, [3]string{"1.u", "1.2", "1.u"}},           // the snapshot at gen 1
		{Reader{Gen: readGen(2)}, [3]string{"0", "0", "1.u"}},               // a snapshot at gen 2
		{Reader{Gen: readGen(3), Version: 1}, [3]string{"1.1", "0", "0"}},   // version 1
		{Reader{Gen: readGen(3), Version: 2}, [3]string{"1.2", "1.2", "0"}}, // version 2
		{Reader{Gen: readGen(3), Version: 3}, [3]string{"2.3", "0", "0"}},   // version 3: block 2's tombstone
		{Reader{Gen: readGen(3), Version: 4}, [3]string{"2.4", "0", "0"}},
		{Reader{Gen: readGen(3), Version: 5}, [3]string{"0", "0", "0"}}, // decommitted at 5
		{Reader{Gen: readGen(3), Version: 6}, [3]string{"3.6", "0", "0"}},
		{Reader{Gen: readGen(3), Version: 1000}, [3]string{"3.6", "0", "0"}},
		{Reader{Gen: readGen(1), Version: 1}, [3]string{"1.1", "0", "0"}},   // version 1 in the snapshot at 1
		{Reader{Gen: readGen(1), Version: 4}, [3]string{"1.2", "1.2", "0"}}, // the snapshot had no version 4 yet
		{Reader{Gen: fvGen(2, 3)}, [3]string{"2.3", "0", "1.u"}},            // a raw gen in between
	} {
		var got [3]string
		for b := uint64(1); b <= 3; b++ {
			data, e, err := s.LatestAt(7, b, tc.r)
			switch {
			case errors.Is(err, ErrNotFound) || err == nil && e.Tombstone:
				got[b-1] = "0"
			case err != nil:
				t.Fatalf("LatestAt(%d, %v): %v", b, tc.r, err)
			default:
				got[b-1] = spellFileVersions([]uint64{e.Gen}, []bool{false}, nil)
				if !bytes.Equal(data, blockData(e.Key, seqOf[e.Key])) {
					t.Fatalf("LatestAt(%d, %v) read other bytes than %v's", b, tc.r, e.Key)
				}
			}
		}
		if got != tc.want {
			t.Errorf("LatestAt %v reads %v, want %v", tc.r, got, tc.want)
		}
		for _, dst := range [][]byte{nil, make([]byte, 3*4096)} {
			blocks, err := s.LatestRangeAt(7, 1, 4, tc.r, dst)
			if err != nil {
				t.Fatalf("LatestRangeAt(%v): %v", tc.r, err)
			}
			rgot := [3]string{"0", "0", "0"}
			for _, blk := range blocks {
				if blk.Err != nil {
					t.Fatalf("LatestRangeAt(%v) block %d: %v", tc.r, blk.Entry.Block, blk.Err)
				}
				if !blk.Entry.Tombstone {
					rgot[blk.Entry.Block-1] = spellFileVersions([]uint64{blk.Entry.Gen}, []bool{false}, nil)
				}
			}
			if rgot != tc.want {
				t.Errorf("LatestRangeAt %v (dst %v) reads %v, want %v", tc.r, dst != nil, rgot, tc.want)
			}
		}
	}
}

// TestPruneFileVersions: deleting the snapshot at gen 1 drops only what
// it alone read (block 1's unversioned write of gen 1), never a file
// version, and every remaining reader reads the same bytes.
func TestPruneFileVersions(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	spec := "1.1 1.2 1.u 2.3 2.4 2.5t 3.6"
	gens, tomb := fileVersions(spec)
	for i, g := range gens {
		k := Key{Vol: 7, Block: 1, Gen: g}
		if tomb[i] {
			mustApply(t, s, Op{Kind: OpTombstone, Key: k, Seq: uint64(i + 1)})
		} else {
			mustApply(t, s, putOp(k, uint64(i+1)))
		}
	}
	read := func() map[Reader][]byte {
		out := map[Reader][]byte{}
		for f := uint32(0); f <= 7; f++ {
			r := Reader{Gen: readGen(3), Version: f}
			data, _, err := s.LatestAt(7, 1, r)
			if err != nil && !errors.Is(err, ErrNotFound) {
				t.Fatal(err)
			}
			out[r] = data
		}
		return out
	}
	before := read()
	st, err := s.PruneFileVersions(context.Background(), 7, 0, 10, nil, readGen(3), nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Versions != 1 {
		t.Errorf("pruned %d versions, want 1 (1.u)", st.Versions)
	}
	var left []uint64
	var ltomb []bool
	s.Scan(7, 0, 10, func(e Entry) bool { left, ltomb = append(left, e.Gen), append(ltomb, e.Tombstone); return true })
	if got, want := spellFileVersions(left, ltomb, nil), "1.1 1.2 2.3 2.4 2.5t 3.6"; got != want {
		t.Errorf("left %q, want %q", got, want)
	}
	after := read()
	for r, b := range before {
		if !bytes.Equal(after[r], b) {
			t.Errorf("reader %v reads other bytes after the prune", r)
		}
	}
}
