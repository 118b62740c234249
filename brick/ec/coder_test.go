package ec

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/plumeria-fs/plumeria/internal/testseed"
)

const testChunkBytes = 1 << 20

var testProfiles = []Profile{{1, 2}, {2, 1}, {4, 2}, {8, 3}, {3, 1}, {4, 0}, {1, 0}}

func newTestCoder(t testing.TB, p Profile) *Coder {
	t.Helper()
	c, err := NewCoder(p, testChunkBytes)
	if err != nil {
		t.Fatalf("NewCoder(%v): %v", p, err)
	}
	return c
}

// randomChunk returns live bytes of a random length, edge lengths often.
func randomChunk(rng *rand.Rand) []byte {
	lengths := []int{0, 1, BlockBytes - 1, BlockBytes, BlockBytes + 1, 64 * BlockBytes, 65*BlockBytes - 7, testChunkBytes}
	n := rng.IntN(testChunkBytes + 1)
	if rng.IntN(2) == 0 {
		n = lengths[rng.IntN(len(lengths))]
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// encode encodes chunk and checks the layout: K+M shards of ShardLen(n)
// blocks, data shard j the chunk's blocks j, j+K, ... zero-padded, mirror
// copies equal, parity consistent.
func encode(t *testing.T, c *Coder, chunk []byte) [][]byte {
	t.Helper()
	shards, err := c.Encode(chunk)
	if err != nil {
		t.Fatalf("%v: Encode(%d bytes): %v", c.Profile(), len(chunk), err)
	}
	n := (len(chunk) + BlockBytes - 1) / BlockBytes
	size := c.ShardLen(n) * BlockBytes
	if len(shards) != c.Profile().Shards() {
		t.Fatalf("%v: %d shards", c.Profile(), len(shards))
	}
	for i, s := range shards {
		if len(s) != size {
			t.Fatalf("%v, %d bytes: shard %d of %d bytes, want %d", c.Profile(), len(chunk), i, len(s), size)
		}
		j := i
		if c.Profile().Mirror() {
			j = 0
		}
		if j >= c.Profile().K {
			continue
		}
		for o := range size / BlockBytes {
			if !bytes.Equal(s[o*BlockBytes:(o+1)*BlockBytes], chunkBlock(c, chunk, j, o)) {
				t.Fatalf("%v, %d bytes: data shard %d offset %d is not the chunk's block", c.Profile(), len(chunk), i, o)
			}
		}
	}
	if size > 0 {
		if ok, err := c.Verify(shards); !ok || err != nil {
			t.Fatalf("%v, %d bytes: Verify after Encode = %v, %v", c.Profile(), len(chunk), ok, err)
		}
	}
	return shards
}

// erase returns a copy of the shard set (slices shared) with the given
// positions missing.
func erase(shards [][]byte, lost []int) [][]byte {
	out := append([][]byte(nil), shards...)
	for _, i := range lost {
		out[i] = nil
	}
	return out
}

// randomLoss returns up to max distinct positions of n, at least min.
func randomLoss(rng *rand.Rand, n, minLost, maxLost int) []int {
	return rng.Perm(n)[:minLost+rng.IntN(maxLost-minLost+1)]
}

func checkReconstruct(t *testing.T, c *Coder, want [][]byte, lost []int) {
	t.Helper()
	k := c.Profile().K
	got := erase(want, lost)
	if err := c.ReconstructData(got); err != nil {
		t.Fatalf("%v: ReconstructData with %v lost: %v", c.Profile(), lost, err)
	}
	for i := range want {
		if i < k && !bytes.Equal(got[i], want[i]) {
			t.Fatalf("%v: data shard %d differs after ReconstructData with %v lost", c.Profile(), i, lost)
		}
		if i >= k && len(got[i]) != 0 && !slicesOf(lost, i) && !bytes.Equal(got[i], want[i]) {
			t.Fatalf("%v: parity shard %d changed", c.Profile(), i)
		}
	}
	got = erase(want, lost)
	all := make([]bool, len(want))
	for i := range all {
		all[i] = true
	}
	if err := c.ReconstructSome(got, all); err != nil {
		t.Fatalf("%v: ReconstructSome(all) with %v lost: %v", c.Profile(), lost, err)
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("%v: shard %d differs after ReconstructSome with %v lost", c.Profile(), i, lost)
		}
	}
}

func slicesOf(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// subsets calls fn with every subset of [0, n) of at most max elements.
func subsets(n, maxLen int, fn func([]int)) {
	var rec func(start int, cur []int)
	rec = func(start int, cur []int) {
		fn(cur)
		if len(cur) == maxLen {
			return
		}
		for i := start; i < n; i++ {
			rec(i+1, append(cur, i))
		}
	}
	rec(0, nil)
}

// TestReconstructEveryErasure erases every subset of at most M whole shards
// of a full chunk and reconstructs byte-exact.
func TestReconstructEveryErasure(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 1))
	for _, p := range testProfiles {
		c := newTestCoder(t, p)
		chunk := make([]byte, testChunkBytes)
		for i := range chunk {
			chunk[i] = byte(rng.Uint32())
		}
		shards := encode(t, c, chunk)
		subsets(p.Shards(), p.M, func(lost []int) { checkReconstruct(t, c, shards, lost) })
	}
}

// TestReconstructRandomChunks codes chunks of random live lengths, erases
// up to M shards at random and reconstructs byte-exact.
func TestReconstructRandomChunks(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 2))
	for _, p := range testProfiles {
		c := newTestCoder(t, p)
		for range 20 {
			chunk := randomChunk(rng)
			shards := encode(t, c, chunk)
			if len(shards[0]) == 0 {
				continue
			}
			checkReconstruct(t, c, shards, randomLoss(rng, p.Shards(), 0, p.M))
		}
	}
}

// TestDegradedBlockRead reconstructs single 4 KiB blocks: at each offset o
// below len, a different random subset of at most M of the K+M blocks at
// o is lost, and the K data blocks come back equal to the chunk's blocks
// placed by the geometry (zero past the live end).
func TestDegradedBlockRead(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 3))
	for _, p := range testProfiles {
		c := newTestCoder(t, p)
		for range 5 {
			chunk := randomChunk(rng)
			shards := encode(t, c, chunk)
			for o := range len(shards[0]) / BlockBytes {
				blocks := make([][]byte, p.Shards())
				for i, s := range shards {
					blocks[i] = bytes.Clone(s[o*BlockBytes : (o+1)*BlockBytes])
				}
				lost := randomLoss(rng, p.Shards(), 0, p.M)
				for _, i := range lost {
					blocks[i] = nil
				}
				if err := c.ReconstructData(blocks); err != nil {
					t.Fatalf("%v offset %d, %v lost: %v", p, o, lost, err)
				}
				for j := range p.K {
					if !bytes.Equal(blocks[j], chunkBlock(c, chunk, j, o)) {
						t.Fatalf("%v, %d bytes: block at shard %d offset %d differs, %v lost", p, len(chunk), j, o, lost)
					}
				}
			}
		}
	}
}

// chunkBlock returns what data shard j holds at offset o: the chunk's
// block there, zero-padded, or zeros.
func chunkBlock(c *Coder, chunk []byte, j, o int) []byte {
	blk := make([]byte, BlockBytes)
	if b, ok := c.BlockAt(j, o); ok && b*BlockBytes < len(chunk) {
		copy(blk, chunk[b*BlockBytes:])
	}
	return blk
}

// TestTooFewShards loses M+1 shards (whole or one block) and expects
// ErrTooFewShards naming the count.
func TestTooFewShards(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 4))
	for _, p := range testProfiles {
		c := newTestCoder(t, p)
		shards := encode(t, c, make([]byte, testChunkBytes))
		for _, set := range [][][]byte{shards, blocksAt(shards, 7)} {
			lost := randomLoss(rng, p.Shards(), p.M+1, p.M+1)
			got := erase(set, lost)
			err := c.ReconstructData(got)
			want := fmt.Sprintf("%d of %d shards missing", p.M+1, p.Shards())
			if !errors.Is(err, ErrTooFewShards) || !strings.Contains(err.Error(), want) {
				t.Errorf("%v, %v lost: ReconstructData = %v; want ErrTooFewShards and %q", p, lost, err, want)
			}
			wantSome := make([]bool, p.Shards())
			wantSome[lost[0]] = true
			if err := c.ReconstructSome(got, wantSome); !errors.Is(err, ErrTooFewShards) {
				t.Errorf("%v, %v lost: ReconstructSome = %v, want ErrTooFewShards", p, lost, err)
			}
			// Asking only for present shards is no error.
			if err := c.ReconstructSome(got, make([]bool, p.Shards())); err != nil {
				t.Errorf("%v: ReconstructSome of nothing = %v", p, err)
			}
		}
		if err := c.ReconstructData(make([][]byte, p.Shards())); !errors.Is(err, ErrTooFewShards) {
			t.Errorf("%v: ReconstructData of nothing = %v, want ErrTooFewShards", p, err)
		}
	}
}

func blocksAt(shards [][]byte, o int) [][]byte {
	out := make([][]byte, len(shards))
	for i, s := range shards {
		out[i] = s[o*BlockBytes : (o+1)*BlockBytes]
	}
	return out
}

// TestMirror: K=1 stores M+1 copies, rebuilds from any one.
func TestMirror(t *testing.T) {
	p, err := ParseProfile("copies=3")
	if err != nil {
		t.Fatal(err)
	}
	c := newTestCoder(t, p)
	chunk := []byte(strings.Repeat("plumeria", 1000)) // 8000 bytes: 2 blocks
	shards := encode(t, c, chunk)
	if len(shards) != 3 || len(shards[0]) != 2*BlockBytes {
		t.Fatalf("copies=3 of 8000 bytes: %d shards of %d bytes", len(shards), len(shards[0]))
	}
	for keep := range 3 {
		got := make([][]byte, 3)
		got[keep] = shards[keep]
		if err := c.ReconstructSome(got, []bool{true, true, true}); err != nil {
			t.Fatalf("from copy %d: %v", keep, err)
		}
		for i := range got {
			if !bytes.Equal(got[i][:len(chunk)], chunk) {
				t.Fatalf("from copy %d: copy %d differs", keep, i)
			}
		}
		got[(keep+1)%3][5] ^= 1
		if ok, err := c.Verify(got); ok || err != nil {
			t.Fatalf("Verify of unequal copies = %v, %v", ok, err)
		}
	}
}

// TestVerifyCatchesCorruption: one flipped bit anywhere in a full stripe
// makes Verify fail. Reconstruction does not notice a corrupt survivor: it
// returns wrong data, which is why shard blocks carry the store's crc32c.
func TestVerifyCatchesCorruption(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 5))
	for _, p := range []Profile{{1, 2}, {2, 1}, {4, 2}, {8, 3}} {
		c := newTestCoder(t, p)
		chunk := randomChunk(rng)
		if len(chunk) == 0 {
			chunk = []byte{1} // at least one block (a full chunk takes no more)
		}
		shards := encode(t, c, chunk)
		for range 10 {
			i, at := rng.IntN(p.Shards()), rng.IntN(len(shards[0]))
			bit := byte(1) << rng.IntN(8)
			shards[i][at] ^= bit
			if ok, err := c.Verify(shards); ok || err != nil {
				t.Fatalf("%v: Verify with shard %d corrupt at %d = %v, %v", p, i, at, ok, err)
			}
			if ok, err := c.Verify(blocksAt(shards, at/BlockBytes)); ok || err != nil {
				t.Fatalf("%v: Verify of the corrupt block's offset = %v, %v", p, ok, err)
			}
			shards[i][at] ^= bit
		}
		if ok, err := c.Verify(erase(shards, []int{0})); ok || !errors.Is(err, ErrTooFewShards) {
			t.Fatalf("%v: Verify with a shard missing = %v, %v; want ErrTooFewShards", p, ok, err)
		}
		// A corrupt survivor goes unnoticed by reconstruction.
		got := erase(shards, []int{0})
		got[1] = bytes.Clone(got[1])
		got[1][0] ^= 1
		if err := c.ReconstructData(got); err != nil {
			t.Fatalf("%v: %v", p, err)
		}
		if bytes.Equal(got[0], shards[0]) {
			t.Fatalf("%v: reconstruction from a corrupt survivor gave the right data", p)
		}
	}
}

func TestEmptyChunk(t *testing.T) {
	c := newTestCoder(t, Profile{4, 2})
	shards, err := c.Encode(nil)
	if err != nil || len(shards) != 6 {
		t.Fatalf("Encode(nil) = %d shards, %v", len(shards), err)
	}
	for i, s := range shards {
		if s == nil || len(s) != 0 {
			t.Fatalf("shard %d: %v", i, s)
		}
	}
}

func TestShardSetErrors(t *testing.T) {
	c := newTestCoder(t, Profile{4, 2})
	shards := encode(t, c, make([]byte, 12*BlockBytes)) // 3 blocks per shard
	uneven := erase(shards, nil)
	uneven[2] = uneven[2][:BlockBytes]
	partial := blocksAt(shards, 0)
	for i := range partial {
		partial[i] = partial[i][:100]
	}
	for name, set := range map[string][][]byte{
		"too few":        shards[:5],
		"too many":       append(erase(shards, nil), shards[0]),
		"unequal":        uneven,
		"partial blocks": partial,
	} {
		if err := c.ReconstructData(set); !errors.Is(err, ErrShardSize) {
			t.Errorf("%s: ReconstructData = %v, want ErrShardSize", name, err)
		}
		if _, err := c.Verify(set); !errors.Is(err, ErrShardSize) {
			t.Errorf("%s: Verify = %v, want ErrShardSize", name, err)
		}
	}
	if err := c.ReconstructSome(shards, make([]bool, 4)); !errors.Is(err, ErrShardSize) {
		t.Errorf("ReconstructSome with 4 wants = %v, want ErrShardSize", err)
	}
	if _, err := c.Encode(make([]byte, testChunkBytes+1)); !errors.Is(err, ErrInvalid) {
		t.Errorf("Encode of more than a chunk = %v, want ErrInvalid", err)
	}
}

// TestReconstructReusesCapacity: a missing shard passed as buf[:0] is
// rebuilt in buf.
func TestReconstructReusesCapacity(t *testing.T) {
	c := newTestCoder(t, Profile{4, 2})
	shards := encode(t, c, bytes.Repeat([]byte{7}, 2*testChunkBytes/3))
	buf := make([]byte, len(shards[1]))
	got := erase(shards, nil)
	got[1] = buf[:0]
	if err := c.ReconstructData(got); err != nil {
		t.Fatal(err)
	}
	if &got[1][0] != &buf[0] || !bytes.Equal(buf, shards[1]) {
		t.Fatal("shard 1 not rebuilt in the buffer given")
	}
}

// TestConcurrentUse shares one coder between goroutines (run with -race).
func TestConcurrentUse(t *testing.T) {
	c := newTestCoder(t, Profile{4, 2})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 6))
			for range 10 {
				chunk := randomChunk(rng)
				shards, err := c.Encode(chunk)
				if err != nil || len(shards[0]) == 0 {
					continue
				}
				got := erase(shards, randomLoss(rng, 6, 1, 2))
				if err := c.ReconstructData(got); err != nil {
					t.Error(err)
					return
				}
				for j := range 4 {
					if !bytes.Equal(got[j], shards[j]) {
						t.Errorf("worker %d: shard %d differs", w, j)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkEncode4p2(b *testing.B) {
	c := newTestCoder(b, Profile{4, 2})
	chunk := make([]byte, testChunkBytes)
	for i := range chunk {
		chunk[i] = byte(i * 7)
	}
	b.SetBytes(testChunkBytes)
	for b.Loop() {
		if _, err := c.Encode(chunk); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDegradedBlock4p2: one 4 KiB block rebuilt from 4 survivors.
func BenchmarkDegradedBlock4p2(b *testing.B) {
	c := newTestCoder(b, Profile{4, 2})
	shards, err := c.Encode(make([]byte, testChunkBytes))
	if err != nil {
		b.Fatal(err)
	}
	blocks := blocksAt(shards, 0)
	lost := make([]byte, 0, BlockBytes)
	b.SetBytes(BlockBytes)
	for b.Loop() {
		set := [][]byte{lost, blocks[1], blocks[2], blocks[3], blocks[4], nil}
		if err := c.ReconstructData(set); err != nil {
			b.Fatal(err)
		}
	}
}

// TestReconstructBlocks: shards with bad blocks at different offsets are
// completed offset by offset. Every wanted block whose offset has at most
// M erasures comes back equal to the original; the others are named in a
// BlocksLostError, whose At says "lost" only where the members reported
// more than M of them bad. The whole-shard rule (a shard with one bad block is
// erased) would lose the first case of the table.
func TestReconstructBlocks(t *testing.T) {
	p := Profile{2, 1}
	c := newTestCoder(t, p)
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 9))
	orig, err := c.Encode(randomChunkOf(rng, 8*2*BlockBytes)) // 8 blocks per shard
	if err != nil {
		t.Fatal(err)
	}
	n := 8
	for _, tc := range []struct {
		name     string
		unread   []int      // shards not read at all
		bad      [][]uint32 // per shard
		want     []bool
		lost     []int // offsets named in the error
		reported bool  // Lost()
	}{
		{name: "one bad block in each of two shards, different offsets", bad: [][]uint32{{3}, {5}, nil},
			want: []bool{true, true, false}},
		{name: "a parity block too", bad: [][]uint32{{3}, {5}, {7}}, want: []bool{true, true, true}},
		{name: "same offset in two shards", bad: [][]uint32{{4}, {4}, nil}, want: []bool{true, true, false},
			lost: []int{4}, reported: true},
		{name: "a shard unread and a bad block", unread: []int{0}, bad: [][]uint32{nil, {2, 6}, nil},
			want: []bool{true, true, false}, lost: []int{2, 6}},
		{name: "unread parity and a bad block", unread: []int{2}, bad: [][]uint32{{1}, nil, nil},
			want: []bool{true, true, false}, lost: []int{1}},
		{name: "unread parity, not wanted", unread: []int{2}, bad: [][]uint32{nil, nil, nil},
			want: []bool{true, true, false}},
		{name: "nothing bad", bad: [][]uint32{nil, nil, nil}, want: []bool{true, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shards := make([][]byte, 3)
			for i := range shards {
				shards[i] = bytes.Clone(orig[i])
				for _, o := range tc.bad[i] {
					for b := range BlockBytes {
						shards[i][int(o)*BlockBytes+b] ^= 0x5a // what a corrupt block would hold
					}
				}
			}
			for _, i := range tc.unread {
				shards[i] = nil
			}
			err := c.ReconstructBlocks(shards, tc.bad, n, tc.want)
			var le *BlocksLostError
			if len(tc.lost) == 0 {
				if err != nil {
					t.Fatalf("err %v", err)
				}
			} else if !errors.As(err, &le) || !errors.Is(err, ErrTooFewShards) || fmt.Sprint(le.Offsets) != fmt.Sprint(tc.lost) {
				t.Fatalf("err %v, want blocks %v lost (reported %v)", err, tc.lost, tc.reported)
			} else if short, lost := le.At(tc.lost[0]); !short || lost != tc.reported {
				t.Fatalf("err %v, want blocks %v lost (reported %v)", err, tc.lost, tc.reported)
			}
			for i, w := range tc.want {
				if !w {
					continue
				}
				for o := range n {
					if slices.Contains(tc.lost, o) {
						continue
					}
					if got := shards[i][o*BlockBytes : (o+1)*BlockBytes]; !bytes.Equal(got, orig[i][o*BlockBytes:(o+1)*BlockBytes]) {
						t.Fatalf("shard %d block %d differs from the original", i, o)
					}
				}
			}
		})
	}
}

// TestReconstructBlocksRandom: random profiles and erasure patterns
// against the rule "a block is rebuilt iff at most M blocks are erased at
// its offset".
func TestReconstructBlocksRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 10))
	for range 200 {
		p := testProfiles[rng.IntN(len(testProfiles))]
		if p.M == 0 {
			continue
		}
		c := newTestCoder(t, p)
		orig, err := c.Encode(randomChunkOf(rng, 1+rng.IntN(testChunkBytes)))
		if err != nil {
			t.Fatal(err)
		}
		n := len(orig[0]) / BlockBytes
		ns := p.Shards()
		shards, bad, want := make([][]byte, ns), make([][]uint32, ns), make([]bool, ns)
		erasures := make([]int, n)
		for i := range ns {
			want[i] = rng.IntN(2) == 0
			if rng.IntN(6) == 0 {
				for o := range n {
					erasures[o]++
				}
				continue // unread
			}
			shards[i] = bytes.Clone(orig[i])
			for o := range n {
				if rng.IntN(4) == 0 {
					bad[i] = append(bad[i], uint32(o))
					erasures[o]++
					clear(shards[i][o*BlockBytes : (o+1)*BlockBytes])
				}
			}
		}
		wasNil := make([]bool, ns)
		for i := range shards {
			wasNil[i] = shards[i] == nil
		}
		err = c.ReconstructBlocks(shards, bad, n, want)
		var lostWant []int
		for o := range n {
			if erasures[o] <= p.M {
				continue
			}
			for i := range ns {
				if want[i] && (wasNil[i] || slices.Contains(bad[i], uint32(o))) {
					lostWant = append(lostWant, o)
					break
				}
			}
		}
		var le *BlocksLostError
		switch {
		case len(lostWant) == 0 && err != nil:
			t.Fatalf("%v: unexpected %v", p, err)
		case len(lostWant) > 0 && (!errors.As(err, &le) || fmt.Sprint(le.Offsets) != fmt.Sprint(lostWant)):
			t.Fatalf("%v: err %v, want offsets %v lost", p, err, lostWant)
		}
		for i := range ns {
			if !want[i] {
				continue
			}
			for o := range n {
				if erasures[o] > p.M && (wasNil[i] || slices.Contains(bad[i], uint32(o))) {
					continue
				}
				if !bytes.Equal(shards[i][o*BlockBytes:(o+1)*BlockBytes], orig[i][o*BlockBytes:(o+1)*BlockBytes]) {
					t.Fatalf("%v: shard %d block %d differs", p, i, o)
				}
			}
		}
	}
}

func randomChunkOf(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}
