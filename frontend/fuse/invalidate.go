package fuse

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// invalidator tells the kernel to drop what it cached about inodes that
// another node is about to change. The file system calls add when a lock
// leaves this node (before it leaves), so add must have dropped, before it
// returns, everything the kernel could otherwise answer without asking:
//
//   - Attributes: an attribute-only NOTIFY_INVAL_INODE (offset < 0) takes
//     no lock in the kernel that a FUSE request may hold, so it is sent at
//     once. It bumps the inode's attribute version, so a reply computed
//     before and delivered after it is ignored (the kernel samples the
//     version before it sends GETATTR or LOOKUP). That leaves replies that
//     name an inode the kernel does not know yet (a LOOKUP, CREATE... in
//     flight): the notification finds nothing (ENOENT), and the reply
//     would install its attributes in a new inode with no version to
//     compare. Two cases: (1) the reply is still being made (its request
//     began before, and its inode is not counted in kernelRefs yet): the
//     invalidation is recorded (recent), and the reply goes out with an
//     attribute timeout of 0 (entryDone); (2) the reply is counted and on
//     its way to the kernel: the inode is remembered as lost, the dentry
//     epoch is bumped, so every path walk looks the name up again, and the
//     first request the kernel sends for a lost inode (OPEN, READ, ...)
//     re-sends the notification first (refresh), so an fstat on a
//     descriptor opened through the stale reply asks too.
//   - Names (positive and negative dentries): invalidating one name takes
//     the directory's i_rwsem, which a request waiting for this very lock
//     may hold; instead the dentry epoch is bumped (epoch.go), which takes
//     no lock. Only when a directory whose names the kernel may cache
//     since the last bump loses its lock (namesCached), so a node working
//     alone keeps its whole dentry cache.
//   - Pages of files: NOTIFY_INVAL_INODE of a range waits for locked
//     pages, and a READ or WRITE holding them may wait for the lock being
//     revoked: they are dropped from a goroutine of the invalidator's own
//     and never waited for. Meanwhile the attribute invalidation above
//     covers them: the kernel asks for the attributes before its next read
//     (FUSE_AUTO_INVAL_DATA) and drops every page of a file whose size or
//     mtime changed. An open keeps the file's pages (FOPEN_KEEP_CACHE) only
//     when no page invalidation of it is queued or running (opened): pages
//     the kernel holds then were all read after the last time the lock
//     left, so even a change the mtime does not show (a same-size write
//     whose mtime was set back) is seen by the next open.
//   - Pages of directories (the kernel's cached listing, FOPEN_CACHE_DIR):
//     no request holds a directory's page locked while it waits for
//     FileSystem (the kernel fills the cache after each READDIR reply), so
//     a directory this mount let the kernel list into its cache (listed)
//     has its pages dropped together with its attributes, at once. A
//     READDIR reply in flight across that cannot leave a stale listing
//     either: the kernel checks the directory's mtime (asked again, since
//     the attributes were dropped) against the listing's at the next
//     opendir, and a listing missing its first page is read again.
//
// Pending page work is deduplicated, so it is bounded by the number of
// distinct inodes and names.
type invalidator struct {
	srv  *fuse.Server
	log  *slog.Logger
	ep   *epochs
	refs *kernelRefs
	wake chan struct{} // capacity 1: "pending is not empty"
	done chan struct{} // closed when run returns

	mu      sync.Mutex
	pending map[invalidation]struct{}
	order   []invalidation // pending in arrival order
	stopped bool
	// dirs whose names (positive or negative) the kernel may cache under
	// the current epoch: added before the request that returns them is
	// served, cleared by each bump.
	named map[uint64]struct{}
	// lost: inodes whose attribute invalidation found no kernel inode
	// while a reply naming them was on its way (see the type's comment);
	// refreshed by the next request for them. nlost is len(lost), read
	// without mu.
	lost  map[uint64]struct{}
	nlost atomic.Int64
	// entries counts the requests that may return an entry, from before
	// they are served until their inode is counted (entryStart,
	// entryDone); recent holds the invalidations that found no kernel
	// inode meanwhile, by inode, with their seq (cleared when entries is
	// 0).
	entries int
	seq     uint64
	recent  map[uint64]uint64
	// queued counts, by inode, the page invalidations queued or running
	// (keep); listed holds the directories whose listing the kernel may
	// cache (dropped with the attributes, see the type's comment), until
	// the kernel forgets them.
	queued map[uint64]int
	listed map[uint64]struct{}
}

type invalidation struct {
	ino  uint64
	name string // "" for the inode's pages and attributes
}

func (v *invalidator) start(srv *fuse.Server, log *slog.Logger, ep *epochs, refs *kernelRefs) {
	v.srv, v.log, v.ep, v.refs = srv, log, ep, refs
	v.named = make(map[uint64]struct{})
	v.lost = make(map[uint64]struct{})
	v.recent = make(map[uint64]uint64)
	v.wake = make(chan struct{}, 1)
	v.done = make(chan struct{})
	v.pending = make(map[invalidation]struct{})
	v.queued = make(map[uint64]int)
	v.listed = make(map[uint64]struct{})
	go v.run()
}

// add drops what the kernel caches under ino's lock: its attributes and
// (if the kernel may cache names in it) the names of directory ino at
// once, its pages in the background (a listed directory's at once); with
// name set, also that entry of directory ino (dir is informative: both
// cases are handled the same way). ino 0 means everything (the file
// system stopped).
func (v *invalidator) add(ino uint64, dir bool, name string) {
	v.mu.Lock()
	stopped := v.stopped
	_, listed := v.listed[ino]
	v.mu.Unlock()
	if stopped {
		return
	}
	if ino == 0 {
		v.all()
		return
	}
	bump := name != ""
	off := int64(-1) // attributes only
	if listed {
		off = 0 // attributes and the cached listing (every page)
	}
	if st := v.srv.InodeNotify(ino, off, 0); st == fuse.ENOENT {
		v.mu.Lock()
		switch {
		case v.refs.known(ino): // case (2): a counted reply is on its way
			if _, ok := v.lost[ino]; !ok {
				v.lost[ino] = struct{}{}
				v.nlost.Add(1)
			}
			bump = true
		case v.entries > 0: // case (1): a reply may be being made
			v.seq++
			v.recent[ino] = v.seq
		}
		v.mu.Unlock()
	} else if !st.Ok() {
		v.log.Warn("fuse: invalidate attributes", "ino", ino, "status", st)
	}
	v.mu.Lock()
	if _, ok := v.named[ino]; ok {
		bump = true
	}
	v.mu.Unlock()
	if bump {
		v.bump()
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.stopped {
		return
	}
	if !listed {
		v.queue(invalidation{ino: ino})
	}
	if name != "" {
		v.queue(invalidation{ino: ino, name: name})
	}
	select {
	case v.wake <- struct{}{}:
	default:
	}
}

// bump makes every name the kernel caches stale (epoch.go).
func (v *invalidator) bump() {
	v.mu.Lock()
	clear(v.named)
	v.mu.Unlock()
	if err := v.ep.inc(); err != nil {
		v.log.Warn("fuse: dentry epoch", "err", err)
	}
}

// entryStart notes that the kernel may cache names of directory dir from
// now on, and that a reply that may name an inode is being made. Called
// before the request reads the directory, so that a revoke meanwhile
// bumps the epoch. It returns the point entryDone compares with.
func (v *invalidator) entryStart(dir uint64) uint64 {
	named := v.ep.ok() // without epochs names are not cached
	v.mu.Lock()
	defer v.mu.Unlock()
	if named {
		v.named[dir] = struct{}{}
	}
	v.entries++
	return v.seq
}

// entryDone ends an entryStart (since: what it returned), just before the
// reply out (nil: none) is written: its inode is counted in kernelRefs and,
// if an invalidation of it found no kernel inode since, the reply tells
// the kernel not to keep the attributes it carries (they may be older).
// Both under mu, so that an invalidation sees either the count or the
// reply not yet checked.
func (v *invalidator) entryDone(since uint64, out *fuse.EntryOut, fsys FileSystem) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if out != nil && out.NodeId != 0 {
		if out.Attr.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			delete(v.listed, out.NodeId) // see opened: a number reused
		}
		v.refs.looked(fsys, out.NodeId)
		if seq, ok := v.recent[out.NodeId]; ok && seq > since {
			out.SetAttrTimeout(0)
		}
	}
	if v.entries--; v.entries == 0 {
		clear(v.recent)
	}
}

// refresh re-sends the attribute invalidation of a lost inode (see the
// type's comment); the kernel knows the inode now, since it sent a request
// for it. Cheap when nothing is lost.
func (v *invalidator) refresh(ino uint64) {
	if v.nlost.Load() == 0 {
		return
	}
	v.mu.Lock()
	_, ok := v.lost[ino]
	if ok {
		delete(v.lost, ino)
		v.nlost.Add(-1)
	}
	v.mu.Unlock()
	if ok {
		v.srv.InodeNotify(ino, -1, 0)
	}
}

// forgotten: the kernel dropped ino; nothing of it is cached any more.
func (v *invalidator) forgotten(ino uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.listed, ino)
	if _, ok := v.lost[ino]; ok {
		delete(v.lost, ino)
		v.nlost.Add(-1)
	}
}

// opened notes an open or create of file ino, and reports whether the
// open may keep the pages the kernel caches for it (FOPEN_KEEP_CACHE): no
// page invalidation of ino is queued or running, so every page cached was
// read since its lock last left. ino is no directory of ours now: if its
// number was a listed directory's (freed, then reused while the kernel
// still held the old inode), it must no longer get the synchronous drop of
// every page, which could wait for a READ or WRITE of the file.
func (v *invalidator) opened(ino uint64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.listed, ino)
	return v.queued[ino] == 0
}

// listing notes that the kernel may cache directory ino's listing from now
// on (FOPEN_CACHE_DIR): called before the opendir's reply, so before any
// READDIR of it, and kept until the kernel forgets ino.
func (v *invalidator) listing(ino uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.listed[ino] = struct{}{}
}

// all drops every name and the attributes of every inode the kernel
// knows: the file system stopped and can vouch for nothing it returned.
func (v *invalidator) all() {
	v.bump()
	for _, ino := range v.refs.inodes() {
		v.srv.InodeNotify(ino, -1, 0)
	}
}

func (v *invalidator) queue(i invalidation) {
	if _, ok := v.pending[i]; ok {
		return
	}
	v.pending[i] = struct{}{}
	v.order = append(v.order, i)
	if i.name == "" {
		v.queued[i.ino]++
	}
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
				if i.name == "" {
					v.mu.Lock()
					if v.queued[i.ino]--; v.queued[i.ino] <= 0 {
						delete(v.queued, i.ino)
					}
					v.mu.Unlock()
				}
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
	// ENOENT: the kernel holds nothing for it, which is fine; EBADF,
	// ENODEV: the mount is gone, and every cache with it.
	if !st.Ok() && st != fuse.ENOENT && st != fuse.EBADF && st != fuse.Status(syscall.ENODEV) {
		v.log.Warn("fuse: invalidate", "ino", i.ino, "name", i.name, "status", st)
	}
}
