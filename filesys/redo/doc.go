// Package redo is a file system node's metadata redo log (Frangipani §4,
// Calaveras §3-6): a bounded circular log in a byte range of the shared
// volume, written by one node and replayable by any node after a crash.
//
// It owns the bytes of its log region and nothing else. It does not read or
// write metadata blocks in place, keep block versions, or take locks: the
// caller logs an Update (new bytes for part of a block and the block's new
// version), waits for the record to be durable before it writes the block in
// place, and Releases the record once the block is written back. After a
// crash another node calls Recover, then Plan, and applies to each block the
// updates whose version is newer than the block's.
//
// Guarantees:
//   - A record (one Append) is replayed whole or not at all.
//   - Recover returns a prefix, in LSN order, of the records not yet
//     released: every record whose Wait returned nil, and possibly some
//     later ones that reached the disk unacknowledged. A batch torn by a
//     crash, or bytes left from earlier laps of the circular log, are never
//     mistaken for records (format.go).
//   - Bytes that Recover may still need are never overwritten: space is
//     reused only behind the oldest unreleased record as recorded in a batch
//     that is already durable.
//   - After a device error (for instance "fenced": this node was declared
//     dead) the log writes nothing more; every later Append, Wait, Sync and
//     Close returns that error.
//
// Group commit (Calaveras §5): Append only queues the record; one writer
// goroutine owns the device. A Wait on an idle log starts a write at once;
// records appended while a write is in flight go out together in the next
// write. Records nobody waits for are written within Options.FlushInterval.
// Stats reports the batching factor, Records/Batches; Options.AfterWrite
// reports each write as it becomes durable.
//
// Concurrency: all methods of Log are safe for concurrent use. Options.
// OnPressure runs on its own goroutine, one call at a time, with no lock held.
//
// Time: the writer goroutine uses a timer for FlushInterval; nothing else
// reads a clock. Recover and Plan are pure functions of the region's bytes.
package redo
