package ec

import (
	"errors"
	"testing"

	"github.com/plumeria-fs/plumeria/internal/limits"
)

func TestGeometry(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		p           Profile
		chunkBytes  int
		shardBlocks int
		places      [][3]int // block, shard, offset
	}{
		{Profile{4, 2}, mib, 64, [][3]int{{0, 0, 0}, {3, 3, 0}, {4, 0, 1}, {63, 3, 15}, {200, 0, 50}, {255, 3, 63}}},
		{Profile{8, 3}, mib, 32, [][3]int{{0, 0, 0}, {31, 7, 3}, {32, 0, 4}, {255, 7, 31}}},
		{Profile{2, 1}, mib, 128, [][3]int{{127, 1, 63}, {128, 0, 64}}},
		{Profile{3, 1}, mib, 86, [][3]int{{85, 1, 28}, {86, 2, 28}, {172, 1, 57}, {255, 0, 85}}},
		{Profile{1, 2}, mib, 256, [][3]int{{0, 0, 0}, {255, 0, 255}}},
		{Profile{4, 2}, 4096, 1, [][3]int{{0, 0, 0}}},
		{Profile{4, 2}, 3 * 4096, 1, [][3]int{{2, 2, 0}}},
		{Profile{8, 3}, limits.ChunkBytesMax, 512, [][3]int{{4095, 7, 511}}},
	} {
		g, err := NewGeometry(tc.p, tc.chunkBytes)
		if err != nil {
			t.Fatalf("NewGeometry(%v, %d): %v", tc.p, tc.chunkBytes, err)
		}
		if g.ShardBlocks() != tc.shardBlocks || g.ShardBytes() != tc.shardBlocks*BlockBytes ||
			g.ChunkBlocks() != tc.chunkBytes/BlockBytes || g.ChunkBytes() != tc.chunkBytes || g.Profile() != tc.p {
			t.Errorf("%v %d: shard blocks %d, want %d", tc.p, tc.chunkBytes, g.ShardBlocks(), tc.shardBlocks)
		}
		for _, pl := range tc.places {
			if j, o := g.BlockPlace(pl[0]); j != pl[1] || o != pl[2] {
				t.Errorf("%v %d: BlockPlace(%d) = %d, %d; want %d, %d", tc.p, tc.chunkBytes, pl[0], j, o, pl[1], pl[2])
			}
		}
		checkInverse(t, g)
	}
}

// checkInverse checks that BlockPlace and BlockAt are inverse bijections
// between the chunk's blocks and the positions of data shards that hold one.
func checkInverse(t *testing.T, g Geometry) {
	t.Helper()
	for b := range g.ChunkBlocks() {
		j, o := g.BlockPlace(b)
		if back, ok := g.BlockAt(j, o); !ok || back != b {
			t.Fatalf("%v: BlockAt(BlockPlace(%d) = %d, %d) = %d, %v", g.Profile(), b, j, o, back, ok)
		}
	}
	held := 0
	for j := -1; j <= g.Profile().Shards(); j++ {
		for o := -1; o <= g.ShardBlocks(); o++ {
			b, ok := g.BlockAt(j, o)
			if !ok {
				continue
			}
			held++
			if jj, oo := g.BlockPlace(b); jj != j || oo != o {
				t.Fatalf("%v: BlockPlace(BlockAt(%d, %d) = %d) = %d, %d", g.Profile(), j, o, b, jj, oo)
			}
		}
	}
	if held != g.ChunkBlocks() {
		t.Fatalf("%v: %d positions hold a block, chunk has %d", g.Profile(), held, g.ChunkBlocks())
	}
}

func TestShardLen(t *testing.T) {
	g, err := NewGeometry(Profile{4, 2}, 1<<20) // 64 blocks per shard
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range [][2]int{{0, 0}, {1, 1}, {2, 1}, {4, 1}, {5, 2}, {63, 16}, {64, 16}, {65, 17}, {255, 64}, {256, 64}} {
		if l := g.ShardLen(tc[0]); l != tc[1] {
			t.Errorf("ShardLen(%d) = %d, want %d", tc[0], l, tc[1])
		}
	}
	// Every live block sits below len; a block at len or beyond in a data
	// shard is never live.
	for n := range g.ChunkBlocks() + 1 {
		l := g.ShardLen(n)
		for b := range n {
			if _, o := g.BlockPlace(b); o >= l {
				t.Fatalf("n %d: live block %d at offset %d ≥ len %d", n, b, o, l)
			}
		}
	}
}

func TestNewGeometryRejects(t *testing.T) {
	for _, tc := range []struct {
		p          Profile
		chunkBytes int
	}{
		{Profile{4, 2}, 0}, {Profile{4, 2}, -4096}, {Profile{4, 2}, 4095}, {Profile{4, 2}, 5000},
		{Profile{4, 2}, limits.ChunkBytesMax + 4096}, {Profile{0, 2}, 1 << 20}, {Profile{4, 20}, 1 << 20},
	} {
		if _, err := NewGeometry(tc.p, tc.chunkBytes); !errors.Is(err, ErrInvalid) {
			t.Errorf("NewGeometry(%d+%d, %d) = %v, want ErrInvalid", tc.p.K, tc.p.M, tc.chunkBytes, err)
		}
	}
}

func TestBlockPlacePanicsOutsideChunk(t *testing.T) {
	g, err := NewGeometry(Profile{4, 2}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []int{-1, g.ChunkBlocks()} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("BlockPlace(%d) did not panic", b)
				}
			}()
			g.BlockPlace(b)
		}()
	}
}
