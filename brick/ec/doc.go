// Package ec is the pure core of erasure-coded stripes (docs/plan-j.md §1):
// profiles, the geometry of a stripe, the ref a home replica keeps in place
// of a coded block, and a coder over github.com/klauspost/reedsolomon.
//
// A stripe is one chunk of a placement group (limits.ChunkBytesDefault,
// 1 MiB), coded by the PG's primary into K data shards and M parity shards
// that live on the K+M bricks of a stripe group: the brick at position i of
// the group holds shard i. Data shard j is the j-th run of ShardBlocks
// consecutive blocks of the chunk (a shard unit U = roundup(ChunkBytes/K,
// 4 KiB)), so a healthy read of a block touches one brick, and a degraded
// read of one 4 KiB block needs the blocks at the same offset of K other
// shards only (Coder works on any shard length, a single block included).
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
// Nothing in the repository uses this package yet: coding, shard RPCs and
// ref-aware reads come in slices 3 and 4 of docs/plan-j.md.
package ec
