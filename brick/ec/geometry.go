package ec

import (
	"fmt"

	"github.com/plumeria-fs/plumeria/internal/limits"
)

// BlockBytes is the unit of a shard: a brick stores and checksums blocks.
const BlockBytes = limits.BlockBytes

// Geometry places the blocks of one chunk in the shards of its stripe.
// Blocks and offsets count BlockBytes from the start of the chunk and of
// the shard. Blocks go round-robin: block b lives in data shard b%K at
// offset b/K, so a chunk whose live data is its first n blocks stores
// ceil(n/K) blocks per shard (a small file costs (K+M)/K of its size, as a
// full chunk does). A shard holds at most S = ShardBlocks() =
// ceil(ChunkBlocks/K) blocks (the shard unit U = S·BlockBytes); positions
// past the chunk's end read as zeros. Parity shard i (K ≤ i < K+M) at
// offset o codes the K data blocks at offset o.
type Geometry struct {
	p           Profile
	chunkBlocks int
	shardBlocks int
}

// NewGeometry returns the geometry of a chunk of chunkBytes under p. It
// returns an error wrapping ErrInvalid unless p is valid and chunkBytes is
// a positive multiple of BlockBytes at most limits.ChunkBytesMax.
func NewGeometry(p Profile, chunkBytes int) (Geometry, error) {
	if err := p.Validate(); err != nil {
		return Geometry{}, err
	}
	if chunkBytes <= 0 || chunkBytes%BlockBytes != 0 || chunkBytes > limits.ChunkBytesMax {
		return Geometry{}, fmt.Errorf("chunk of %d bytes: want a multiple of %d up to %d: %w",
			chunkBytes, BlockBytes, limits.ChunkBytesMax, ErrInvalid)
	}
	n := chunkBytes / BlockBytes
	return Geometry{p: p, chunkBlocks: n, shardBlocks: (n + p.K - 1) / p.K}, nil
}

// Profile returns the profile the geometry was made for.
func (g Geometry) Profile() Profile { return g.p }

// ChunkBytes returns the size of a chunk.
func (g Geometry) ChunkBytes() int { return g.chunkBlocks * BlockBytes }

// ChunkBlocks returns the number of blocks of a chunk.
func (g Geometry) ChunkBlocks() int { return g.chunkBlocks }

// ShardBlocks returns the number of blocks of a full shard: U/BlockBytes.
func (g Geometry) ShardBlocks() int { return g.shardBlocks }

// ShardBytes returns the shard unit U.
func (g Geometry) ShardBytes() int { return g.shardBlocks * BlockBytes }

// BlockPlace returns the data shard j and the offset o in it of block b of
// the chunk. It panics unless 0 ≤ b < ChunkBlocks(): b comes from the
// caller's own arithmetic, never from input.
func (g Geometry) BlockPlace(b int) (j, o int) {
	if b < 0 || b >= g.chunkBlocks {
		panic(fmt.Sprintf("ec: block %d outside a chunk of %d blocks", b, g.chunkBlocks))
	}
	return b % g.p.K, b / g.p.K
}

// BlockAt is the inverse of BlockPlace: the block of the chunk at offset o
// of data shard j. ok is false when (j, o) holds no block of the chunk:
// j is not a data shard, o is outside [0, ShardBlocks()), or the position
// lies past the end of the chunk (a zero the last shards carry when K does
// not divide ChunkBlocks()).
func (g Geometry) BlockAt(j, o int) (b int, ok bool) {
	if j < 0 || j >= g.p.K || o < 0 || o >= g.shardBlocks {
		return 0, false
	}
	b = o*g.p.K + j
	return b, b < g.chunkBlocks
}

// ShardLen returns len, the number of blocks each shard of the stripe
// stores explicitly when the chunk's live data is its blocks [0, n): the
// offsets at which some data shard holds a block below n. Blocks at or
// beyond len are implicit zeros in every shard, data and parity alike, and
// parity codes offsets [0, len). Below len, blocks past n (or past the end
// of the chunk) are zeros that are stored, so that a missing block below
// len always means an erasure. It panics unless 0 ≤ n ≤ ChunkBlocks().
func (g Geometry) ShardLen(n int) int {
	if n < 0 || n > g.chunkBlocks {
		panic(fmt.Sprintf("ec: %d live blocks in a chunk of %d", n, g.chunkBlocks))
	}
	return (n + g.p.K - 1) / g.p.K
}
