package fuse

import (
	"context"
	"math"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/plumeria-fs/plumeria/filesys"
)

// handle is one open(2) of a regular file (or anything but a directory).
type handle struct {
	appendMode bool   // O_APPEND: every write goes to the end of the file
	gen        uint64 // the generation opened: reads and writes of a newer file at the number fail
}

// genOf is the generation a request through f must find: the one f
// opened (go-fuse may have swapped n for a newer file's node under the
// same number meanwhile), else n's.
func (n *node) genOf(f fs.FileHandle) uint64 {
	if h, ok := f.(*handle); ok && h.gen != 0 {
		return h.gen
	}
	return n.StableAttr().Gen
}

// fsyncDataOnly is FUSE_FSYNC_FDATASYNC in FSYNC's flags.
const fsyncDataOnly = 1

// openFlags says whether an open of file ino keeps the pages the kernel
// caches for it: with Options.KeepCache always; with CacheTimeout unless a
// page invalidation of ino is queued or running (invalidator.opened: then
// the open drops them, and reads them again from FileSystem).
func (m *Server) openFlags(ino uint64) uint32 {
	keep := m.inval.opened(ino)
	if m.opts.KeepCache || (m.opts.CacheTimeout > 0 && keep) {
		return fuse.FOPEN_KEEP_CACHE
	}
	return 0
}

// createFlags: a file just made has no pages to keep, and one that existed
// (CREATE without O_EXCL) is treated as any open that cannot keep them.
func (m *Server) createFlags(ino uint64) uint32 {
	m.inval.opened(ino)
	if m.opts.KeepCache {
		return fuse.FOPEN_KEEP_CACHE
	}
	return 0
}

// dirFlags lets the kernel cache directory ino's listing and keep it across
// opendirs (CacheTimeout only): the invalidator drops it with the
// directory's attributes when its lock leaves (listing). Not for a
// directory whose names change with no lock to tell (UncachedNames).
func (m *Server) dirFlags(ino uint64) uint32 {
	if m.opts.CacheTimeout <= 0 || (m.uncached != nil && m.uncached.UncachedNames(ino)) {
		return 0
	}
	m.inval.listing(ino)
	return fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE
}

func (n *node) Open(ctx context.Context, flags uint32) (_ fs.FileHandle, _ uint32, en syscall.Errno) {
	defer n.m.stats.done("open", time.Now(), &en)
	n.m.inval.refresh(n.ino())
	// Open first: it checks that ino still is the file the kernel looked up.
	if err := n.m.fsys.Open(opCtx(ctx), n.ino(), n.StableAttr().Gen); err != nil {
		return nil, 0, n.errno("open", err)
	}
	if flags&syscall.O_TRUNC != 0 {
		// With CAP_ATOMIC_O_TRUNC the kernel sends O_TRUNC here; without
		// it, a SETATTR of size 0 comes first and never O_TRUNC.
		if _, err := n.m.fsys.Setattr(opCtx(ctx), n.ino(), filesys.SetAttr{Size: new(uint64)}); err != nil {
			n.m.fsys.Release(context.WithoutCancel(ctx), n.ino())
			return nil, 0, n.errno("open truncate", err)
		}
	}
	return &handle{appendMode: flags&syscall.O_APPEND != 0, gen: n.StableAttr().Gen}, n.m.openFlags(n.ino()), 0
}

// Release ends one Open or Create. Locks held through the handle were
// dropped by rawFS before.
func (n *node) Release(ctx context.Context, _ fs.FileHandle) (en syscall.Errno) {
	defer n.m.stats.done("release", time.Now(), &en)
	n.m.fsys.Release(context.WithoutCancel(ctx), n.ino())
	return 0
}

func (n *node) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (_ fuse.ReadResult, en syscall.Errno) {
	defer n.m.stats.done("read", time.Now(), &en)
	n.m.inval.refresh(n.ino())
	c, err := n.m.fsys.Read(opCtx(ctx), n.ino(), n.genOf(f), dest, uint64(off))
	if err != nil {
		return nil, n.errno("read", err)
	}
	return fuse.ReadResultData(dest[:c]), 0
}

func (n *node) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (_ uint32, en syscall.Errno) {
	defer n.m.stats.done("write", time.Now(), &en)
	n.m.inval.refresh(n.ino())
	h, _ := f.(*handle)
	appendMode := h != nil && h.appendMode
	c, err := n.m.fsys.Write(opCtx(ctx), n.ino(), n.genOf(f), data, uint64(off), appendMode)
	if err != nil && c == 0 {
		return 0, n.errno("write", err)
	}
	// A short write is reported as such; the caller learns the error when
	// it retries the rest.
	return uint32(c), 0
}

// Flush is called on every close(2): writes already reached FileSystem (no
// writeback cache); a data write it already knows failed is reported.
func (n *node) Flush(ctx context.Context, _ fs.FileHandle) syscall.Errno {
	return n.errno("flush", n.m.fsys.Flush(opCtx(ctx), n.ino()))
}

func (n *node) Fsync(ctx context.Context, _ fs.FileHandle, flags uint32) (en syscall.Errno) {
	defer n.m.stats.done("fsync", time.Now(), &en)
	return n.errno("fsync", n.m.fsys.Fsync(opCtx(ctx), n.ino(), flags&fsyncDataOnly != 0))
}

func (n *node) Allocate(ctx context.Context, _ fs.FileHandle, off, size uint64, mode uint32) (en syscall.Errno) {
	defer n.m.stats.done("fallocate", time.Now(), &en)
	return n.errno("fallocate", n.m.fsys.Fallocate(opCtx(ctx), n.ino(), off, size, mode))
}

// Getlk, Setlk and Setlkw serve fcntl(2) record locks and, with LK_FLOCK
// in flags, flock(2). owner is the kernel's lock owner: the process's
// file table for POSIX locks, the open file for flock.
func (n *node) Getlk(ctx context.Context, _ fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) (en syscall.Errno) {
	defer n.m.stats.done("getlk", time.Now(), &en)
	got, err := n.m.fsys.Getlk(opCtx(ctx), n.ino(), owner, fromFuseLock(lk))
	if err != nil {
		return n.errno("getlk", err)
	}
	*out = toFuseLock(got)
	return 0
}

func (n *node) Setlk(ctx context.Context, _ fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) (en syscall.Errno) {
	defer n.m.stats.done("setlk", time.Now(), &en)
	return n.setlk(ctx, owner, lk, flags, false)
}

func (n *node) Setlkw(ctx context.Context, _ fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) (en syscall.Errno) {
	defer n.m.stats.done("setlkw", time.Now(), &en)
	return n.setlk(ctx, owner, lk, flags, true)
}

func (n *node) setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, wait bool) syscall.Errno {
	flock := flags&fuse.FUSE_LK_FLOCK != 0
	l := fromFuseLock(lk)
	if !flock && l.Type != syscall.F_UNLCK {
		// Before the call: a lock granted while close(2) runs must still
		// be dropped by its FLUSH.
		n.m.locks.add(n.ino(), owner)
	}
	lctx := ctx
	if !wait {
		lctx = opCtx(ctx)
	}
	err := n.m.fsys.Setlk(lctx, n.ino(), owner, l, flock, wait)
	return n.errno("setlk", err)
}

// offsetMax is the kernel's "to the end of the file" (OFFSET_MAX).
const offsetMax = math.MaxInt64

func fromFuseLock(lk *fuse.FileLock) filesys.FileLock {
	l := filesys.FileLock{Type: int16(lk.Typ), Start: lk.Start, End: lk.End, Pid: lk.Pid}
	if l.End >= offsetMax {
		l.End = ^uint64(0)
	}
	return l
}

func toFuseLock(l filesys.FileLock) fuse.FileLock {
	lk := fuse.FileLock{Typ: uint32(l.Type), Start: l.Start, End: l.End, Pid: l.Pid}
	if lk.End >= offsetMax {
		lk.End = offsetMax
	}
	if l.Type == syscall.F_UNLCK {
		lk = fuse.FileLock{Typ: syscall.F_UNLCK}
	}
	return lk
}

// opCtx detaches an operation from the kernel's interrupts: a signal to the
// calling thread (Go's runtime sends them often) must not fail a stat with
// EINTR halfway through a lock wait or a volume write. Only a blocking
// file lock (F_SETLKW, flock without LOCK_NB) stays interruptible.
func opCtx(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }
