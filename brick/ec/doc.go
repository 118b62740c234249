// Package ec is the pure core of erasure-coded stripes (docs/plan-j.md §1):
// profiles, the geometry of a stripe, the ref a home replica keeps in place
// of a coded block, and a coder over github.com/klauspost/reedsolomon.
//
// A stripe is one chunk of a placement group (limits.ChunkBytesDefault,
// 1 MiB), coded by the PG's primary into K data shards and M parity shards
// that live on the K+M bricks of a stripe group: the brick at position i of
// the group holds shard i. Blocks go round-robin: data shard j holds blocks
// j, j+K, j+2K, ... of the chunk (at most a shard unit U =
// roundup(ChunkBytes/K, 4 KiB)), so a chunk with n live blocks stores
// ceil(n/K) blocks per shard and a small file costs (K+M)/K of its size
// like a large one; a degraded read of one 4 KiB block needs the blocks at
// the same offset of K other shards only (Coder works on any shard length,
// a single block included). The price: a healthy read of several blocks
// touches up to K bricks (in parallel), not one.
// Profile K=1 is a mirror: M full copies of the data, no coding.
//
// A stripe stores len blocks per shard explicitly (Geometry.ShardLen); the
// blocks at or beyond len are implicit zeros in every shard, so a small file
// costs no padding above its last block. Refs (ref.go) carry len together
// with the stripe group and the stripe's seq.
//
// The package does no I/O, reads no clock and starts no goroutines (the
// coder runs reedsolomon with one goroutine; callers choose concurrency);
// a Coder is safe for concurrent use. Reed-Solomon detects no corruption:
// Verify tells a scrub that a full stripe is inconsistent, not which shard
// is wrong, and reconstruction from a corrupt survivor yields wrong bytes.
// Each shard block is checked by the brick store's per-record crc32c, which
// turns a corrupt block into a missing one before it reaches this package.
//
// The brick uses it: brick/stripe.go codes chunks and reads them back,
// brick/shard.go stores shards.
package ec
