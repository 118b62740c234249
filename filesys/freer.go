package filesys

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// Freeing orphans in batches. Through FUSE every file is known to the
// kernel when it is unlinked (the kernel looked it up to name it), so an
// unlink only orphans it (remove.go) and the kernel's FORGET, which follows
// at once, drops the last reference. Freeing each such file in a
// transaction of its own, with a log sync, a decommit of its data and a
// third transaction each, made deletes cost two or three transactions and
// flooded the node with one goroutine per file during an rm -rf (enough,
// measured, for it to lose its lock lease). Unhold therefore hands the
// orphan to the freer: one goroutine that takes up to freeBatchMax of them
// at a time and frees them together (freeOrphanBatch).
//
// A batch keeps every guarantee of a lone free:
//
//   - Crashes. Each orphan stays listed in this node's orphan table until
//     the transaction that frees it commits, and that transaction clears
//     the entries of exactly the inodes it frees (or finds gone): a crash
//     at any point leaves the table listing every orphan not yet freed,
//     and recovery plus the janitor free them (orphans.go). The queue is
//     memory only; losing it loses nothing.
//   - Data. An orphan's extent is decommitted before the transaction that
//     frees the inode, while the inode is still allocated in its group's
//     bitmap (no create can take the number) and its locks are held, and
//     only after one log sync has made the unlink durable: from then on
//     the file can never come back after a crash (recovery finds it
//     unlinked and listed, and frees it), so its bytes are garbage. The
//     free then records the extent clean (high-water mark 0), so no third
//     transaction and no second sync are needed, and the number is reused
//     without a decommit of its own (allocInode).
//   - Opens. The checks of a lone free are made for each orphan under its
//     inode lock: open or held here again (errOpenHere: its last Release
//     frees it), or possibly open on another node (errOpenElsewhere: a
//     reaper frees it, iopen.go). An Open that races the batch waits for
//     the inode lock and then finds the inode freed (ErrStale).
//   - Unmount. Close drains the queue before it stops; a file Unhold
//     hands over after that, or while the queue is full (freerQueueMax:
//     bounded memory), is freed at once as before.

// freeBatchMax bounds the orphans one transaction frees (its record stays
// far below half the log: each orphan changes one inode block, one bit of
// its group and one orphan-table entry); freerQueueMax bounds the queue
// (256 KiB: an rm -rf outruns the freer, whose decommits wait for the
// bricks, and this holds some seconds of it, measured: 8,758 forgotten
// files freed in ~15 s behind a 5 s rm -rf);
// freeGather is how long the freer lets a batch gather after it wakes;
// decommitsMax bounds the decommits of a batch in flight at once.
const (
	freeBatchMax  = 64
	freerQueueMax = 16384
	freeGather    = 2 * time.Millisecond
	decommitsMax  = 16
)

// orphanRef names an orphan: inode ino, generation gen.
type orphanRef struct{ ino, gen uint64 }

// freer is the queue of orphans the kernel forgot, waiting to be freed.
type freer struct {
	mu     sync.Mutex
	queue  []orphanRef
	gauge  prometheus.Gauge // len(queue), for whoever watches
	closed bool             // unmounting: add refuses
	wake   chan struct{}    // capacity 1
	done   chan struct{}    // closed when the loop ends
}

func (f *freer) init(gauge prometheus.Gauge) {
	f.gauge = gauge
	f.wake = make(chan struct{}, 1)
	f.done = make(chan struct{})
}

// add queues orphan ino (generation gen); false if the queue is full or
// closed (the caller frees it itself).
func (f *freer) add(ino, gen uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || len(f.queue) >= freerQueueMax {
		return false
	}
	f.queue = append(f.queue, orphanRef{ino, gen})
	f.gauge.Inc()
	select {
	case f.wake <- struct{}{}:
	default:
	}
	return true
}

// take removes up to freeBatchMax orphans of distinct inodes from the
// front of the queue (a later duplicate waits for the next batch); closed
// reports whether the queue is closed.
func (f *freer) take() (batch []orphanRef, closed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	batch, f.queue = distinctBatch(f.queue)
	f.gauge.Sub(float64(len(batch)))
	return batch, f.closed
}

// distinctBatch splits off up to freeBatchMax refs of distinct inodes from
// the front of refs and returns them and the rest, in order.
func distinctBatch(refs []orphanRef) (batch, rest []orphanRef) {
	seen := map[uint64]bool{}
	n := 0
	for n < len(refs) && len(batch) < freeBatchMax {
		u := refs[n]
		n++
		if seen[u.ino] {
			rest = append(rest, u)
			continue
		}
		seen[u.ino] = true
		batch = append(batch, u)
	}
	return batch, append(rest, refs[n:]...)
}

// freerLoop frees the queued orphans, a batch at a time, until the file
// system stops, or the queue is closed and empty.
func (fs *FS) freerLoop() {
	defer fs.flusher.Done()
	defer close(fs.freer.done)
	ctx, cancel := fs.untilStop(context.Background())
	defer cancel()
	for ctx.Err() == nil {
		batch, closed := fs.freer.take()
		if len(batch) == 0 {
			if closed {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-fs.freer.wake:
			}
			// Let the kernel's FORGETs of an rm -rf gather.
			select {
			case <-ctx.Done():
				return
			case <-time.After(freeGather):
			}
			continue
		}
		if fs.failed() != nil {
			continue // the entries stay: recovery frees them
		}
		fs.freeForgotten(ctx, batch)
	}
}

// drainFreer frees what the freer has queued and closes the queue
// (unmount, before the file system stops); it gives up when ctx ends,
// leaving the rest listed in the table.
func (fs *FS) drainFreer(ctx context.Context) {
	f := &fs.freer
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
	select {
	case <-f.done:
	case <-ctx.Done():
	}
}

// freeForgotten frees the orphans us of this node's table (distinct
// inodes), several per transaction; a batch that fails as a whole is
// tried one orphan at a time, so that one bad inode holds up no other.
func (fs *FS) freeForgotten(ctx context.Context, us []orphanRef) {
	out := fs.freeOrphanBatch(ctx, us, nil, func(t *tx, i int) error {
		t.orphanDel(us[i].ino)
		return nil
	})
	for i, o := range out {
		u := us[i]
		switch {
		case o.err == nil, errors.Is(o.err, errOpenHere):
		case errors.Is(o.err, errOpenElsewhere):
			fs.reapWhenClosed(u.ino, u.gen)
		case fs.failed() != nil || ctx.Err() != nil:
			// Stopping: the entry stays for recovery or the next mount.
		case o.batch && len(us) > 1:
			fs.freeOrphan(ctx, u.ino, u.gen)
		default:
			fs.log.Warn("could not free an unlinked file after the kernel forgot it (fsck will)", "ino", u.ino, "err", o.err)
		}
	}
}

// freeOrphans frees every unlinked file still held here or queued (at
// unmount: the kernel need not forget its inodes first).
func (fs *FS) freeOrphans(ctx context.Context) {
	fs.mu.Lock()
	var us []orphanRef
	for ino, gen := range fs.mu.orphans {
		us = append(us, orphanRef{ino, gen})
	}
	fs.mu.orphans = map[uint64]uint64{}
	clear(fs.mu.opens)
	fs.mu.Unlock()
	fs.freer.mu.Lock()
	us = append(us, fs.freer.queue...)
	fs.freer.gauge.Sub(float64(len(fs.freer.queue)))
	fs.freer.queue = nil
	fs.freer.mu.Unlock()
	fs.unpinAllOpens()
	for len(us) > 0 {
		var batch []orphanRef
		batch, us = distinctBatch(us)
		fs.freeForgotten(ctx, batch)
	}
}

// freeOrphan frees ino if it is still the unlinked file of generation gen,
// and clears its entry in this node's orphan table; while another node has
// it open, a reaper does that later. A failure leaves the entry: the inode
// is freed when this node's slot is next recovered or claimed (or by
// fsck), so it is logged, not returned.
func (fs *FS) freeOrphan(ctx context.Context, ino, gen uint64) {
	_, err := fs.freeIfOrphan(ctx, ino, gen, nil, func(t *tx) error {
		t.orphanDel(ino)
		return nil
	})
	switch {
	case err == nil, errors.Is(err, errOpenHere):
	case errors.Is(err, errOpenElsewhere):
		fs.reapWhenClosed(ino, gen)
	default:
		fs.log.Warn("could not free an unlinked file after its last close (fsck will)", "ino", ino, "err", err)
	}
}

// freeIfOrphan is freeOrphanBatch for one orphan: it reports whether it
// freed the inode.
func (fs *FS) freeIfOrphan(ctx context.Context, ino, gen uint64, extra []want, clearEntry func(t *tx) error) (bool, error) {
	o := fs.freeOrphanBatch(ctx, []orphanRef{{ino, gen}}, extra, func(t *tx, _ int) error { return clearEntry(t) })[0]
	return o.freed, o.err
}

// freeOutcome is what freeOrphanBatch did with one orphan.
type freeOutcome struct {
	freed bool  // freed; otherwise, if err is nil, it was no orphan any more and only its entry was cleared
	err   error // errOpenHere or errOpenElsewhere (its entry kept), or the batch's failure
	batch bool  // err is the whole batch's failure
}

// freeOrphanBatch frees, in one transaction, each inode of us (distinct)
// that still is the unlinked file of its generation, and clears the
// table entries (clearEntry(t, i) stages us[i]'s) of those it frees and
// of those that are no orphans any more; it leaves the entries of
// orphans open here (errOpenHere: their last local Release frees them)
// or maybe open on another node (errOpenElsewhere). extra are locks
// clearEntry needs (a dead node's table). The freed inodes' extents are
// decommitted first, behind one log sync (see the comment at the top).
//
// Locks: the barrier and the inode locks in order, the open locks tried
// (bounded waits) as removals do; the groups' locks and extra only once
// the extents are clear, so that creates in those groups do not wait for
// the decommits (they cannot take these numbers meanwhile: the bitmap
// still has them). Taking those after the open locks cannot deadlock:
// nobody waits for an open lock without bound while holding a lock.
func (fs *FS) freeOrphanBatch(ctx context.Context, us []orphanRef, extra []want, clearEntry func(t *tx, i int) error) []freeOutcome {
	out := make([]freeOutcome, len(us))
	fail := func(err error) []freeOutcome {
		for i := range out {
			out[i] = freeOutcome{err: err, batch: true}
		}
		return out
	}
	ws := []want{r(barrierLock)}
	for _, u := range us {
		ws = append(ws, w(inodeLock(u.ino)))
	}
	h, err := fs.acquire(ctx, ws...)
	if err != nil {
		return fail(err)
	}
	defer h.release()
	t := fs.newTx(ctx)
	ins := make([]*layout.Inode, len(us)) // the orphans to free
	for i, u := range us {
		in, err := t.inode(u.ino)
		switch {
		case errors.Is(err, ErrNotFound):
			// Freed already: only the entry is left.
		case err != nil:
			return fail(err)
		case in.Nlink != 0 || in.Gen != u.gen:
			// Not this orphan any more: only the entry is left.
		case fs.heldHere(u.ino, u.gen):
			out[i].err = errOpenHere
		case fs.openElsewhere(ctx, h, u.ino):
			out[i].err = errOpenElsewhere
		default:
			ins[i] = in
		}
	}
	if err := fs.clearOrphanExtents(ctx, us, ins); err != nil {
		return fail(err)
	}
	var more []want
	groups := map[int]bool{}
	for i, u := range us {
		if g := layout.RGOf(u.ino); ins[i] != nil && !groups[g] {
			groups[g] = true
			more = append(more, w(rgLock(g)))
		}
	}
	more = append(more, extra...)
	sort.Slice(more, func(i, j int) bool { return more[i].id < more[j].id })
	for _, x := range more {
		if err := h.add(ctx, x); err != nil {
			return fail(err)
		}
	}
	freed := 0
	for i, u := range us {
		if ins[i] != nil {
			if err := fs.freeInode(t, u.ino, ins[i]); err != nil {
				return fail(err)
			}
			out[i].freed = true
			freed++
		}
		if out[i].err == nil {
			if err := clearEntry(t, i); err != nil {
				return fail(err)
			}
		}
	}
	if err := t.commit(); err != nil {
		return fail(err)
	}
	fs.stats.orphansFreed.Add(float64(freed))
	return out
}

// clearOrphanExtents decommits the extents of the orphans ins (nil: not
// freed) of us, whose inode locks the caller holds, and zeroes the
// high-water marks of those it cleared, for the transaction that frees
// them. One log sync first makes their unlinks durable: after it no crash
// can bring them back, so their bytes may go. A decommit that fails
// leaves the mark: the inode's next allocation clears the extent. Only a
// failed sync is an error (the file system stops).
func (fs *FS) clearOrphanExtents(ctx context.Context, us []orphanRef, ins []*layout.Inode) error {
	var todo []int
	for i, in := range ins {
		if in != nil && in.HWM > 0 {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	if err := fs.Sync(ctx); err != nil {
		return err
	}
	sem := make(chan struct{}, decommitsMax)
	var wg sync.WaitGroup
	for _, i := range todo {
		ino, in := us[i].ino, ins[i]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fs.data.settle(ino)
			if err := fs.decommit(ctx, layout.ExtentAddr(ino), in.HWM, fs.extentVersion(in)); err != nil {
				fs.log.Warn("could not free a deleted file's data (the next user of the inode will)", "ino", ino, "err", err)
				return
			}
			in.HWM = 0
		}()
	}
	wg.Wait()
	return nil
}
