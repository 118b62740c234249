package clerk

import (
	"context"
	"time"

	"github.com/plumeria-fs/plumeria/lock"
)

type waitKey struct {
	table string
	lock  uint64
}

// waiter is one Acquire call waiting for a lock.
type waiter struct {
	mode   lock.Mode
	done   chan struct{} // closed when something changed for the lock
	err    error         // set before done closes, if the wait failed
	pinned bool          // set before done closes: a grant was pinned for this call
}

// pinCount counts the uses of one lock, by mode.
type pinCount struct{ read, write int }

// above reports whether some use needs more than mode to.
func (p pinCount) above(to lock.Mode) bool {
	switch {
	case to == lock.None:
		return p.read+p.write > 0
	case to == lock.Read:
		return p.write > 0
	}
	return false
}

// Acquire returns once the clerk holds lock in table in mode (Write covers
// Read) under a valid lease, and pins it in mode: the lock is not revoked
// below mode until Unpin. If the clerk already holds it, Acquire returns at
// once (a cached re-acquire). Otherwise it asks the lock server and waits.
// If ctx ends first, Acquire returns ctx.Err() with nothing pinned; the
// request stays outstanding and a later grant is kept like any other.
// Acquire needs Run.
// Errors: ErrLeaseLost, ErrRejected, lock.ErrNotOpen, lock.ErrBadMode,
// lock.ErrReservedLock, lock.ErrLimit, ctx.Err().
func (c *Clerk) Acquire(ctx context.Context, table string, l uint64, mode lock.Mode) error {
	key := waitKey{table, l}
	var start time.Time // of the first wait; zero for a cached re-acquire
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if c.mu.core.Lost() {
			return ErrLeaseLost
		}
		if to, ok := c.mu.flushing[key]; ok && mode > to {
			// Being revoked below mode: wait until the revoke is over,
			// then ask again.
		} else {
			held, err := c.mu.core.Acquire(table, l, mode)
			if err != nil {
				return err
			}
			if held {
				c.pinLocked(key, mode)
				c.stats.observeWait(start)
				return nil
			}
			c.drainLocked() // the request, if one was made
		}
		if start.IsZero() {
			start = time.Now()
		}
		w := &waiter{mode: mode, done: make(chan struct{})}
		c.mu.waits[key] = append(c.mu.waits[key], w)
		c.mu.Unlock()
		select {
		case <-w.done:
		case <-ctx.Done():
		}
		c.mu.Lock()
		if w.pinned {
			err := c.awaitLease(ctx, key, mode)
			if err == nil {
				c.stats.observeWait(start)
			}
			return err
		}
		if w.err != nil {
			return w.err
		}
		if err := ctx.Err(); err != nil {
			c.dropWaiterLocked(key, w)
			return err
		}
	}
}

// awaitLease returns once the lock the grant pinned for an Acquire call is
// usable: the lease of its group may need a renewal acknowledged first.
// On failure the pin is undone.
func (c *Clerk) awaitLease(ctx context.Context, key waitKey, mode lock.Mode) error {
	for {
		held, err := c.mu.core.Acquire(key.table, key.lock, mode)
		if held {
			return nil
		}
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			c.unpinLocked(key, mode)
			c.drainLocked()
			return err
		}
		c.drainLocked()
		changed := c.mu.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
		}
		c.mu.Lock()
	}
}

// Unpin ends one use of lock in mode begun by a successful Acquire.
func (c *Clerk) Unpin(table string, l uint64, mode lock.Mode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unpinLocked(waitKey{table, l}, mode)
	c.drainLocked()
}

// Release gives up lock at once; the owner must have flushed it. A pinned
// lock is not released.
func (c *Clerk) Release(table string, l uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, pinned := c.mu.pins[waitKey{table, l}]; pinned {
		return
	}
	c.mu.core.Release(table, l)
	c.drainLocked()
}

// Downgrade lowers lock from Write to Read at once, keeping it cached for
// reading; the owner must have written back what it dirtied under it.
// Nothing happens unless the clerk holds lock in Write, nor while a use
// pins it in Write. Read pins are kept.
func (c *Clerk) Downgrade(table string, l uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.pins[waitKey{table, l}].write > 0 {
		return
	}
	c.mu.core.Downgrade(table, l)
	c.drainLocked()
}

// Holds returns the mode in which the clerk holds lock now: None unless it
// holds it under a valid lease. A running recovery holds the dead clerk's
// log lock in Write mode. A pinned lock is held at least in its pinned
// mode until the session is lost.
func (c *Clerk) Holds(table string, l uint64) lock.Mode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.core.Holds(table, l)
}

// LeaseLeft reports how long the clerk may still believe in every lock it
// holds (lock.Clerk.LeaseLeft), less one tick: ticks advance in steps.
func (c *Clerk) LeaseLeft() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(time.Duration(c.mu.core.LeaseLeft()-1)*c.cfg.Tick, 0)
}

func (c *Clerk) pinLocked(key waitKey, mode lock.Mode) {
	p := c.mu.pins[key]
	if mode == lock.Write {
		p.write++
	} else {
		p.read++
	}
	c.mu.pins[key] = p
}

func (c *Clerk) unpinLocked(key waitKey, mode lock.Mode) {
	p, ok := c.mu.pins[key]
	switch {
	case !ok:
		return // unbalanced, or the table was closed meanwhile
	case mode == lock.Write && p.write > 0:
		p.write--
	case mode != lock.Write && p.read > 0:
		p.read--
	}
	if p.read+p.write == 0 {
		delete(c.mu.pins, key)
	} else {
		c.mu.pins[key] = p
	}
	if f, ok := c.mu.deferred[key]; ok && !p.above(f.To) {
		delete(c.mu.deferred, key)
		c.startFlushLocked(f)
	}
}

// grantedLocked answers the Acquire calls waiting for a lock the clerk was
// just granted in mode: those it satisfies get it pinned before any revoke
// behind the grant can take it, so a contended lock is used once per
// grant. The others look again.
func (c *Clerk) grantedLocked(key waitKey, mode lock.Mode) {
	to, flushing := c.mu.flushing[key]
	for _, w := range c.mu.waits[key] {
		if w.mode <= mode && (!flushing || w.mode <= to) {
			c.pinLocked(key, w.mode)
			w.pinned = true
		}
		close(w.done)
	}
	delete(c.mu.waits, key)
	c.changedLocked()
}

// wakeLocked wakes the Acquire calls waiting for key, with err (nil: to
// look again).
func (c *Clerk) wakeLocked(key waitKey, err error) {
	for _, w := range c.mu.waits[key] {
		w.err = err
		close(w.done)
	}
	delete(c.mu.waits, key)
}

// failWaitsLocked wakes the waits selected by match with err.
func (c *Clerk) failWaitsLocked(match func(waitKey) bool, err error) {
	var keys []waitKey
	for k := range c.mu.waits {
		if match(k) {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		c.wakeLocked(k, err)
	}
}

func (c *Clerk) dropWaiterLocked(key waitKey, w *waiter) {
	ws := c.mu.waits[key]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(c.mu.waits, key)
	} else {
		c.mu.waits[key] = ws
	}
}

func (c *Clerk) changedLocked() {
	close(c.mu.changed)
	c.mu.changed = make(chan struct{})
}

// flushLocked handles a Flush event: from now on nothing more than f.To is
// pinned; once the pins above it end, the owner flushes.
func (c *Clerk) flushLocked(f lock.Flush) {
	key := waitKey{f.Table, f.Lock}
	c.mu.flushing[key] = f.To
	if c.mu.pins[key].above(f.To) {
		c.mu.deferred[key] = f
		return
	}
	c.startFlushLocked(f)
}

// startFlushLocked has the owner flush (OnRevoke on a callback goroutine),
// or finishes at once if there is no OnRevoke.
func (c *Clerk) startFlushLocked(f lock.Flush) {
	if c.cfg.OnRevoke == nil {
		c.flushedLocked(f)
		return
	}
	c.queueLocked(job{flush: &f})
}

// flushedLocked tells the core the owner flushed, and lets the Acquire
// calls that waited for the revoke look again.
func (c *Clerk) flushedLocked(f lock.Flush) {
	key := waitKey{f.Table, f.Lock}
	delete(c.mu.flushing, key) // before Flushed, which may start another flush
	c.mu.core.Flushed(f.Table, f.Lock, f.To)
	c.wakeLocked(key, nil)
}
