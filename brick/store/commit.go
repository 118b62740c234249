package store

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/plumeria-fs/plumeria/internal/limits"
)

// request is one encoded batch on its way to the committer.
type request struct {
	buf      []byte     // the batch's records and its commit record
	recs     []scanned  // the records in buf; off is relative to buf
	internal bool       // a cleaner batch: may use the reserve; not counted in Stats.Batches
	reserved bool       // ApplyReserved: may use the metadata reserve
	refs     bool       // holds a ref record: the store must be at format version 2 first
	done     chan error // buffered; the committer sends exactly once
}

// batchBuilder encodes the records of one batch and closes it with a
// commit record.
type batchBuilder struct{ r *request }

func newBatchBuilder(records, bytes int) batchBuilder {
	return batchBuilder{r: &request{
		buf:  getBatchBuf(bytes + headerBytes),
		recs: make([]scanned, 0, records),
		done: make(chan error, 1),
	}}
}

func (bb batchBuilder) add(h header, data []byte) batchBuilder {
	off := len(bb.r.buf)
	bb.r.buf = appendRecord(bb.r.buf, h, data)
	// Pair the encoder with the decoder before anything reaches the disk.
	dh, err := decodeHeader(bb.r.buf[off:])
	if err != nil || dh.key() != h.key() || dh.kind != h.kind || dh.seq != h.seq {
		panic(fmt.Sprintf("store: record does not decode as encoded: %v", err))
	}
	bb.r.recs = append(bb.r.recs, scanned{h: dh, off: int64(off)})
	if hasRef(dh, bb.r.buf[off:]) {
		bb.r.refs = true
	}
	return bb
}

func (bb batchBuilder) finish() *request {
	r := bb.r
	for i := range r.recs {
		off := r.recs[i].off
		r.recs[i].rec = r.buf[off : off+headerBytes+int64(r.recs[i].h.dlen)]
	}
	commit := header{kind: kindCommit, vol: uint64(len(r.recs)), block: uint64(len(r.buf))}
	r.buf = appendRecord(r.buf, commit, nil)
	return r
}

// Batch buffers are recycled by size class (powers of two up to
// batchBufMax): a fresh one is zeroed by the runtime, and the store
// allocated one per batch (5% of a brick's CPU under 4 KiB random
// writes). The committer gives a batch's buffer back once the batch is in
// a segment and indexed (flushRun): nothing refers to it after that.
var batchBufs [bits.UintSize]sync.Pool

// batchBufMax bounds the buffers kept for reuse.
const batchBufMax = 32 << 20

func getBatchBuf(n int) []byte {
	c := bits.Len(uint(n - 1))
	if n > batchBufMax {
		return make([]byte, 0, n)
	}
	if b, ok := batchBufs[c].Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, 1<<c)
}

func putBatchBuf(b []byte) {
	c := bits.Len(uint(cap(b) - 1))
	if cap(b) > batchBufMax || cap(b) != 1<<c {
		return
	}
	b = b[:0]
	batchBufs[c].Put(&b)
}

// encodeBatch checks ops and encodes them as one batch.
func encodeBatch(ops []Op) (*request, error) {
	if len(ops) > BatchOpsMax {
		return nil, fmt.Errorf("%d ops, more than %d: %w", len(ops), BatchOpsMax, ErrInvalid)
	}
	bb := newBatchBuilder(len(ops), len(ops)*putRecordBytes)
	for i, op := range ops {
		h, data, err := opHeader(op)
		if err != nil {
			return nil, fmt.Errorf("op %d: %w", i, err)
		}
		bb = bb.add(h, data)
	}
	return bb.finish(), nil
}

// opHeader checks op and returns its record's header and data.
func opHeader(op Op) (header, []byte, error) {
	h := header{vol: op.Key.Vol, block: op.Key.Block, gen: op.Key.Gen, seq: op.Seq}
	data := op.Data
	if op.Kind != OpRef && len(op.Ref) != 0 {
		return h, nil, fmt.Errorf("kind %d with a ref of %d bytes: %w", op.Kind, len(op.Ref), ErrInvalid)
	}
	switch op.Kind {
	case OpPut:
		h.kind = kindPut
		if len(op.Data) != limits.BlockBytes {
			return h, nil, fmt.Errorf("put of %d bytes, want %d: %w", len(op.Data), limits.BlockBytes, ErrInvalid)
		}
	case OpTombstone, OpRemove:
		h.kind = kindTombstone
		if op.Kind == OpRemove {
			h.kind = kindRemove
		}
		if len(op.Data) != 0 {
			return h, nil, fmt.Errorf("kind %d with %d data bytes: %w", op.Kind, len(op.Data), ErrInvalid)
		}
	case OpRef:
		h.kind, data = kindRef, op.Ref
		if len(op.Ref) != RefBytes || len(op.Data) != 0 {
			return h, nil, fmt.Errorf("ref of %d bytes with %d data bytes, want %d and 0: %w", len(op.Ref), len(op.Data), RefBytes, ErrInvalid)
		}
	default:
		return h, nil, fmt.Errorf("kind %d: %w", op.Kind, ErrInvalid)
	}
	h.dlen = uint32(len(data))
	return h, data, nil
}

// Apply makes ops durable (fsync'd) before it returns, atomically as a
// batch with respect to crashes. Later ops of a batch win over earlier ones
// on the same key. Concurrent calls are group committed. ctx is honoured
// until the batch is queued; after that Apply waits for the outcome, which
// one write and one fsync bound, so a batch is never left in doubt.
// Errors: ErrInvalid (nothing written), ErrNoSpace (nothing of the batch
// visible, store still usable), ErrClosed, ctx's error, or an I/O error
// after which the store must be reopened.
func (s *Store) Apply(ctx context.Context, ops []Op) error {
	return s.apply(ctx, ops, false)
}

// ApplyReserved is Apply for metadata: it may also use the space kept back
// for it (Options.ReserveBytes).
func (s *Store) ApplyReserved(ctx context.Context, ops []Op) error {
	return s.apply(ctx, ops, true)
}

func (s *Store) apply(ctx context.Context, ops []Op, reserved bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-s.stop:
		return ErrClosed
	default:
	}
	if len(ops) == 0 {
		return nil
	}
	r, err := encodeBatch(ops)
	if err != nil {
		return err
	}
	r.reserved = reserved
	return s.submit(ctx, r)
}

func (s *Store) submit(ctx context.Context, r *request) error {
	select {
	case s.reqs <- r:
	case <-s.stop:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-r.done
}

// runCommitter is the only writer of segments and of the index. It takes
// a batch, gathers every batch queued meanwhile, and commits them with one
// write and one fsync per segment touched. It returns when Close is called.
func (s *Store) runCommitter() {
	defer close(s.committerDone)
	for {
		select {
		case <-s.stop:
			return
		case r := <-s.reqs:
			s.commitGroup(s.gather(r))
		}
	}
}

func (s *Store) gather(first *request) []*request {
	group, n := []*request{first}, len(first.buf)
	for n < groupBytesMax {
		select {
		case r := <-s.reqs:
			group, n = append(group, r), n+len(r.buf)
		default:
			return group
		}
	}
	return group
}

// commitGroup splits group into runs that fit the head segment, rolling
// between runs, and fails the batches that do not fit the capacity.
func (s *Store) commitGroup(group []*request) {
	var run []*request
	var runBytes int64
	free, freeErr := s.freeDisk()
	if freeErr == nil {
		free = s.growBalloon(free)
	}
	for _, r := range group {
		if err := s.brokenErr(); err != nil {
			r.done <- err
			continue
		}
		if err := s.admit(r, runBytes); err != nil {
			r.done <- err
			continue
		}
		if err := s.diskRoom(r, &free, freeErr, runBytes); err != nil {
			r.done <- err
			continue
		}
		n := int64(len(r.buf))
		if size := s.head.size.Load() + runBytes; size > 0 && size+n > s.opts.SegmentBytes {
			s.flushRun(run, runBytes)
			run, runBytes = nil, 0
			if err := s.roll(); err != nil {
				r.done <- fmt.Errorf("roll segment: %w", err)
				continue
			}
		}
		run, runBytes = append(run, r), runBytes+n
	}
	s.flushRun(run, runBytes)
}

// admit fails r with ErrNoSpace if it would take the segments past the
// capacity; Apply batches may not use the cleaner's reserve nor the
// metadata reserve, ApplyReserved batches only the latter.
func (s *Store) admit(r *request, pending int64) error {
	limit := s.capacity - s.reserve - s.metaReserve
	switch {
	case r.internal:
		limit = s.capacity
	case r.reserved:
		limit = s.capacity - s.reserve
	}
	if need := s.used.Load() + pending + int64(len(r.buf)); need > limit {
		return fmt.Errorf("batch of %d bytes would use %d of %d bytes: %w", len(r.buf), need, limit, ErrNoSpace)
	}
	return nil
}

// flushRun appends run to the head segment, fsyncs it, updates the index
// and answers each batch.
func (s *Store) flushRun(run []*request, n int64) {
	if len(run) == 0 {
		return
	}
	if err := s.upgradeFor(run); err != nil {
		for _, r := range run {
			buf := r.buf
			r.buf, r.recs = nil, nil
			r.done <- err
			putBatchBuf(buf)
		}
		return
	}
	head, base := s.head, s.head.size.Load()
	bufs := s.groupBufs[:0]
	for _, r := range run {
		bufs = append(bufs, r.buf)
	}
	s.groupBufs = bufs // reused
	s.zero.claim(head, base+n)
	err := s.writeDurable(head, bufs, base, n)
	clear(bufs) // no batch buffer kept from its pool
	if err == nil {
		head.size.Store(base + n)
		s.used.Add(n)
		if err = s.indexRun(head.id, base, run); err != nil {
			s.setBroken(err)
			err = s.brokenErr()
		}
	}
	if err == nil {
		s.zero.committed(s, head, n)
	}
	for _, r := range run {
		if err == nil && !r.internal {
			s.stats.batches.Add(1)
		}
		buf := r.buf
		r.buf, r.recs = nil, nil
		r.done <- err
		putBatchBuf(buf)
	}
}

// indexRoomBytes is the free space a group commit leaves on the file
// system under the store for the index: pebble grows its WAL in
// preallocated steps of 1.1x the memtable, writes memtables out as tables
// and compacts them, and it panics when a WAL write fails. Segments are
// preallocated (segment.go), so a segment write no longer fails first on
// a full disk: the file system's free space is checked before each run
// instead (a chaos run filled a brick's disk and pebble's WAL write then
// brought the brick down). The cleaner's moves, which give space back,
// may go down to half of it.
const indexRoomBytes = 32 << 20

// diskRoom fails r with ErrNoSpace when the file system under the store
// (*free bytes, freeErr if statfs failed) would keep less than
// indexRoomBytes free (half for the cleaner's batches); the batches before
// r in its run, pending bytes, count when the head segment is not
// preallocated. Batches other than the metadata's and the cleaner's also
// leave the metadata balloon's size free (balloon.go); those two take what
// they lack from the balloon, and *free grows by what it gave back. A file
// system that cannot tell is not checked.
func (s *Store) diskRoom(r *request, free *int64, freeErr error, pending int64) error {
	if freeErr != nil {
		return nil
	}
	kept := int64(indexRoomBytes)
	if r.internal {
		kept /= 2
	}
	metadata := r.reserved || r.internal
	if !metadata {
		kept += s.balloonTarget
	}
	need := kept
	if s.head.alloc < s.head.size.Load()+pending+int64(len(r.buf)) {
		need += pending + int64(len(r.buf)) // appended, not written into preallocated space
	}
	if *free < need && metadata {
		got, err := s.releaseBalloon(need - *free)
		if err != nil {
			return fmt.Errorf("batch of %d bytes: %w", len(r.buf), err)
		}
		*free += got
	}
	if *free < need {
		return fmt.Errorf("batch of %d bytes: the file system under %s has %d bytes free, and %d are kept for the index and the metadata (metadata balloon: %d of %d bytes left): %w",
			len(r.buf), s.dir, *free, kept, s.balloon.Load(), s.balloonTarget, ErrNoSpace)
	}
	return nil
}

func (s *Store) freeDisk() (int64, error) {
	if s.opts.freeBytes != nil {
		return s.opts.freeBytes()
	}
	return freeBytes(s.dir)
}

// writeDurable writes buf at off and fsyncs. On ENOSPC it truncates the
// partial write away and returns ErrNoSpace; the store stays usable. Any
// other failure breaks the store: after a failed fsync the file's contents
// are unknown (the page cache may have dropped them), and only a reopen,
// which re-reads the disk, can tell what survived.
func (s *Store) writeDurable(seg *segment, bufs [][]byte, off, n int64) error {
	start := time.Now()
	err := s.writeAt(seg, bufs, off)
	if err == nil {
		err = seg.sync()
	}
	s.stats.commitNanos.Add(int64(time.Since(start)))
	if err == nil {
		s.stats.commits.Add(1)
		return nil
	}
	err = fmt.Errorf("append %d bytes to segment %d at %d: %w", n, seg.id, off, noSpace(err))
	if !errors.Is(err, ErrNoSpace) {
		s.setBroken(err)
		return s.brokenErr()
	}
	s.zero.retire(seg)
	if cerr := seg.cut(off); cerr != nil {
		s.setBroken(fmt.Errorf("%w, after %v", cerr, err))
		return s.brokenErr()
	}
	return err
}

// writeAt writes bufs at off, one after the other: with one pwritev on a
// real file (each batch from its own buffer, none copied), else (a test's
// wrapper) as one write of their concatenation.
func (s *Store) writeAt(seg *segment, bufs [][]byte, off int64) error {
	if f, ok := seg.f.(*os.File); ok {
		return pwritev(f, bufs, off)
	}
	buf := s.groupBuf[:0]
	for _, b := range bufs {
		buf = append(buf, b...)
	}
	s.groupBuf = buf // reused: at most groupBytesMax plus one batch
	_, err := seg.f.WriteAt(buf, off)
	return err
}

// indexRun applies the records of run, written at (seg, base), to the
// index with the new watermark, without fsync: the segment is durable.
func (s *Store) indexRun(seg uint64, base int64, run []*request) error {
	b := newIndexBatch(s.db)
	defer b.Close()
	groups := make([][]scanned, len(run))
	for i, r := range run {
		groups[i] = r.recs
	}
	if err := b.prefetch(groups...); err != nil {
		return fmt.Errorf("index segment %d: %w", seg, err)
	}
	d := newDelta()
	off := uint64(base)
	for _, r := range run {
		for _, rec := range r.recs {
			if err := applyRecord(b, seg, off+uint64(rec.off), rec.h, rec.rec, d); err != nil {
				return fmt.Errorf("index segment %d: %w", seg, err)
			}
		}
		off += uint64(len(r.buf))
	}
	if err := b.commit(watermark{seg: seg, off: off}); err != nil {
		return fmt.Errorf("index segment %d: %w", seg, err)
	}
	s.addDelta(d)
	return nil
}

// upgradeFor moves the store to format version 2 (record.go) if a batch
// of run holds a ref and the store is still at version 1: the index says
// version 2, durably, before the first ref record reaches a segment, so a
// build of version 1 refuses the store instead of misreading it.
func (s *Store) upgradeFor(run []*request) error {
	if s.version.Load() >= formatVersionRef {
		return nil
	}
	for _, r := range run {
		if r.refs {
			return s.upgradeFormat()
		}
	}
	return nil
}

// upgradeFormat sets the index's format version to formatVersionRef and
// syncs it. Called by the committer, or by Open before it starts.
func (s *Store) upgradeFormat() error {
	if err := s.db.Set(versionKey, []byte{formatVersionRef}, pebble.Sync); err != nil {
		return fmt.Errorf("upgrade store to format version %d: %w", formatVersionRef, err)
	}
	s.log.Info("store upgraded to format version 2 (its first ref record): builds before format 2 no longer open it",
		"from", s.version.Load(), "to", formatVersionRef)
	s.version.Store(formatVersionRef)
	return nil
}

// roll seals the head segment (its last run is fsync'd) and starts the next.
func (s *Store) roll() error {
	if err := s.seal(s.head); err != nil {
		return err
	}
	seg, err := s.createSegment(s.head.id + 1)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.mu.segs[seg.id] = seg
	s.mu.Unlock()
	s.head = seg
	s.headID.Store(seg.id)
	return nil
}
