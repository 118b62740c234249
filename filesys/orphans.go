package filesys

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/plumeria-fs/plumeria/filesys/layout"
	"github.com/plumeria-fs/plumeria/lock"
)

// Orphans are files unlinked while still open or known to this node's
// kernel: they have no name but keep their inode until the last Release.
// So that a crash cannot leak them, each one is listed in this node's log
// slot's orphan table (layout/orphan.go): the entry is added in the
// transaction of the unlink or rename that orphans the file and cleared
// in the one that frees it. Recovery replays a dead node's log, so its
// table then lists exactly the orphans it left; if there are any, the slot
// is marked recovered instead of freed, and a mounted node's janitor frees
// them through the normal locked path (a dead node's locks are only
// released after its recovery, which is why recovery itself cannot) and
// then frees the slot.
//
// The table's blocks are covered by the slot's orphan lock. This node
// takes its own slot's lock in each commit that changes its table, last
// (its id is above every inode and group lock): the table's local mutex
// keeps one such commit at a time, since two commits staging the same
// block would produce the same version.

// slotLockBase + slot is the lock of a log slot's orphan table.
const slotLockBase = 1 << 39

func slotLock(slot int) uint64 { return slotLockBase + uint64(slot) }

// orphanTable tracks the entries of this node's own table.
type orphanTable struct {
	mu     sync.Mutex // held from staging a change to its install
	pos    map[uint64]int
	used   []bool
	hint   int // no free entry below
	warned bool
}

func (o *orphanTable) init(used []layout.Orphan) {
	o.pos = map[uint64]int{}
	o.used = make([]bool, layout.OrphansMax)
	for _, e := range used {
		o.used[e.N] = true
		o.pos[e.Ino] = e.N
	}
}

// take returns a free entry and marks it used.
func (o *orphanTable) take() (int, bool) {
	for n := o.hint; n < len(o.used); n++ {
		if !o.used[n] {
			o.used[n], o.hint = true, n+1
			return n, true
		}
	}
	return 0, false
}

func (o *orphanTable) put(n int) {
	o.used[n] = false
	o.hint = min(o.hint, n)
}

// Len reports how many orphans this node's table lists.
func (o *orphanTable) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.pos)
}

// putOrphan stages entry n of slot's table as (ino, gen); ino 0 clears it.
func (t *tx) putOrphan(slot, n int, ino, gen uint64) error {
	addr, off := layout.OrphanPos(slot, n)
	b, err := t.write(addr, slotLock(slot))
	if err != nil {
		return err
	}
	layout.PutOrphan(b, slot, n/layout.OrphansPerBlock, off, ino, gen)
	return nil
}

// orphanChange is a change a transaction makes to this node's table.
type orphanChange struct {
	ino, gen uint64
	add      bool // list ino; otherwise clear its entry
}

// orphanAdd lists ino (generation gen) in this node's table when t commits.
func (t *tx) orphanAdd(ino, gen uint64) {
	t.orphans = append(t.orphans, orphanChange{ino: ino, gen: gen, add: true})
}

// orphanDel clears ino's entry in this node's table when t commits.
func (t *tx) orphanDel(ino uint64) { t.orphans = append(t.orphans, orphanChange{ino: ino}) }

// stageOrphans stages t's changes to this node's table, under the table's
// cluster lock and mutex; done(committed) installs or forgets them and
// lets both go.
func (fs *FS) stageOrphans(t *tx) (done func(committed bool), err error) {
	id := slotLock(fs.slot)
	if err := fs.cfg.Locker.Acquire(t.ctx, fs.cfg.Table, id, lock.Write); err != nil {
		return nil, fs.lockError(id, err)
	}
	o := &fs.orph
	o.mu.Lock()
	type change struct {
		ino uint64
		n   int
		add bool
	}
	var changes []change
	undo := func() {
		for _, c := range changes {
			if c.add {
				o.put(c.n)
			}
		}
		o.mu.Unlock()
		fs.cfg.Locker.Unpin(fs.cfg.Table, id, lock.Write)
	}
	for _, e := range t.orphans {
		c := change{ino: e.ino, add: e.add}
		var ok bool
		if c.add {
			if c.n, ok = o.take(); !ok {
				if !o.warned {
					o.warned = true
					fs.log.Warn("orphan table full: files unlinked while open leak if this node crashes (fsck frees them)", "entries", layout.OrphansMax)
				}
				continue
			}
		} else if c.n, ok = o.pos[e.ino]; !ok {
			continue
		}
		changes = append(changes, c)
		ino, gen := uint64(0), uint64(0)
		if c.add {
			ino, gen = e.ino, e.gen
		}
		if err := t.putOrphan(fs.slot, c.n, ino, gen); err != nil {
			undo()
			return nil, err
		}
	}
	return func(committed bool) {
		if !committed {
			undo()
			return
		}
		for _, c := range changes {
			if c.add {
				o.pos[c.ino] = c.n
			} else {
				delete(o.pos, c.ino)
				o.put(c.n)
			}
		}
		o.mu.Unlock()
		fs.cfg.Locker.Unpin(fs.cfg.Table, id, lock.Write)
	}, nil
}

// readOrphanTable returns the entries of slot's table, under its lock.
func (fs *FS) readOrphanTable(ctx context.Context, slot int) ([]layout.Orphan, error) {
	h, err := fs.acquire(ctx, w(slotLock(slot)))
	if err != nil {
		return nil, err
	}
	defer h.release()
	per := make([][]layout.Orphan, layout.OrphanBlocks)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for k := range layout.OrphanBlocks {
		g.Go(func() error {
			b, err := fs.load(gctx, layout.OrphanAddr(slot, k), slotLock(slot))
			if err != nil {
				return err
			}
			per[k], err = layout.DecodeOrphans(b, slot, k)
			if err != nil {
				return fmt.Errorf("%w: %v", ErrIO, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var out []layout.Orphan
	for _, es := range per {
		out = append(out, es...)
	}
	return out, nil
}

// freeListed frees the orphans es of slot's table that are still orphans
// (same generation, no link) and clears their entries, several per
// transaction (freer.go); it returns those it could not handle. No commit
// of this node may change slot's table meanwhile: slot is a dead node's,
// or this node's own before it mounts.
func (fs *FS) freeListed(ctx context.Context, slot int, es []layout.Orphan) (left []layout.Orphan, freed int) {
	for len(es) > 0 {
		// A batch holds distinct inodes: a table lists an inode once.
		n, seen := 0, map[uint64]bool{}
		for n < len(es) && n < freeBatchMax && !seen[es[n].Ino] {
			seen[es[n].Ino] = true
			n++
		}
		batch := es[:n]
		es = es[n:]
		us := make([]orphanRef, len(batch))
		for i, e := range batch {
			us[i] = orphanRef{e.Ino, e.Gen}
		}
		out := fs.freeOrphanBatch(ctx, us, []want{w(slotLock(slot))}, func(t *tx, i int) error {
			return t.putOrphan(slot, batch[i].N, 0, 0)
		})
		for i, o := range out {
			e := batch[i]
			switch {
			case errors.Is(o.err, errOpenElsewhere), errors.Is(o.err, errOpenHere):
				fs.log.Debug("an orphan of a log slot's table is still open", "slot", slot, "ino", e.Ino, "err", o.err)
			case o.err != nil:
				fs.log.Warn("could not free an orphan of a log slot's table", "slot", slot, "ino", e.Ino, "err", o.err)
			}
			if o.err != nil {
				left = append(left, e)
				continue
			}
			if o.freed {
				freed++
			}
		}
	}
	return left, freed
}

// loadOwnTable reads this node's table when it mounts. Entries left there
// (a slot freed without its orphans: fsck, or an older build) are freed.
func (fs *FS) loadOwnTable(ctx context.Context) error {
	es, err := fs.readOrphanTable(ctx, fs.slot)
	if err != nil {
		return fmt.Errorf("read the orphan table of log slot %d: %w", fs.slot, err)
	}
	left, freed := fs.freeListed(ctx, fs.slot, es)
	if len(es) > 0 {
		fs.log.Info("freed orphans left in this node's log slot", "slot", fs.slot, "freed", freed, "left", len(left))
	}
	fs.orph.init(left)
	for _, e := range left {
		fs.reapWhenClosed(e.Ino, e.Gen)
	}
	return nil
}

// KickJanitor asks the janitor to look for recovered slots now (a
// recovery just finished).
func (fs *FS) KickJanitor() {
	select {
	case fs.kick <- struct{}{}:
	default:
	}
}

// janitorInterval is how often a node looks for recovered slots without
// being asked.
const janitorInterval = 30 * time.Second

// janitorLoop frees the orphans of recovered slots: at mount, when a
// recovery ends, and now and then.
func (fs *FS) janitorLoop() {
	defer fs.flusher.Done()
	t := newTicker(janitorInterval)
	defer t.Stop()
	for {
		tctx, tcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		ctx, cancel := fs.untilStop(tctx)
		if fs.failed() == nil {
			if err := fs.cleanRecovered(ctx); err != nil && ctx.Err() == nil {
				fs.log.Warn("freeing the orphans of crashed nodes failed (retried later)", "err", err)
			}
		}
		cancel()
		tcancel()
		select {
		case <-fs.stop:
			return
		case <-t.C:
		case <-fs.kick:
		}
	}
}

// cleanRecovered frees the orphans of every recovered slot, then the slot.
func (fs *FS) cleanRecovered(ctx context.Context) error {
	fs.janitorMu.Lock()
	defer fs.janitorMu.Unlock()
	slots, _, err := fs.readSlots(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for i, s := range slots {
		if i == fs.slot || !s.Used || !s.Recovered {
			continue
		}
		if err := fs.cleanSlot(ctx, i, s); err != nil {
			errs = append(errs, fmt.Errorf("log slot %d of %s: %w", i, s.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (fs *FS) cleanSlot(ctx context.Context, i int, s layout.Slot) error {
	es, err := fs.readOrphanTable(ctx, i)
	if err != nil {
		return err
	}
	left, freed := fs.freeListed(ctx, i, es)
	if len(left) > 0 {
		return fmt.Errorf("%d of %d orphans not freed", len(left), len(es))
	}
	if err := fs.Sync(ctx); err != nil {
		return err
	}
	err = fs.rewriteSlot(ctx, i, func(cur layout.Slot) (layout.Slot, bool) {
		return layout.Slot{}, cur == s // or another node did it
	})
	if err != nil {
		return err
	}
	fs.log.Info("freed the orphans of a crashed node and its log slot", "node", s.Name, "session", s.Session, "slot", i, "orphans", len(es), "freed", freed)
	return nil
}

// orphanTableOf reads slot's table straight from the volume (recovery,
// which holds the dead node's locks and needs no mounted file system).
func orphanTableOf(ctx context.Context, dev Device, slot int) ([]layout.Orphan, error) {
	buf := make([]byte, layout.OrphanBlocks*layout.BlockBytes)
	if err := dev.ReadAt(ctx, buf, layout.OrphanAddr(slot, 0)); err != nil {
		return nil, fmt.Errorf("read the orphan table of log slot %d: %w", slot, err)
	}
	return layout.DecodeOrphanTable(buf, slot)
}
