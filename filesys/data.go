package filesys

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/plumeria-fs/plumeria/filesys/layout"
	"github.com/plumeria-fs/plumeria/lock"
)

// Write-behind of file data. Write copies the bytes and returns once the
// volume write is under way, or gathered into a run with the writes to the
// same file it continues (up to coalesceMax; small sequential writes then
// cost one volume write per run instead of one each); up to
// dataInflightMax bytes are accepted and not yet written at once, so a
// sequential writer keeps the replicated volume busy instead of waiting
// for each write's round trip. What still holds:
//   - Ordered data: the redo log writes a batch only after every data write
//     accepted before it (gathered runs are started first) has finished
//     (redo.Options.BeforeWrite), so no record
//     that makes bytes visible (a larger size) is durable before them; a
//     data write that failed stops the log (and the node) instead. Only
//     batches that may make bytes visible wait: when every transaction
//     logged since the last wait was an overwrite inside a file's size
//     (tx.hidesData), the batch goes out while the data is still being
//     written (see barrier), so an fsync's data and log writes overlap.
//   - Except for lack of space: a brick that refused a data write as full
//     loses only those bytes of that file (they read as the file's earlier
//     bytes there, or zeros), as a local file system's failed write-back
//     does, and fsync (or close, if already known) reports ENOSPC. For
//     lowSpaceFor after that, writes are written through (writeThrough),
//     so write(2) itself fails with ENOSPC and changes nothing.
//   - Read-your-writes on this node: Read waits for the inode's writes.
//   - Other nodes: a revoke of the inode's lock waits for them first.
//   - fsync waits for the inode's writes and reports the first that failed
//     since the last fsync (then the log is synced).
//   - Truncate, hole punching, and freeing a file wait for its writes,
//     and overlapping writes to one file are issued in order.
type dataWriter struct {
	fs   *FS
	mu   sync.Mutex
	cond *sync.Cond
	seq  uint64 // last write issued
	// inflight holds the writes under way by sequence number, and oldest
	// is the lowest of them (seq+1 when none; sequence numbers are
	// dense, so it advances in amortized O(1)); byIno indexes them by
	// inode and extent slot (overlap checks look at the writes that
	// touch the same slots only: thousands of small random writes may be
	// under way, and a scan of all of them per write, per read and per
	// completion under d.mu held the node to ~3,000 writes/s).
	inflight map[uint64]dataWrite
	oldest   uint64
	byIno    map[uint64]*inoWrites
	pending  map[uint64]*pendingRun // by inode: gathered small writes, not started
	bytes    int                    // bytes accepted and not yet written (gathered or under way)
	errs     map[uint64]error       // by inode: first failure not yet reported by fsync
	failed   error                  // first failure of all: the log must not go on
	noSpace  time.Time              // last write a brick refused for lack of space
	// exposed: a transaction that may make data visible was committed
	// since the last barrier that waited (set before its record is
	// appended to the log). Atomic: every transaction sets it, and d.mu
	// is the data writes' lock.
	exposed atomic.Bool
}

// lowSpaceFor is how long after a brick refused a data write for lack of
// space writes are written through.
const lowSpaceFor = 30 * time.Second

type dataWrite struct {
	ino      uint64
	off, end uint64 // extent bytes [off, end)
}

// inoWrites are one inode's writes under way.
type inoWrites struct {
	seqs  map[uint64]struct{}
	slots map[uint64][]uint64 // slot (writeSlotBytes of the extent) -> seqs of the writes touching it
}

// writeSlotBytes is the granule of the overlap index.
const writeSlotBytes = 64 << 10

// slotsOf returns the slots [first, last] that bytes [off, end) touch
// (end > off).
func slotsOf(off, end uint64) (first, last uint64) {
	return off / writeSlotBytes, (end - 1) / writeSlotBytes
}

func (iw *inoWrites) add(seq uint64, w dataWrite) {
	iw.seqs[seq] = struct{}{}
	first, last := slotsOf(w.off, w.end)
	for sl := first; ; sl++ {
		iw.slots[sl] = append(iw.slots[sl], seq)
		if sl == last {
			break
		}
	}
}

func (iw *inoWrites) remove(seq uint64, w dataWrite) {
	delete(iw.seqs, seq)
	first, last := slotsOf(w.off, w.end)
	for sl := first; ; sl++ {
		l := iw.slots[sl]
		for i, s := range l {
			if s == seq {
				l = append(l[:i], l[i+1:]...)
				break
			}
		}
		if len(l) == 0 {
			delete(iw.slots, sl)
		} else {
			iw.slots[sl] = l
		}
		if sl == last {
			break
		}
	}
}

// overlapping reports whether a write under way with a seq below before
// overlaps bytes [off, end) (end > off); inflight gives each seq's range.
func (iw *inoWrites) overlapping(off, end, before uint64, inflight map[uint64]dataWrite) bool {
	hit := func(s uint64) bool {
		o := inflight[s]
		return s < before && o.off < end && off < o.end
	}
	first, last := slotsOf(off, end)
	if last-first >= uint64(len(iw.seqs)) { // fewer writes than slots: look at each
		for s := range iw.seqs {
			if hit(s) {
				return true
			}
		}
		return false
	}
	for sl := first; ; sl++ {
		for _, s := range iw.slots[sl] {
			if hit(s) {
				return true
			}
		}
		if sl == last {
			return false
		}
	}
}

// dataInflightMax bounds the bytes of file data in flight per node.
const dataInflightMax = 8 << 20

func (d *dataWriter) init(fs *FS) {
	d.fs = fs
	d.cond = sync.NewCond(&d.mu)
	d.inflight = map[uint64]dataWrite{}
	d.oldest = 1
	d.byIno = map[uint64]*inoWrites{}
	d.pending = map[uint64]*pendingRun{}
	d.errs = map[uint64]error{}
}

// write starts writing p (copied) at off of ino's extent. Small writes
// that continue one another (a file written sequentially in small pieces,
// tar's 10 KiB records) are gathered into one run of up to coalesceMax
// bytes and written as one volume write when the run is full, when a write
// that does not continue it comes, or when anything waits for ino's data
// or for all data (settle, sync, barrier before a log write, drain). It
// waits while too much is accepted and not yet written.
//
// fver is the file version the bytes belong to (0: the volume keeps
// none): a run gathers only writes of one version.
func (d *dataWriter) write(ctx context.Context, ino uint64, p []byte, off uint64, fver uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	// Gathered runs count too: they are started so that they can finish.
	for d.bytes > 0 && d.bytes+len(p) > dataInflightMax {
		if len(d.pending) > 0 {
			d.startAllLocked()
			continue
		}
		d.cond.Wait()
	}
	d.bytes += len(p)
	d.fs.stats.dataInflight.Add(float64(len(p)))
	if r := d.pending[ino]; r != nil && r.fver == fver && off == r.off+uint64(len(r.buf)) && len(r.buf)+len(p) <= coalesceMax {
		r.buf = append(r.buf, p...)
		if len(r.buf) >= coalesceMax {
			d.startPendingLocked(ino)
		}
		return
	}
	d.startPendingLocked(ino) // the run before goes first
	if len(p) < coalesceMax/2 {
		// Room for a few more pieces, but a small allocation: the
		// runtime zeroes a large one (over 32 KiB) first, which cost a
		// random 4 KiB write half its handler time. A run that grows
		// past it is reallocated by append.
		buf := append(make([]byte, 0, max(len(p), min(4*len(p), smallAllocMax))), p...)
		d.pending[ino] = &pendingRun{ctx: context.WithoutCancel(ctx), off: off, buf: buf, fver: fver}
		return
	}
	d.startLocked(context.WithoutCancel(ctx), ino, append([]byte(nil), p...), off, fver)
}

// pendingRun is a run of writes to one file gathered and not yet started.
type pendingRun struct {
	ctx  context.Context // of its first write
	off  uint64
	buf  []byte
	fver uint32
}

// coalesceMax bounds a gathered run: one volume write of up to 1 MiB.
const coalesceMax = 1 << 20

// smallAllocMax is the Go runtime's largest small object: larger ones are
// zeroed when allocated.
const smallAllocMax = 32 << 10

// startPendingLocked starts ino's gathered run, if any.
func (d *dataWriter) startPendingLocked(ino uint64) {
	if r := d.pending[ino]; r != nil {
		delete(d.pending, ino)
		d.startLocked(r.ctx, ino, r.buf, r.off, r.fver)
	}
}

// startAllLocked starts every gathered run.
func (d *dataWriter) startAllLocked() {
	for ino := range d.pending {
		d.startPendingLocked(ino)
	}
}

// startLocked registers buf (its bytes already counted in d.bytes) as the
// next write and starts it: it goes to the volume once no earlier write of
// ino to an overlapping range is under way, so writes to a file reach the
// volume in the order they were made.
func (d *dataWriter) startLocked(ctx context.Context, ino uint64, buf []byte, off uint64, fver uint32) {
	w := dataWrite{ino: ino, off: off, end: off + uint64(len(buf))}
	seq := d.addLocked(w)
	go func() {
		d.mu.Lock()
		for d.overlapsBeforeLocked(w, seq) {
			d.cond.Wait()
		}
		d.mu.Unlock()
		err, noSpace := d.put(ctx, ino, buf, off, fver)
		if err != nil {
			d.fs.log.Warn("file data write failed (fsync reports it)", "ino", ino, "off", off, "bytes", len(buf), "err", err)
			d.fs.pages.drop(ino) // reads here must not return bytes the volume lacks
			// Nor the kernel's pages of them, kept across opens. On a
			// goroutine of its own, as in fail: telling the kernel may
			// wait for it, and writes may wait for this one's bytes.
			go d.fs.invalidate(ino, lock.None)
		}
		d.mu.Lock()
		d.doneLocked(seq, w)
		d.bytes -= len(buf)
		d.fs.stats.dataInflight.Sub(float64(len(buf)))
		if err != nil && d.errs[ino] == nil {
			d.errs[ino] = err
		}
		if err != nil && !noSpace && d.failed == nil {
			d.failed = fmt.Errorf("file data of inode %d at %d not written: %w", ino, off, err)
		}
		d.cond.Broadcast()
		d.mu.Unlock()
	}()
}

// addLocked registers w as the next write under way and returns its seq.
func (d *dataWriter) addLocked(w dataWrite) uint64 {
	d.seq++
	d.inflight[d.seq] = w
	iw := d.byIno[w.ino]
	if iw == nil {
		iw = &inoWrites{seqs: map[uint64]struct{}{}, slots: map[uint64][]uint64{}}
		d.byIno[w.ino] = iw
	}
	iw.add(d.seq, w)
	return d.seq
}

// doneLocked unregisters the write seq (w) that finished.
func (d *dataWriter) doneLocked(seq uint64, w dataWrite) {
	delete(d.inflight, seq)
	for _, busy := d.inflight[d.oldest]; !busy && d.oldest <= d.seq; _, busy = d.inflight[d.oldest] {
		d.oldest++
	}
	iw := d.byIno[w.ino]
	if iw.remove(seq, w); len(iw.seqs) == 0 {
		delete(d.byIno, w.ino)
	}
}

// put writes p at off of ino's extent. A brick's lack of space is
// ErrNoSpace (noSpace true, and the node writes through for a while).
func (d *dataWriter) put(ctx context.Context, ino uint64, p []byte, off uint64, fver uint32) (err error, noSpace bool) {
	addr := layout.ExtentAddr(ino) + off
	err = d.fs.writeData(ctx, p, addr, fver)
	if err == nil {
		d.fs.stats.dataBytes.Add(float64(len(p)))
		return nil, false
	}
	d.fs.stats.dataErrors.Inc()
	if noSpace = errors.Is(err, ErrNoSpace); noSpace {
		d.mu.Lock()
		d.noSpace = time.Now()
		d.mu.Unlock()
	}
	return d.fs.ioError(fmt.Sprintf("write data of inode %d at %d", ino, off), addr, err), noSpace
}

// lowSpace reports whether a brick refused a data write for lack of space
// in the last lowSpaceFor.
func (d *dataWriter) lowSpace() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.noSpace.IsZero() && time.Since(d.noSpace) < lowSpaceFor
}

// writeThrough writes p at off of ino's extent and waits for it (after
// ino's writes under way, which it may overlap).
func (d *dataWriter) writeThrough(ctx context.Context, ino uint64, p []byte, off uint64, fver uint32) error {
	d.settle(ino)
	err, _ := d.put(ctx, ino, p, off, fver)
	return err
}

// takeErr returns (and forgets) ino's first failed write not yet reported,
// without waiting for its writes under way.
func (d *dataWriter) takeErr(ino uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.errs[ino]
	delete(d.errs, ino)
	return err
}

// overlapsBeforeLocked reports whether a write registered before seq
// overlaps w and is still under way.
func (d *dataWriter) overlapsBeforeLocked(w dataWrite, seq uint64) bool {
	iw := d.byIno[w.ino]
	return iw != nil && w.end > w.off && iw.overlapping(w.off, w.end, seq, d.inflight)
}

// settle waits until no write of ino is under way.
func (d *dataWriter) settle(ino uint64) {
	d.settleRange(ino, 0, ^uint64(0))
}

// settleRange waits until no write of ino to bytes [off, end) of its
// extent is under way (a read of those bytes then sees every write that
// returned before it). The caller holds ino's lock, so no new write of ino
// starts meanwhile.
func (d *dataWriter) settleRange(ino, off, end uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r := d.pending[ino]; r != nil && r.off < end && off < r.off+uint64(len(r.buf)) {
		d.startPendingLocked(ino)
	}
	for d.busyLocked(dataWrite{ino: ino, off: off, end: end}) {
		d.cond.Wait()
	}
}

// busyLocked reports whether a write of w.ino overlapping w is under way.
func (d *dataWriter) busyLocked(w dataWrite) bool {
	return d.overlapsBeforeLocked(w, ^uint64(0))
}

// sync waits for ino's writes and returns (and forgets) the first failure
// since the last sync of ino.
func (d *dataWriter) sync(ino uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.startPendingLocked(ino)
	for d.byIno[ino] != nil {
		d.cond.Wait()
	}
	err := d.errs[ino]
	delete(d.errs, ino)
	return err
}

// barrier waits until every write issued so far has finished: the redo
// log calls it before it writes a batch.
//
// A data write that failed makes it fail, and with it the log and the
// node: a record logged after it may make its bytes visible (a larger
// size), and it must not become durable. Another node then recovers the
// log up to what was durable before, as after a crash. A write refused for
// lack of space does not (see the type's comment).
//
// It waits only if a transaction that may make data visible was committed
// since the last barrier that waited (exposing). That is enough: such a
// transaction's data writes were accepted before it set the flag, and
// the flag is set before its record is appended, so either this barrier
// sees the flag (the batch holds the record or comes before it), or an
// earlier barrier cleared it, and that one waited for every write
// accepted before it, those included. A batch of overwrites inside files'
// sizes alone (new times) may reach the log before their data: after a
// crash the file then has its new times over some old bytes, which no
// fsync had promised yet, and never bytes it did not have.
func (d *dataWriter) barrier() error {
	exposed := d.exposed.Swap(false) // before the snapshot of what is under way
	d.mu.Lock()
	defer d.mu.Unlock()
	if !exposed {
		return d.failed
	}
	d.startAllLocked()
	upTo := d.seq
	for d.oldest <= upTo {
		d.cond.Wait()
	}
	return d.failed
}

// exposing records that a transaction that may make data visible is
// about to be logged: the next log batch waits for the data (barrier).
func (d *dataWriter) exposing() { d.exposed.Store(true) }

// drain waits for every write under way.
func (d *dataWriter) drain() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.startAllLocked()
	for len(d.inflight) > 0 {
		d.cond.Wait()
	}
}
