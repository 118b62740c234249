package fuse

import (
	"context"
	"sync"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// kernelRefs mirrors the kernel's lookup count of each node (its
// nlookup): one per successful entry reply (LOOKUP, CREATE, MKDIR, MKNOD,
// SYMLINK, LINK), minus the counts FORGET gives back. While the kernel
// knows an inode the file system holds it (FileSystem.Hold), so an
// unlinked inode stays allocated until the kernel forgets it. Two things
// need that: node IDs are inode numbers, and a number reused for a new
// file while the kernel still knows the old one makes the kernel mark its
// inode bad (EIO for whoever uses it); and an open racing an unlink or a
// replacing rename must still find the file it looked up, as on a local
// file system. READDIRPLUS also returns entries; it is disabled (see
// Mount), so these six replies are all.
type kernelRefs struct {
	mu sync.Mutex
	n  map[uint64]uint64
}

func (k *kernelRefs) init() { k.n = make(map[uint64]uint64) }

// looked counts one entry reply for ino; the first one holds it.
func (k *kernelRefs) looked(fsys FileSystem, ino uint64) {
	k.mu.Lock()
	k.n[ino]++
	first := k.n[ino] == 1
	k.mu.Unlock()
	if first {
		fsys.Hold(ino)
	}
}

// known reports whether the kernel knows ino, or an entry reply for it is
// on its way to the kernel (counted before the reply is written).
func (k *kernelRefs) known(ino uint64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.n[ino] > 0
}

// inodes lists the inodes the kernel knows (the root is not counted).
func (k *kernelRefs) inodes() []uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]uint64, 0, len(k.n)+1)
	out = append(out, 1)
	for ino := range k.n {
		out = append(out, ino)
	}
	return out
}

// forget gives back nlookup counts of ino; the last one unholds it. That
// may free an unlinked file, which takes cluster locks, so it runs on its
// own goroutine: FORGET is served on go-fuse's read loop.
func (k *kernelRefs) forget(fsys FileSystem, ino, nlookup uint64) (gone bool) {
	k.mu.Lock()
	c, ok := k.n[ino]
	if !ok {
		k.mu.Unlock()
		return false // the root, or an entry from before a count was kept
	}
	if nlookup >= c {
		delete(k.n, ino)
	} else {
		k.n[ino] = c - nlookup
	}
	k.mu.Unlock()
	if nlookup >= c {
		go fsys.Unhold(context.Background(), ino)
	}
	return nlookup >= c
}

// entry serves one request that may return an entry of directory parent
// (and so add to the kernel's dentries and lookup counts): the
// invalidator learns of it before the request is served and after its
// lookup count is taken, just before go-fuse writes the reply.
func (r *rawFS) entry(parent uint64, out *fuse.EntryOut, serve func() fuse.Status) fuse.Status {
	since := r.m.inval.entryStart(parent)
	st := serve()
	if st != fuse.OK {
		out = nil
	}
	if out != nil { // a positive or negative entry: both timeouts end with the lease
		lease := r.m.fsys.CacheFor()
		if r.m.uncached != nil && r.m.uncached.UncachedNames(parent) {
			lease = 0
		}
		out.SetEntryTimeout(min(out.EntryTimeout(), lease))
		out.SetAttrTimeout(min(out.AttrTimeout(), lease))
	}
	r.m.inval.entryDone(since, out, r.m.fsys)
	return st
}

func (r *rawFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	return r.entry(h.NodeId, out, func() fuse.Status { return r.RawFileSystem.Lookup(cancel, h, name, out) })
}

func (r *rawFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer r.m.extras.put(cancel, in.Umask)()
	return r.entry(in.NodeId, &out.EntryOut, func() fuse.Status { return r.RawFileSystem.Create(cancel, in, name, out) })
}

func (r *rawFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer r.m.extras.put(cancel, in.Umask)()
	return r.entry(in.NodeId, out, func() fuse.Status { return r.RawFileSystem.Mkdir(cancel, in, name, out) })
}

func (r *rawFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	defer r.m.extras.put(cancel, in.Umask)()
	return r.entry(in.NodeId, out, func() fuse.Status { return r.RawFileSystem.Mknod(cancel, in, name, out) })
}

func (r *rawFS) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	return r.entry(h.NodeId, out, func() fuse.Status { return r.RawFileSystem.Symlink(cancel, h, target, name, out) })
}

func (r *rawFS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	return r.entry(in.NodeId, out, func() fuse.Status { return r.RawFileSystem.Link(cancel, in, name, out) })
}

// Unlink, Rmdir and Rename leave names in the kernel's dentry cache too (a
// negative dentry where the name was, a moved one where it goes).
func (r *rawFS) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return r.entry(h.NodeId, nil, func() fuse.Status { return r.RawFileSystem.Unlink(cancel, h, name) })
}

func (r *rawFS) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return r.entry(h.NodeId, nil, func() fuse.Status { return r.RawFileSystem.Rmdir(cancel, h, name) })
}

func (r *rawFS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	since := r.m.inval.entryStart(in.Newdir)
	defer r.m.inval.entryDone(since, nil, r.m.fsys)
	return r.entry(in.NodeId, nil, func() fuse.Status { return r.RawFileSystem.Rename(cancel, in, oldName, newName) })
}

func (r *rawFS) Forget(nodeid, nlookup uint64) {
	if r.m.refs.forget(r.m.fsys, nodeid, nlookup) {
		r.m.inval.forgotten(nodeid)
	}
	r.RawFileSystem.Forget(nodeid, nlookup)
}
