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

// forget gives back nlookup counts of ino; the last one unholds it. That
// may free an unlinked file, which takes cluster locks, so it runs on its
// own goroutine: FORGET is served on go-fuse's read loop.
func (k *kernelRefs) forget(fsys FileSystem, ino, nlookup uint64) {
	k.mu.Lock()
	c, ok := k.n[ino]
	if !ok {
		k.mu.Unlock()
		return // the root, or an entry from before a count was kept
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
}

func (r *rawFS) entry(st fuse.Status, out *fuse.EntryOut) fuse.Status {
	if st == fuse.OK && out.NodeId != 0 {
		r.m.refs.looked(r.m.fsys, out.NodeId)
	}
	return st
}

func (r *rawFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	return r.entry(r.RawFileSystem.Lookup(cancel, h, name, out), out)
}

func (r *rawFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	return r.entry(r.RawFileSystem.Create(cancel, in, name, out), &out.EntryOut)
}

func (r *rawFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	return r.entry(r.RawFileSystem.Mkdir(cancel, in, name, out), out)
}

func (r *rawFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	return r.entry(r.RawFileSystem.Mknod(cancel, in, name, out), out)
}

func (r *rawFS) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	return r.entry(r.RawFileSystem.Symlink(cancel, h, target, name, out), out)
}

func (r *rawFS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	return r.entry(r.RawFileSystem.Link(cancel, in, name, out), out)
}

func (r *rawFS) Forget(nodeid, nlookup uint64) {
	r.m.refs.forget(r.m.fsys, nodeid, nlookup)
	r.RawFileSystem.Forget(nodeid, nlookup)
}
