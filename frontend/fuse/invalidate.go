package fuse

import (
	"log/slog"
	"sync"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// invalidator tells the kernel to drop what it cached about inodes that
// another node changed. It works from its own goroutine, and add never
// waits for the kernel: a NOTIFY_INVAL_ENTRY takes the directory's i_rwsem
// and a NOTIFY_INVAL_INODE waits for locked pages, and a FUSE request
// holding those may itself be waiting for the lock whose revocation is
// invalidating (a deadlock if add waited). Pending work is deduplicated,
// so it is bounded by the number of distinct inodes and names.
type invalidator struct {
	srv  *fuse.Server
	log  *slog.Logger
	wake chan struct{} // capacity 1: "pending is not empty"
	done chan struct{} // closed when run returns

	mu      sync.Mutex
	pending map[invalidation]struct{}
	order   []invalidation // pending in arrival order
	stopped bool
}

type invalidation struct {
	ino  uint64
	name string // "" for the inode's pages and attributes
}

func (v *invalidator) start(srv *fuse.Server, log *slog.Logger) {
	v.srv, v.log = srv, log
	v.wake = make(chan struct{}, 1)
	v.done = make(chan struct{})
	v.pending = make(map[invalidation]struct{})
	go v.run()
}

// add queues the invalidation of ino's pages and attributes and, if name
// is not empty, of the entry name in directory ino (dir is informative:
// both cases are handled the same way).
func (v *invalidator) add(ino uint64, dir bool, name string) {
	// Attributes at once: cached directory attributes (DirAttrTimeout)
	// must be gone before the lock leaves this node. An attribute-only
	// NOTIFY_INVAL_INODE (offset < 0) bumps the inode's attribute version
	// and takes no lock a FUSE request may hold, so it cannot deadlock; a
	// reply in flight that read the attributes before is then ignored.
	v.mu.Lock()
	stopped := v.stopped
	v.mu.Unlock()
	if stopped {
		return
	}
	if st := v.srv.InodeNotify(ino, -1, 0); !st.Ok() && st != fuse.ENOENT {
		v.log.Warn("fuse: invalidate attributes", "ino", ino, "status", st)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.stopped {
		return
	}
	v.queue(invalidation{ino: ino})
	if name != "" {
		v.queue(invalidation{ino: ino, name: name})
	}
	select {
	case v.wake <- struct{}{}:
	default:
	}
}

func (v *invalidator) queue(i invalidation) {
	if _, ok := v.pending[i]; ok {
		return
	}
	v.pending[i] = struct{}{}
	v.order = append(v.order, i)
}

// stop ends run after the work already queued; add does nothing after it.
func (v *invalidator) stop() {
	v.mu.Lock()
	if !v.stopped {
		v.stopped = true
		close(v.wake)
	}
	v.mu.Unlock()
	<-v.done
}

func (v *invalidator) run() {
	defer close(v.done)
	for range v.wake {
		for {
			v.mu.Lock()
			batch := v.order
			v.order = nil
			clear(v.pending)
			v.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			for _, i := range batch {
				v.notify(i)
			}
		}
	}
}

func (v *invalidator) notify(i invalidation) {
	var st fuse.Status
	if i.name == "" {
		st = v.srv.InodeNotify(i.ino, 0, 0) // offset 0, length 0: every page, and the attributes
	} else {
		st = v.srv.EntryNotify(i.ino, i.name)
	}
	// ENOENT: the kernel holds nothing for it, which is fine.
	if !st.Ok() && st != fuse.ENOENT {
		v.log.Warn("fuse: invalidate", "ino", i.ino, "name", i.name, "status", st)
	}
}
