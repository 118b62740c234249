package store

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/plumeria-fs/plumeria/internal/limits"
)

// TestLatestRange: for every range, LatestRange gives what Latest gives for
// each block (entry, data, ErrNotFound as a missing block, ErrCorrupt with
// the entry), over batches that lie next to each other in a segment, single
// writes, several generations and tombstones.
func TestLatestRange(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{})
	rng := rand.New(rand.NewPCG(1, 2))
	seq := uint64(0)
	for range 40 {
		var ops []Op
		start, gen := rng.Uint64N(60), rng.Uint64N(4)
		for b := start; b < start+1+rng.Uint64N(12); b++ {
			seq++
			switch rng.IntN(8) {
			case 0:
				ops = append(ops, Op{Kind: OpTombstone, Key: k7(b, gen), Seq: seq})
			case 1, 2:
				ops = append(ops, refOp(k7(b, gen), seq))
			default:
				ops = append(ops, putOp(k7(b, gen), seq))
			}
		}
		mustApply(t, s, ops...)
	}
	// Corrupt one put record in the middle of a run, and one ref.
	var bad, badRef Key
	s.Scan(7, 20, 80, func(e Entry) bool {
		if !e.Tombstone && !e.Ref && bad == (Key{}) {
			bad = e.Key
		}
		if e.Ref && badRef == (Key{}) {
			badRef = e.Key
		}
		return bad == (Key{}) || badRef == (Key{})
	})
	loc, locRef := location(t, s, bad), location(t, s, badRef)
	s.Close()
	flipByte(t, dir, loc.seg, int64(loc.off)+headerBytes+7)
	flipByte(t, dir, locRef.seg, int64(locRef.off)+headerBytes+7)
	s = openT(t, dir, Options{})

	for _, maxGen := range []uint64{0, 1, 2, 3, ^uint64(0)} {
		for lo := uint64(0); lo < 80; lo += 7 {
			hi := lo + 1 + rng.Uint64N(30)
			var dst []byte
			if lo%2 == 1 { // half the ranges read into dst
				dst = bytes.Repeat([]byte{0xEE}, int(hi-lo)*limits.BlockBytes)
			}
			got, err := s.LatestRange(7, lo, hi, maxGen, dst)
			if err != nil {
				t.Fatalf("LatestRange(%d, %d, %d): %v", lo, hi, maxGen, err)
			}
			checkDst(t, got, dst, lo, hi)
			i := 0
			for b := lo; b < hi; b++ {
				data, e, err := s.Latest(7, b, maxGen)
				if errors.Is(err, ErrNotFound) {
					if i < len(got) && got[i].Entry.Key.Block == b {
						t.Fatalf("block %d max gen %d: LatestRange has %+v, Latest none", b, maxGen, got[i].Entry)
					}
					continue
				}
				if i >= len(got) || got[i].Entry != e {
					t.Fatalf("block %d max gen %d: Latest %+v, LatestRange lacks it or differs: %+v", b, maxGen, e, got[i:])
				}
				g := got[i]
				i++
				if errors.Is(err, ErrCorrupt) != errors.Is(g.Err, ErrCorrupt) || (err == nil) != (g.Err == nil) {
					t.Fatalf("block %d: Latest err %v, LatestRange err %v", b, err, g.Err)
				}
				got := g.Data
				if e.Ref {
					if g.Data != nil || g.InDst || (g.Err == nil) != (len(g.Ref) == RefBytes) {
						t.Fatalf("block %d: ref with %d data bytes, in dst %v, ref %x, err %v", b, len(g.Data), g.InDst, g.Ref, g.Err)
					}
					got = g.Ref
				} else if g.Ref != nil {
					t.Fatalf("block %d: not a ref, but ref payload %x", b, g.Ref)
				}
				if !bytes.Equal(data, got) || (data == nil) != (got == nil) {
					t.Fatalf("block %d: data differs", b)
				}
			}
			if i != len(got) {
				t.Fatalf("LatestRange(%d, %d) returned %d blocks, Latest found %d", lo, hi, len(got), i)
			}
		}
	}
	if _, err := s.LatestRange(7, 0, RangeBlocksMax+1, 0, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("oversized range: %v, want ErrInvalid", err)
	}
	if _, err := s.LatestRange(7, 0, 2, 0, make([]byte, limits.BlockBytes)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("dst of the wrong size: %v, want ErrInvalid", err)
	}
}

// checkDst checks what LatestRange wrote into dst (nil: nothing to check):
// blocks read into it (InDst) are their place in dst, at least one run was
// read that way, and the places of blocks not read into it are untouched
// (0xEE as the test filled it), unless their read failed.
func checkDst(t *testing.T, got []Block, dst []byte, lo, hi uint64) {
	t.Helper()
	if dst == nil {
		for _, g := range got {
			if g.InDst {
				t.Fatalf("block %d InDst without a dst", g.Entry.Key.Block)
			}
		}
		return
	}
	const bs = limits.BlockBytes
	written := map[uint64]bool{}
	in := 0
	for _, g := range got {
		b := g.Entry.Key.Block
		place := dst[(b-lo)*bs : (b-lo+1)*bs]
		switch {
		case g.InDst:
			in++
			written[b] = true
			if &g.Data[0] != &place[0] || len(g.Data) != bs {
				t.Fatalf("block %d: InDst but its data is not its place in dst", b)
			}
		case g.Err != nil:
			written[b] = true // undefined
		}
	}
	for b := lo; b < hi; b++ {
		if !written[b] && !bytes.Equal(dst[(b-lo)*bs:(b-lo+1)*bs], bytes.Repeat([]byte{0xEE}, bs)) {
			t.Fatalf("block %d not read into dst, but its place was written", b)
		}
	}
	if in == 0 && len(got) > 0 {
		for _, g := range got {
			if g.Err == nil && !g.Entry.Tombstone && !g.Entry.Ref {
				t.Fatalf("range [%d, %d): no block read into dst", lo, hi)
			}
		}
	}
}

// TestChunks: Chunks names each chunk holding an entry once, ascending,
// across pieces, and the chunk of the last block.
func TestChunks(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	const per = 4
	blocks := []uint64{0, 1, 3, 13, 14, 15, 16, 400, ^uint64(0) - 1}
	for _, b := range blocks {
		mustApply(t, s, putOp(Key{Vol: 2, Block: b}, 1))
	}
	mustApply(t, s, putOp(Key{Vol: 1, Block: 7}, 1), putOp(Key{Vol: 3, Block: 0}, 1))
	var got []uint64
	if err := s.Chunks(2, per, func(c uint64) { got = append(got, c) }); err != nil {
		t.Fatal(err)
	}
	want := []uint64{0, 3, 4, 100, (^uint64(0) - 1) / per}
	if !slices.Equal(got, want) {
		t.Fatalf("Chunks = %v, want %v", got, want)
	}
	// More chunks than one piece holds.
	var ops []Op
	for c := range uint64(scanEntriesMax + 10) {
		ops = append(ops, putOp(Key{Vol: 5, Block: c * per}, 1))
	}
	mustApply(t, s, ops...)
	n := 0
	if err := s.Chunks(5, per, func(c uint64) {
		if c != uint64(n) {
			t.Fatalf("chunk %d at position %d", c, n)
		}
		n++
	}); err != nil {
		t.Fatal(err)
	}
	if n != scanEntriesMax+10 {
		t.Fatalf("%d chunks, want %d", n, scanEntriesMax+10)
	}
}
