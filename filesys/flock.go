package filesys

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/plumeria-fs/plumeria/lock"
)

// File locks (flock and POSIX record locks) are kept per node in a table,
// and made exclusive across nodes with one cluster lock per inode and
// kind: a node holds it in write mode while any of its owners holds a
// write lock on the file, in read mode while only read locks are held. A
// revoke is refused while local owners hold conflicting locks, so another
// node waits until they unlock.
type fileLocks struct {
	mu    sync.Mutex
	files map[uint64][]heldLock // by cluster lock id
	wake  chan struct{}         // closed and replaced on every unlock
}

type heldLock struct {
	owner      uint64
	typ        int16
	start, end uint64
	pid        uint32
}

func newFileLocks() *fileLocks {
	return &fileLocks{files: map[uint64][]heldLock{}, wake: make(chan struct{})}
}

// conflict returns a lock of another owner that conflicts with lk.
func conflict(ls []heldLock, owner uint64, lk FileLock) (heldLock, bool) {
	for _, h := range ls {
		if h.owner != owner && h.start <= lk.End && lk.Start <= h.end && (h.typ == syscall.F_WRLCK || lk.Type == syscall.F_WRLCK) {
			return h, true
		}
	}
	return heldLock{}, false
}

// strongest is the cluster mode the node needs for the locks it holds.
func strongest(ls []heldLock) lock.Mode {
	m := lock.None
	for _, h := range ls {
		if h.typ == syscall.F_WRLCK {
			return lock.Write
		}
		m = lock.Read
	}
	return m
}

// without removes owner's locks over [start, end], splitting ranges.
func without(ls []heldLock, owner uint64, start, end uint64) []heldLock {
	var out []heldLock
	for _, h := range ls {
		if h.owner != owner || h.end < start || end < h.start {
			out = append(out, h)
			continue
		}
		if h.start < start {
			out = append(out, heldLock{h.owner, h.typ, h.start, start - 1, h.pid})
		}
		if end < h.end {
			out = append(out, heldLock{h.owner, h.typ, end + 1, h.end, h.pid})
		}
	}
	return out
}

// revoke waits until this node's owners no longer hold file lock id above
// mode to (another node wants it), then lets the clerk give it up. New
// local requests wait for the revoke to end (the clerk queues them), so
// the lock passes between nodes in turn.
func (fl *fileLocks) revoke(ctx context.Context, id uint64, to lock.Mode) error {
	for {
		fl.mu.Lock()
		busy := strongest(fl.files[id]) > to
		wake := fl.wake
		fl.mu.Unlock()
		if !busy {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return fmt.Errorf("file lock %d still in use here: %w", id, ctx.Err())
		}
	}
}

func fileLockID(ino uint64, flock bool) uint64 {
	if flock {
		return flockLockBase + ino
	}
	return posixLockBase + ino
}

// clusterWaitMax bounds how long a non-blocking lock waits for another
// node to give the file lock up before it reports a conflict.
const clusterWaitMax = 2 * time.Second

// Setlk takes, changes or (F_UNLCK) drops owner's lock on ino; flock
// locks cover the whole file. With wait it blocks until granted.
func (fs *FS) Setlk(ctx context.Context, ino uint64, owner uint64, lk FileLock, flock, wait bool) error {
	fl := fs.flocks
	id := fileLockID(ino, flock)
	if flock {
		lk.Start, lk.End = 0, ^uint64(0)
	}
	if lk.End < lk.Start {
		return fmt.Errorf("%w: lock range %d-%d", ErrInvalid, lk.Start, lk.End)
	}
	if lk.Type == syscall.F_UNLCK {
		fl.mu.Lock()
		fl.files[id] = without(fl.files[id], owner, lk.Start, lk.End)
		if len(fl.files[id]) == 0 {
			delete(fl.files, id)
		}
		close(fl.wake)
		fl.wake = make(chan struct{})
		fl.mu.Unlock()
		return nil
	}
	if lk.Type != syscall.F_RDLCK && lk.Type != syscall.F_WRLCK {
		return fmt.Errorf("%w: lock type %d", ErrInvalid, lk.Type)
	}
	mode := lock.Read
	if lk.Type == syscall.F_WRLCK {
		mode = lock.Write
	}
	for {
		fl.mu.Lock()
		_, busy := conflict(fl.files[id], owner, lk)
		wake := fl.wake
		fl.mu.Unlock()
		if busy {
			if !wait {
				return fmt.Errorf("%w: file %d is locked", ErrWouldBlock, ino)
			}
			select {
			case <-wake:
				continue
			case <-ctx.Done():
				return fmt.Errorf("%w: waiting for a file lock", ErrInterrupted)
			}
		}
		// The node must hold the cluster lock before the local table
		// records the lock, so that a revoke sees it.
		actx, cancel := ctx, context.CancelFunc(func() {})
		if !wait {
			actx, cancel = context.WithTimeout(ctx, clusterWaitMax)
		}
		err := fs.cfg.Locker.Acquire(actx, fs.cfg.Table, id, mode)
		cancel()
		if err != nil {
			if !wait && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				return fmt.Errorf("%w: file %d is locked on another node", ErrWouldBlock, ino)
			}
			return fs.lockError(id, err)
		}
		fl.mu.Lock()
		if _, busy := conflict(fl.files[id], owner, lk); busy {
			fl.mu.Unlock()
			fs.cfg.Locker.Unpin(fs.cfg.Table, id, mode)
			continue
		}
		ls := without(fl.files[id], owner, lk.Start, lk.End)
		fl.files[id] = append(ls, heldLock{owner, lk.Type, lk.Start, lk.End, lk.Pid})
		fl.mu.Unlock()
		// The table now keeps the cluster lock (revoke refuses); the pin
		// is not needed any more.
		fs.cfg.Locker.Unpin(fs.cfg.Table, id, mode)
		return nil
	}
}

// Getlk reports a lock that would conflict with lk, or lk with type
// F_UNLCK if none would.
func (fs *FS) Getlk(ctx context.Context, ino uint64, owner uint64, lk FileLock) (FileLock, error) {
	fl := fs.flocks
	id := fileLockID(ino, false)
	fl.mu.Lock()
	h, busy := conflict(fl.files[id], owner, lk)
	fl.mu.Unlock()
	if busy {
		return FileLock{Type: h.typ, Start: h.start, End: h.end, Pid: h.pid}, nil
	}
	mode := lock.Read
	if lk.Type == syscall.F_WRLCK {
		mode = lock.Write
	}
	actx, cancel := context.WithTimeout(ctx, clusterWaitMax)
	defer cancel()
	if err := fs.cfg.Locker.Acquire(actx, fs.cfg.Table, id, mode); err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			// Held on another node: its owners' ranges are not known here.
			return FileLock{Type: syscall.F_WRLCK, Start: 0, End: ^uint64(0)}, nil
		}
		return FileLock{}, fs.lockError(id, err)
	}
	fs.cfg.Locker.Unpin(fs.cfg.Table, id, mode)
	return FileLock{Type: syscall.F_UNLCK}, nil
}

// ReleaseOwner drops every lock owner holds on ino (close of a file).
func (fs *FS) ReleaseOwner(ino uint64, owner uint64) {
	for _, flock := range []bool{false, true} {
		_ = fs.Setlk(context.Background(), ino, owner, FileLock{Type: syscall.F_UNLCK, End: ^uint64(0)}, flock, false)
	}
}
