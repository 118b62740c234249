// Package store is a brick's local block store: fixed-size blocks of
// limits.BlockBytes, keyed by (volume, block, snapshot generation), kept in
// append-only checksummed segment files on one local disk, with an index in
// pebble and a cleaner that reclaims the space of overwritten blocks (LFS, xFS §4).
//
// It owns the brick's data directory and nothing else: it does not replicate,
// repair, or interpret sequence numbers; it records the Seq the caller gives.
// Nor does it interpret refs: a block version may be, instead of data, a
// small payload saying where the data is (an erasure-coded stripe, OpRef),
// which it keeps, checks and returns as it does data.
//
// Guarantees:
//   - Apply returns nil only once the whole batch is fsync'd. After a crash a
//     batch is either wholly visible or not at all, and every acknowledged
//     batch is visible.
//   - Every data (or ref) read is checked against its crc32c; bad bytes are never
//     returned (ErrCorrupt instead), and the cleaner never launders them:
//     it moves a corrupt record verbatim, so it keeps reading as corrupt.
//   - A full disk fails the batch with ErrNoSpace and loses nothing that was
//     acknowledged; the store stays usable. A disk filled by something else
//     still takes metadata batches (ApplyReserved) from the metadata balloon
//     while it lasts (balloon.go).
//
// Layout of dir:
//
//	seg-%016x.log   segments, appended by one committer goroutine (record.go)
//	index/          pebble: block keys → record location (index.go)
//	reserve.balloon preallocated space only metadata batches may take (balloon.go)
//
// Concurrency: all methods are safe for concurrent use. Apply calls are group
// committed: one write and one fsync carry every batch queued meanwhile.
// The head segment is preallocated (segment.go); after small commits a
// zeroer goroutine writes zeros a little ahead of the records, so that a
// small commit's fdatasync flushes data only, with no journal commit for
// an unwritten extent (zero.go). No format change: zeros past the last
// commit record were always free space to a scan.
package store
