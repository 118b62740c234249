package filesys

import (
	"context"
	"errors"
	"time"

	"github.com/plumeria-fs/plumeria/lock"
)

// Open locks (GFS2's iopen locks): a file open on any node keeps its inode
// until its last close on every node, as POSIX wants of a file unlinked
// while open. A node that has a file open holds the file's open lock in
// read mode, pinned from its first Open to its last Release (one pin per
// node: a second local open never waits for the lock service). A node
// that removes a file's last link frees the inode only if it is open
// nowhere: not here (opens), and not elsewhere, which it learns by getting
// the open lock in write mode within openLockWait. Otherwise the file
// becomes an orphan of this node (listed in its orphan table, so that a
// crash cannot leak it) and a reaper waits for the open lock in write mode
// holding nothing else: the lock service grants it when the last other
// node closes the file and unpins (or when that node's session ends and
// its log was replayed); the reaper then frees the inode.
//
// Lock order: Open takes the open lock before the inode lock; operations
// holding inode locks take the open lock only with tryAdd (bounded wait),
// so no cycle can form. A new inode's open lock is taken in write mode
// ahead of its creation (prefetch.go), so removing a file created and
// opened only here costs no lock-server round trip.

// iopenLockBase + inode number is an inode's open lock (above every other
// range: inode numbers stay below 1<<40).
const iopenLockBase = 1 << 42

func iopenLock(ino uint64) uint64 { return iopenLockBase + ino }

func isIopenLock(l uint64) bool { return l >= iopenLockBase && l < iopenLockBase<<1 }

// openLockWait bounds how long a removal waits for another node to give up
// a file's open lock (it gives it up at once unless the file is open
// there) before leaving the file to the reaper. Short: a removal of a file
// open elsewhere should not wait, and leaving one to the reaper costs only
// one more transaction (the request stays queued; its grant is kept).
const openLockWait = 10 * time.Millisecond

// pinOpen counts one more local Open of ino and, for the first one, pins
// its open lock in read mode.
func (fs *FS) pinOpen(ctx context.Context, ino uint64) error {
	fs.mu.Lock()
	if fs.mu.pinned[ino] > 0 {
		fs.mu.pinned[ino]++
		fs.mu.Unlock()
		return nil
	}
	fs.mu.Unlock()
	if err := fs.cfg.Locker.Acquire(ctx, fs.cfg.Table, iopenLock(ino), lock.Read); err != nil {
		return fs.lockError(iopenLock(ino), err)
	}
	fs.mu.Lock()
	fs.mu.pinned[ino]++
	extra := fs.mu.pinned[ino] > 1 // another first Open pinned it meanwhile
	fs.mu.Unlock()
	if extra {
		fs.cfg.Locker.Unpin(fs.cfg.Table, iopenLock(ino), lock.Read)
	}
	return nil
}

// unpinOpen ends one pinOpen; the last one unpins the open lock.
func (fs *FS) unpinOpen(ino uint64) {
	fs.mu.Lock()
	if _, ok := fs.mu.pinned[ino]; !ok {
		fs.mu.Unlock() // unpinned at unmount already
		return
	}
	fs.mu.pinned[ino]--
	last := fs.mu.pinned[ino] <= 0
	if last {
		delete(fs.mu.pinned, ino)
	}
	fs.mu.Unlock()
	if last {
		fs.cfg.Locker.Unpin(fs.cfg.Table, iopenLock(ino), lock.Read)
	}
}

// unpinAllOpens unpins the open locks of every file open here (unmount).
func (fs *FS) unpinAllOpens() {
	fs.mu.Lock()
	pinned := fs.mu.pinned
	fs.mu.pinned = map[uint64]int{}
	fs.mu.Unlock()
	for ino := range pinned {
		fs.cfg.Locker.Unpin(fs.cfg.Table, iopenLock(ino), lock.Read)
	}
}

// openElsewhere reports whether another node may have ino open: h (the
// removal's locks) could not add its open lock in write mode in time. An
// error counts as open: the file is then left to the reaper, never freed
// under a reader.
func (fs *FS) openElsewhere(ctx context.Context, h *held, ino uint64) bool {
	ok, err := h.tryAdd(ctx, iopenLock(ino), openLockWait)
	if err != nil {
		fs.log.Warn("could not learn whether another node has a removed file open; it is freed later", "ino", ino, "err", err)
	}
	return !ok
}

// errOpenElsewhere: an orphan could not be freed, another node may have
// it open.
var errOpenElsewhere = errors.New("open on another node")

// reapWhenClosed frees orphan ino (generation gen, listed in this node's
// table) once no other node has it open. One reaper per inode; it ends
// when the file is freed, or is no orphan any more, or at unmount (the
// table keeps the entry: the slot is then left for another node's
// janitor).
func (fs *FS) reapWhenClosed(ino, gen uint64) {
	select {
	case <-fs.stop:
		return // unmounting: the entry stays, the slot is left for another node's janitor
	default:
	}
	fs.mu.Lock()
	if fs.mu.reaping[ino] {
		fs.mu.Unlock()
		return
	}
	fs.mu.reaping[ino] = true
	fs.mu.Unlock()
	fs.stats.orphansWaiting.Inc()
	fs.flusher.Add(1)
	go func() {
		defer fs.flusher.Done()
		defer func() {
			fs.mu.Lock()
			delete(fs.mu.reaping, ino)
			fs.mu.Unlock()
			fs.stats.orphansWaiting.Dec()
		}()
		ctx, cancel := fs.untilStop(context.Background())
		defer cancel()
		for backoff := 100 * time.Millisecond; ctx.Err() == nil; {
			// Wait for the open lock holding nothing else; then free
			// under the usual locks, which take it again from the cache
			// unless another node asked for it meanwhile.
			if err := fs.cfg.Locker.Acquire(ctx, fs.cfg.Table, iopenLock(ino), lock.Write); err != nil {
				if ctx.Err() == nil {
					fs.log.Warn("orphan reaper: waiting for the open lock failed; the janitor frees the file later", "ino", ino, "err", err)
				}
				return
			}
			fs.cfg.Locker.Unpin(fs.cfg.Table, iopenLock(ino), lock.Write)
			_, err := fs.freeIfOrphan(ctx, ino, gen, nil, func(t *tx) error {
				t.orphanDel(ino)
				return nil
			})
			switch {
			case err == nil:
				return
			case errors.Is(err, errOpenHere):
				return // this node's last Release frees it
			case errors.Is(err, errOpenElsewhere):
				continue
			}
			if fs.failed() != nil {
				return
			}
			fs.log.Warn("orphan reaper: freeing failed; trying again", "ino", ino, "err", err)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
			}
			backoff = min(2*backoff, 10*time.Second)
		}
	}()
}

// errOpenHere: an orphan could not be freed, this node has it open; its
// last Release frees it.
var errOpenHere = errors.New("open on this node")
