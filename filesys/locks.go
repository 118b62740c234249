package filesys

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/plumeria-fs/plumeria/lock"
)

// localLocks orders this node's own operations under one cluster lock: the
// clerk lets many local users share a lock it holds, so operations also
// take a local reader/writer lock per lock id, after the cluster lock.
type localLocks struct {
	mu sync.Mutex
	m  map[uint64]*localLock
}

type localLock struct {
	sync.RWMutex
	refs int
}

func newLocalLocks() *localLocks { return &localLocks{m: map[uint64]*localLock{}} }

func (ll *localLocks) get(id uint64) *localLock {
	ll.mu.Lock()
	defer ll.mu.Unlock()
	l := ll.m[id]
	if l == nil {
		l = &localLock{}
		ll.m[id] = l
	}
	l.refs++
	return l
}

func (ll *localLocks) put(id uint64) {
	ll.mu.Lock()
	defer ll.mu.Unlock()
	if l := ll.m[id]; l != nil {
		if l.refs--; l.refs == 0 {
			delete(ll.m, id)
		}
	}
}

// want is one lock an operation needs.
type want struct {
	id   uint64
	mode lock.Mode
}

func r(id uint64) want { return want{id, lock.Read} }
func w(id uint64) want { return want{id, lock.Write} }

// held is a set of locks an operation holds; release gives them back.
type held struct {
	fs       *FS
	locks    []want
	unlocked bool // unlockLocal was called: no more locks may be added
}

// acquire takes the cluster lock and then the local lock of each wanted
// lock, in increasing id order (no deadlocks); duplicates merge to the
// strongest mode.
func (fs *FS) acquire(ctx context.Context, ws ...want) (*held, error) {
	if err := fs.failed(); err != nil {
		return nil, err
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].id < ws[j].id })
	merged := ws[:0:0]
	for _, x := range ws {
		if n := len(merged); n > 0 && merged[n-1].id == x.id {
			merged[n-1].mode = max(merged[n-1].mode, x.mode)
			continue
		}
		merged = append(merged, x)
	}
	h := &held{fs: fs}
	for _, x := range merged {
		if err := h.add(ctx, x); err != nil {
			h.release()
			return nil, err
		}
	}
	return h, nil
}

// add takes one more lock. Callers outside acquire must know that taking
// it out of order cannot deadlock (see allocInode).
func (h *held) add(ctx context.Context, x want) error {
	if h.unlocked {
		panic("filesys: a lock added after unlockLocal")
	}
	fs := h.fs
	if err := fs.cfg.Locker.Acquire(ctx, fs.cfg.Table, x.id, x.mode); err != nil {
		return fs.lockError(x.id, err)
	}
	l := fs.locks.get(x.id)
	if x.mode == lock.Write {
		l.Lock()
	} else {
		l.RLock()
	}
	h.locks = append(h.locks, x)
	return nil
}

// tryAdd takes one more write lock out of order, giving up (false) rather
// than waiting longer than wait for the cluster lock or at all for the
// local one: waiting out of order could close a cycle.
func (h *held) tryAdd(ctx context.Context, id uint64, wait time.Duration) (bool, error) {
	fs := h.fs
	actx, cancel := context.WithTimeout(ctx, wait)
	err := fs.cfg.Locker.Acquire(actx, fs.cfg.Table, id, lock.Write)
	cancel()
	switch {
	case err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return false, nil
	case err != nil:
		return false, fs.lockError(id, err)
	}
	l := fs.locks.get(id)
	if !l.TryLock() {
		fs.locks.put(id)
		fs.cfg.Locker.Unpin(fs.cfg.Table, id, lock.Write)
		return false, nil
	}
	h.locks = append(h.locks, want{id: id, mode: lock.Write})
	return true, nil
}

func (h *held) release() {
	h.unlockLocal()
	for i := len(h.locks) - 1; i >= 0; i-- {
		x := h.locks[i]
		h.fs.cfg.Locker.Unpin(h.fs.cfg.Table, x.id, x.mode)
	}
	h.locks = nil
}

// unlockLocal gives up the local side of every lock h holds and keeps the
// cluster pins: the node keeps the locks in their modes (the clerk calls
// Revoke only once release unpins them), but other operations of this
// node may take them meanwhile. release then only unpins.
func (h *held) unlockLocal() {
	if h.unlocked {
		return
	}
	h.unlocked = true
	fs := h.fs
	for i := len(h.locks) - 1; i >= 0; i-- {
		x := h.locks[i]
		l := fs.locks.get(x.id)
		if x.mode == lock.Write {
			l.Unlock()
		} else {
			l.RUnlock()
		}
		fs.locks.put(x.id)
		fs.locks.put(x.id)
	}
}

func (fs *FS) lockError(id uint64, err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: waiting for lock %d: %v", ErrInterrupted, id, err)
	case errors.Is(err, lock.ErrLeaseLost):
		return fs.fail(fmt.Errorf("lock %d: %w", id, err))
	case errors.Is(err, ErrReadOnly):
		return err
	}
	return fmt.Errorf("%w: lock %d: %v", ErrIO, id, err)
}

// isFatal reports device errors after which this node must stop writing.
func isFatal(err error) bool { return errors.Is(err, ErrDeviceFenced) }

func newTicker(d time.Duration) *time.Ticker { return time.NewTicker(d) }
