package store

import (
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The zeroer writes zeros into the head segment's preallocated space
// ahead of its records, while the store commits small batches.
//
// Why: fallocate gives a segment its blocks as unwritten extents. The
// first write into such a block converts it, and the fdatasync after it
// must then commit the file system's journal as well as flush the data
// (ext4 and XFS alike). Measured on this machine's ext4 (a 4,192-byte
// record appended and fdatasync'd, medians of 600): into fallocated space
// 263-349 us with one file, 614-681 us with three files at once (three
// bricks on one disk: their journal commits queue); into space already
// written 236-249 us and 405-436 us. A store's small synchronous commits
// (4 KiB writes with fsync, the file systems' log records) pay that
// journal commit every time; zeros written and synced ahead of them make
// each a plain data flush.
//
// What it costs: every byte zeroed is written twice, so the zeroer runs
// only after a group commit of at most zeroSmallBytes, none for
// zeroBulkQuiet after a larger one (a bulk writer, whose data would
// overwrite the zeros, between the file systems' small log commits), and keeps between
// zeroLeadBytes-zeroStepBytes and zeroLeadBytes ahead of the records (one
// write and sync per zeroStepBytes): a bulk writer converts its own
// extents with few, large commits and is not doubled.
//
// Safety: the zeroer writes only at or past the end of what the committer
// has written or is writing (claimed, set before each segment write), and
// a committer write that would reach a range being zeroed waits for it
// (claim), so zeros never land on records. A segment is retired before it
// is cut or sealed, so no zero write can extend a file after its
// truncation. Zeros past the last commit record are what a scan takes for
// free space (scan.go), as fallocated space reads. The zeroer syncs
// through a descriptor of its own: Linux reports a writeback error once
// per open file, so an error it met cannot hide from the committer's
// fdatasync.
type zeroer struct {
	mu   sync.Mutex
	cond sync.Cond // signalled when a zero write ends or the segment is retired

	seg     *segment // the head segment zeroed ahead of (nil: none)
	f       *os.File // the zeroer's own descriptor of seg's file
	alloc   int64    // seg's preallocated size: nothing is written at or past it
	claimed int64    // end of the records written or being written in seg
	done    int64    // zeros written and synced in seg up to here
	busy    bool     // zeros are being written from here on (at most zeroStepBytes)
	from    int64
	bytes   int64         // zeros written, in all segments (Stats.ZeroedBytes)
	bulkAt  time.Time     // the last group commit above zeroSmallBytes
	quiet   time.Duration // zeroBulkQuiet (tests change it)

	wake    chan struct{} // cap 1: a small commit happened
	stop    chan struct{}
	stopped chan struct{}
	zeros   []byte // zeroStepBytes of zeros
	onWrite func() // tests: called as a zero write starts
}

const (
	zeroStepBytes  = 256 << 10   // written and synced at a time
	zeroLeadBytes  = 1 << 20     // at most this far ahead of the records
	zeroSmallBytes = 64 << 10    // group commits up to this size wake the zeroer
	zeroBulkQuiet  = time.Second // no zeros this long after a larger group commit
	zeroAlign      = 4 << 10     // file system blocks: zeros start on one
)

func newZeroer() *zeroer {
	z := &zeroer{wake: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{}), quiet: zeroBulkQuiet}
	z.cond.L = &z.mu
	return z
}

// run zeroes ahead while woken, until close.
func (z *zeroer) run(s *Store) {
	defer close(z.stopped)
	defer func() {
		z.mu.Lock()
		z.closeFileLocked()
		z.mu.Unlock()
	}()
	for {
		select {
		case <-z.stop:
			return
		case <-z.wake:
		}
		for z.step(s) {
			select {
			case <-z.stop:
				return
			default:
			}
		}
	}
}

// step zeroes the next range ahead of the records, if any; false when
// there is nothing to do (or it failed: then the segment is left alone).
func (z *zeroer) step(s *Store) bool {
	z.mu.Lock()
	// Whole steps, once the lead has shrunk by one: a sync per step, not
	// one per commit.
	if z.seg == nil || z.done >= z.alloc || z.done-z.claimed > zeroLeadBytes-zeroStepBytes || time.Since(z.bulkAt) < z.quiet {
		z.mu.Unlock()
		return false
	}
	if z.f == nil {
		f, err := os.OpenFile(filepath.Join(s.dir, segName(z.seg.id)), os.O_WRONLY, 0)
		if err != nil {
			s.log.Debug("zeroer: open segment", "segment", z.seg.id, "err", err)
			z.done = z.alloc
			z.mu.Unlock()
			return false
		}
		z.f = f
	}
	a := (max(z.done, z.claimed) + zeroAlign - 1) / zeroAlign * zeroAlign
	b := min(a+zeroStepBytes, z.alloc)
	if a >= b {
		z.mu.Unlock()
		return false
	}
	z.busy, z.from = true, a
	f, id := z.f, z.seg.id
	z.mu.Unlock()

	if z.zeros == nil {
		z.zeros = make([]byte, zeroStepBytes)
	}
	if z.onWrite != nil {
		z.onWrite()
	}
	_, err := f.WriteAt(z.zeros[:b-a], a)
	if err == nil {
		err = fdatasync(f)
	}

	z.mu.Lock()
	defer z.mu.Unlock()
	z.busy = false
	z.cond.Broadcast()
	if err != nil {
		// The space stays as it was (unwritten, reading as zeros): only
		// the speed-up is lost for this segment.
		s.log.Debug("zeroer: write zeros", "segment", id, "at", a, "bytes", b-a, "err", err)
		if z.seg != nil && z.seg.id == id {
			z.done = z.alloc
		}
		return false
	}
	z.bytes += b - a
	if z.seg != nil && z.seg.id == id {
		z.done = max(z.done, b)
	}
	return true
}

// claim says the committer writes seg up to end: it waits while a zero
// write it would reach is in progress.
func (z *zeroer) claim(seg *segment, end int64) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.seg != seg {
		return
	}
	for z.busy && z.from < end {
		z.cond.Wait()
	}
	z.claimed = max(z.claimed, end)
}

// committed tells the zeroer a group of n bytes was committed to seg (the
// head, preallocated to seg.alloc): after a small one it zeroes ahead.
// Only segments of real files are zeroed (not a test's wrapper).
func (z *zeroer) committed(s *Store, seg *segment, n int64) {
	if n > zeroSmallBytes {
		z.mu.Lock()
		z.bulkAt = time.Now()
		z.mu.Unlock()
		return
	}
	if seg.alloc == 0 || s.opts.noZero {
		return
	}
	if _, ok := seg.f.(*os.File); !ok {
		return
	}
	z.mu.Lock()
	if z.seg != seg {
		z.seg, z.alloc = seg, seg.alloc // the one before was retired when sealed
		z.claimed = seg.size.Load()
		z.done = z.claimed
	}
	z.mu.Unlock()
	select {
	case z.wake <- struct{}{}:
	default:
	}
}

// retire stops zeroing seg (before it is cut or sealed): it waits for a
// zero write in progress.
func (z *zeroer) retire(seg *segment) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.seg == seg {
		z.retireLocked()
	}
}

func (z *zeroer) retireLocked() {
	for z.busy {
		z.cond.Wait()
	}
	z.closeFileLocked()
	z.seg = nil
}

func (z *zeroer) closeFileLocked() {
	if z.f != nil {
		z.f.Close()
		z.f = nil
	}
}

// close stops the zeroer and waits for it.
func (z *zeroer) close() {
	close(z.stop)
	<-z.stopped
}

// zeroedBytes is the zeros written so far.
func (z *zeroer) zeroedBytes() int64 {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.bytes
}
