package filesys

import (
	"context"
	"fmt"
	"slices"
	"syscall"

	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// inlineCap is how many bytes of a regular file stay inside its inode.
func inlineCap(in *layout.Inode) uint64 { return uint64(layout.InlineBytes - in.XattrBytes()) }

// checkGen is ErrStale when ino is no longer generation gen (0: any): the
// file the caller opened was freed (by another node) and its number reused.
func checkGen(ino, gen uint64, in *layout.Inode) error {
	if gen != 0 && in.Gen != gen {
		return fmt.Errorf("%w: inode %d is generation %d now, not %d", ErrStale, ino, in.Gen, gen)
	}
	return nil
}

// Read reads from regular file ino, generation gen (0: any), at off; short
// only at end of file.
func (fs *FS) Read(ctx context.Context, ino, gen uint64, p []byte, off uint64) (int, error) {
	h, err := fs.acquire(ctx, r(inodeLock(ino)))
	if err != nil {
		return 0, err
	}
	defer h.release()
	in, err := fs.newTx(ctx).inode(ino)
	if err != nil {
		return 0, err
	}
	if err := checkGen(ino, gen, in); err != nil {
		return 0, err
	}
	if !isReg(in) {
		if isDir(in) {
			return 0, fmt.Errorf("%w: read of directory %d", ErrIsDir, ino)
		}
		return 0, fmt.Errorf("%w: read of inode %d of type %o", ErrInvalid, ino, in.Mode&typeMask)
	}
	if off >= in.Size {
		return 0, nil
	}
	n := int(min(uint64(len(p)), in.Size-off))
	if in.Flags&layout.FlagInline != 0 {
		clear(p[:n])
		if off < uint64(len(in.Inline)) {
			copy(p[:n], in.Inline[off:])
		}
		return n, nil
	}
	// This node's writes to the file need not wait for the volume read:
	// the cluster lock stays pinned, the local one is given up before it
	// (readPages; the page cache's fill check covers its pages).
	if err := fs.readPages(ctx, ino, p[:n], off, h.unlockLocal); err != nil {
		return 0, err
	}
	return n, nil
}

// readPages fills p from offset off of extent file ino through the data
// cache; the caller holds ino's lock. A page read from the volume is cached
// whole (64 KiB: bytes past the size are never returned). Before its first
// volume read it calls unlock (more calls are harmless), which gives up the
// local side of the caller's lock: from then on this node's writes to the
// file may run, and what it reads is returned but cached only if none
// changed the pages it read (pageCache.putFilled). Such a write overlaps
// the Read in time, so either content is a correct answer; the kernel does
// not send a WRITE for a page while a READ of it is under way (it holds the
// page locked), and other nodes cannot write meanwhile (the cluster lock is
// pinned).
func (fs *FS) readPages(ctx context.Context, ino uint64, p []byte, off uint64, unlock func()) error {
	if fs.pages.max == 0 {
		fs.data.settle(ino) // this node's writes still under way
		unlock()
		if err := fs.cfg.Dev.ReadAt(ctx, p, layout.ExtentAddr(ino)+off); err != nil {
			return fs.ioError("read file data", layout.ExtentAddr(ino)+off, err)
		}
		return nil
	}
	// The pages this read may fetch, registered while ino's lock is held.
	fill := fs.pages.beginFill(ino, off/pageBytes, (off+uint64(len(p))-1)/pageBytes)
	defer fs.pages.endFill(fill)
	for len(p) > 0 {
		idx, in := off/pageBytes, int(off%pageBytes)
		n := min(len(p), pageBytes-in)
		if fs.pages.get(ino, idx, in, p[:n]) {
			p, off = p[n:], off+uint64(n)
			continue
		}
		// Read this page and the ones after it that p needs and the cache
		// lacks with one volume read (its chunks are fetched in parallel).
		pages := 1
		for end := uint64(n); end < uint64(len(p)) && !fs.pages.has(ino, idx+uint64(pages)); end += pageBytes {
			pages++
		}
		// This node's writes to these pages still under way; writes to
		// other pages of the file need not be waited for. Writes that
		// start after unlock overlap this Read (see above).
		fs.data.settleRange(ino, idx*pageBytes, (idx+uint64(pages))*pageBytes)
		unlock()
		if whole := min(pages, len(p)/pageBytes); fs.cfg.StreamReads && in == 0 && whole >= streamPages {
			// A stream (the kernel's read-ahead): straight into p, not
			// cached here. The kernel's page cache holds these bytes, and
			// a stream would only push smaller files' pages out of this
			// cache; no buffer to clear and copy through either.
			m := whole * pageBytes
			addr := layout.ExtentAddr(ino) + off
			if err := fs.cfg.Dev.ReadAt(ctx, p[:m], addr); err != nil {
				return fs.ioError("read file data", addr, err)
			}
			fs.stats.streamed.Add(float64(m))
			p, off = p[m:], off+uint64(m)
			continue
		}
		buf := make([]byte, pages*pageBytes)
		addr := layout.ExtentAddr(ino) + idx*pageBytes
		if err := fs.cfg.Dev.ReadAt(ctx, buf, addr); err != nil {
			return fs.ioError("read file data", addr, err)
		}
		for i := range pages {
			pg := buf[i*pageBytes : (i+1)*pageBytes : (i+1)*pageBytes]
			m := min(len(p), pageBytes-in)
			copy(p[:m], pg[in:])
			fs.pages.putFilled(fill, idx+uint64(i), pg)
			p, off, in = p[m:], off+uint64(m), 0
		}
	}
	return nil
}

// Write writes p to regular file ino, generation gen (0: any), at off (at
// its end with appendMode). The bytes are on the volume before the inode
// change that covers them is logged (ordered data).
func (fs *FS) Write(ctx context.Context, ino, gen uint64, p []byte, off uint64, appendMode bool) (int, error) {
	n, err := fs.write(ctx, ino, gen, p, off, appendMode)
	if !quotaShortOf(err) {
		return n, err // outside any realm the quota costs one comparison (charge)
	}
	return withQuota(ctx, fs, func() (int, error) { return fs.write(ctx, ino, gen, p, off, appendMode) })
}

func (fs *FS) write(ctx context.Context, ino, gen uint64, p []byte, off uint64, appendMode bool) (int, error) {
	h, err := fs.acquire(ctx, r(barrierLock), w(inodeLock(ino)))
	if err != nil {
		return 0, err
	}
	defer h.release()
	t := fs.newTx(ctx)
	in, err := t.inode(ino)
	if err != nil {
		return 0, err
	}
	if err := checkGen(ino, gen, in); err != nil {
		return 0, err
	}
	if !isReg(in) {
		return 0, fmt.Errorf("%w: write to inode %d of type %o", ErrIsDir, ino, in.Mode&typeMask)
	}
	if appendMode {
		off = in.Size
	}
	end := off + uint64(len(p))
	if end > layout.FileBytesMax || end < off {
		return 0, fmt.Errorf("%w: end %d past the largest file (%d bytes)", ErrFileTooBig, end, uint64(layout.FileBytesMax))
	}
	if len(p) == 0 {
		return 0, nil
	}
	grown := int64(max(end, in.Size) - in.Size)
	if err := fs.charge(h, t, in.Realms, grown, 0); err != nil {
		return 0, err // before the bytes are accepted (written behind)
	}
	// Inside the size of a file already in its extent, a write shows
	// nothing new: its record need not wait for the data (data.go).
	// (openVersion may say otherwise: a version record it writes.)
	t.hidesData = in.Flags&layout.FlagInline == 0 && end <= in.Size && end <= in.HWM
	fver := fs.openVersion(t, ino, in)
	if in.Flags&layout.FlagInline != 0 && end <= inlineCap(in) {
		if end > uint64(len(in.Inline)) {
			in.Inline = append(in.Inline, make([]byte, end-uint64(len(in.Inline)))...)
		}
		copy(in.Inline[off:], p)
		in.Size = uint64(len(in.Inline))
	} else {
		if err := fs.toExtent(ctx, ino, in, fver); err != nil {
			return 0, err
		}
		if err := fs.exposeTail(ctx, ino, in, off, fver); err != nil {
			return 0, err
		}
		if fs.data.lowSpace() {
			if err := fs.data.writeThrough(ctx, ino, p, off, fver); err != nil {
				// Some replicas may hold the bytes: past the size they
				// must be cleared if the file grows over them.
				in.HWM = max(in.HWM, end)
				if perr := t.putInode(ino, in); perr == nil && fs.charge(h, t, in.Realms, -grown, 0) == nil {
					t.commit()
				}
				return 0, err
			}
		} else {
			fs.data.write(ctx, ino, p, off, fver)
		}
		fs.pages.write(ino, p, off)
		in.Size, in.HWM = max(in.Size, end), max(in.HWM, end)
	}
	now := fs.now()
	in.Mtime, in.Ctime = now, now
	killPriv(in)
	if err := t.putInode(ino, in); err != nil {
		return 0, err
	}
	return len(p), t.commit()
}

// killPriv clears setuid, and setgid of a group-executable file, as a
// write or truncate by anyone does on Linux, and drops the file's
// capabilities (security.capability). The kernel leaves all of it to the
// file system (the FUSE adapter asks for FUSE_HANDLE_KILLPRIV_V2, which
// spares a getxattr of security.capability before every write).
func killPriv(in *layout.Inode) {
	in.Mode &^= syscall.S_ISUID
	if in.Mode&syscall.S_IXGRP != 0 {
		in.Mode &^= syscall.S_ISGID
	}
	in.Xattrs = slices.DeleteFunc(in.Xattrs, func(x layout.Xattr) bool { return x.Name == xattrCaps })
}

// xattrCaps holds a file's capabilities (capabilities(7)).
const xattrCaps = "security.capability"

// toExtent moves an inline file's bytes to its extent. They are written
// behind like any write (data.go): the record that clears the inline flag
// may make them visible, so its log batch waits for them, and a write that
// continues them (a file written in pieces) joins them in one volume write.
// Low on space they are written through, so the write fails instead.
func (fs *FS) toExtent(ctx context.Context, ino uint64, in *layout.Inode, fver uint32) error {
	if in.Flags&layout.FlagInline == 0 {
		return nil
	}
	if len(in.Inline) > 0 {
		if fs.data.lowSpace() {
			if err := fs.data.writeThrough(ctx, ino, in.Inline, 0, fver); err != nil {
				return err
			}
		} else {
			fs.data.write(ctx, ino, in.Inline, 0, fver)
		}
		fs.pages.write(ino, in.Inline, 0)
		in.HWM = max(in.HWM, uint64(len(in.Inline)))
	}
	in.Inline = nil
	in.Flags &^= layout.FlagInline
	return nil
}

// truncate sets regular file ino's size. Shrinking writes nothing to the
// volume: the bytes between the size and the high-water mark (HWM) may be
// stale, and are cleared only when a change makes them part of the file
// again (exposeTail), before that change is logged. Clearing them at the
// truncate instead would reach the volume before the smaller size is
// logged: a crash between the two left the old size over zeros.
func (fs *FS) truncate(ctx context.Context, t *tx, ino uint64, in *layout.Inode, size uint64) error {
	fs.pages.drop(ino)
	if size > layout.FileBytesMax {
		return fmt.Errorf("%w: size %d past the largest file", ErrFileTooBig, size)
	}
	fver := fs.openVersion(t, ino, in)
	if in.Flags&layout.FlagInline != 0 {
		if size <= inlineCap(in) {
			if size <= uint64(len(in.Inline)) {
				in.Inline = in.Inline[:size]
			} else {
				in.Inline = append(in.Inline, make([]byte, size-uint64(len(in.Inline)))...)
			}
			in.Size = size
			return nil
		}
		if err := fs.toExtent(ctx, ino, in, fver); err != nil {
			return err
		}
	}
	if err := fs.exposeTail(ctx, ino, in, size, fver); err != nil {
		return err
	}
	in.Size = size
	return nil
}

// exposeTail clears the stale bytes (see truncate) that growing extent
// file ino to end would make part of the file: [Size, min(end, HWM)).
// The truncate that left them stale must be durable first, or a crash
// would bring its old size back over the zeros: the log is synced.
func (fs *FS) exposeTail(ctx context.Context, ino uint64, in *layout.Inode, end uint64, fver uint32) error {
	if end <= in.Size || in.Size >= in.HWM {
		return nil
	}
	if err := fs.Sync(ctx); err != nil {
		return err
	}
	return fs.zeroRange(ctx, ino, in.Size, min(end, in.HWM), fver)
}

// zeroRange makes [from, to) of ino's extent read as zeros: the partial
// blocks at the ends are overwritten, the whole blocks decommitted.
func (fs *FS) zeroRange(ctx context.Context, ino, from, to uint64, fver uint32) error {
	fs.data.settle(ino)
	fs.pages.drop(ino)
	const bs = layout.BlockBytes
	base := layout.ExtentAddr(ino)
	first := (from + bs - 1) / bs * bs
	last := to / bs * bs
	if first >= last {
		z := make([]byte, to-from)
		return fs.wrap(fs.writeData(ctx, z, base+from, fver), "clear file bytes", base+from)
	}
	if from < first {
		z := make([]byte, first-from)
		if err := fs.writeData(ctx, z, base+from, fver); err != nil {
			return fs.ioError("clear file bytes", base+from, err)
		}
	}
	if last < to {
		z := make([]byte, to-last)
		if err := fs.writeData(ctx, z, base+last, fver); err != nil {
			return fs.ioError("clear file bytes", base+last, err)
		}
	}
	return fs.wrap(fs.decommit(ctx, base+first, last-first, fver), "free file blocks", base+first)
}

func (fs *FS) wrap(err error, what string, addr uint64) error {
	if err == nil {
		return nil
	}
	return fs.ioError(what, addr, err)
}

// Setattr changes inode ino's attributes.
func (fs *FS) Setattr(ctx context.Context, ino uint64, set SetAttr) (Attr, error) {
	return withQuota(ctx, fs, func() (Attr, error) { return fs.setattr(ctx, ino, set) })
}

func (fs *FS) setattr(ctx context.Context, ino uint64, set SetAttr) (Attr, error) {
	h, err := fs.acquire(ctx, r(barrierLock), w(inodeLock(ino)))
	if err != nil {
		return Attr{}, err
	}
	defer h.release()
	t := fs.newTx(ctx)
	in, err := t.inode(ino)
	if err != nil {
		return Attr{}, err
	}
	now := fs.now()
	if set.Size != nil {
		switch {
		case isDir(in):
			return Attr{}, fmt.Errorf("%w: truncate of directory %d", ErrIsDir, ino)
		case !isReg(in):
			return Attr{}, fmt.Errorf("%w: truncate of inode %d of type %o", ErrInvalid, ino, in.Mode&typeMask)
		}
		if *set.Size != in.Size {
			if err := fs.charge(h, t, in.Realms, int64(*set.Size)-int64(in.Size), 0); err != nil {
				return Attr{}, err
			}
			if err := fs.truncate(ctx, t, ino, in, *set.Size); err != nil {
				return Attr{}, err
			}
		}
		in.Mtime = now
		killPriv(in)
	}
	if set.Mode != nil || set.Uid != nil || set.Gid != nil {
		// A pending version's record is this inode: written before the
		// permissions it shows change (times may change under it).
		fs.materialize(t, ino, in)
	}
	if set.Mode != nil {
		in.Mode = in.Mode&typeMask | *set.Mode&0o7777
		if err := chmodACL(ino, in); err != nil {
			return Attr{}, err
		}
	}
	if set.KillPriv && isReg(in) {
		killPriv(in)
	}
	if set.Uid != nil {
		in.Uid = *set.Uid
	}
	if set.Gid != nil {
		in.Gid = *set.Gid
	}
	if set.Atime != nil {
		in.Atime = fromTime(*set.Atime)
	}
	if set.Mtime != nil {
		in.Mtime = fromTime(*set.Mtime)
	}
	in.Ctime = now
	if err := t.putInode(ino, in); err != nil {
		return Attr{}, err
	}
	if err := t.commit(); err != nil {
		return Attr{}, err
	}
	return attrOf(ino, in), nil
}

// Fsync makes ino's data and every change made on this node so far
// durable: it waits for ino's data writes (reporting the first that failed
// since the last Fsync of ino), then syncs the log.
// Flush reports a failed write of ino's data known by now (close(2)),
// without waiting for the writes under way: fsync waits for them.
//
// On a volume that keeps file versions, the close of a file changed here
// since its newest version makes the next one (versions.go).
func (fs *FS) Flush(ctx context.Context, ino uint64) error {
	if err := fs.data.takeErr(ino); err != nil {
		return err
	}
	return fs.makeVersion(ctx, ino)
}

// Fsync makes ino's data and every change logged before it durable, and
// reports a data write of ino that failed since the last Fsync. The file's
// data writes and the log write run at once: a log batch that
// may make data visible waits for the data itself (dataWriter.barrier).
//
// With dataOnly (fdatasync), when no change to ino's inode that may make
// data visible (a size, an inline byte, a truncate: not tx.hidesData) is
// above the log's durable LSN, only the data writes are waited for: what
// the log still holds for ino are new times and mode bits of overwrites
// inside its size, which fdatasync(2) need not make durable; after a
// crash the file reads the new bytes with its earlier times. Every data
// exposure of ino changes its inode block, which the cache keeps with the
// LSN of its last exposing change until it is written back, and write-back
// comes after the log is durable. A directory is no exception: every change
// of its entries also sets its times in a transaction that is not
// hidesData, so any pending entry change makes the log write happen.
func (fs *FS) Fsync(ctx context.Context, ino uint64, dataOnly bool) error {
	if fs.cfg.ReadOnly {
		return fs.failed()
	}
	if dataOnly {
		if err := fs.failed(); err != nil {
			return err
		}
		if fs.cache.exposeLSN(layout.InodeAddr(ino)) <= fs.rlog.Durable() {
			return fs.data.sync(ino)
		}
	}
	logErr := make(chan error, 1)
	go func() { logErr <- fs.Sync(ctx) }()
	err := fs.data.sync(ino)
	if lerr := <-logErr; err == nil {
		err = lerr
	}
	return err
}

// Fallocate modes, as fallocate(2).
const (
	fallocKeepSize  = 0x01
	fallocPunchHole = 0x02
	fallocZeroRange = 0x10
)

// Fallocate reserves (mode 0: extends the size; the volume is sparse and
// allocates on write), punches holes or zeroes ranges.
func (fs *FS) Fallocate(ctx context.Context, ino uint64, off, length uint64, mode uint32) error {
	end := off + length
	if length == 0 || end < off {
		return fmt.Errorf("%w: fallocate length %d", ErrInvalid, length)
	}
	if end > layout.FileBytesMax {
		return fmt.Errorf("%w: fallocate past the largest file", ErrFileTooBig)
	}
	switch mode {
	case 0, fallocKeepSize, fallocPunchHole | fallocKeepSize, fallocZeroRange, fallocZeroRange | fallocKeepSize:
	default:
		return fmt.Errorf("%w: fallocate mode %#x", ErrNotSupported, mode)
	}
	_, err := withQuota(ctx, fs, func() (struct{}, error) { return struct{}{}, fs.fallocate(ctx, ino, off, end, mode) })
	return err
}

func (fs *FS) fallocate(ctx context.Context, ino uint64, off, end uint64, mode uint32) error {
	h, err := fs.acquire(ctx, r(barrierLock), w(inodeLock(ino)))
	if err != nil {
		return err
	}
	defer h.release()
	t := fs.newTx(ctx)
	in, err := t.inode(ino)
	if err != nil {
		return err
	}
	if !isReg(in) {
		return fmt.Errorf("%w: fallocate on inode %d of type %o", ErrNotSupported, ino, in.Mode&typeMask)
	}
	if mode&(fallocPunchHole|fallocZeroRange) != 0 {
		zend := min(end, in.Size)
		if in.Flags&layout.FlagInline != 0 {
			if off < zend {
				clear(in.Inline[off:zend])
			}
		} else if off < min(zend, in.HWM) {
			if err := fs.zeroRange(ctx, ino, off, min(zend, in.HWM), fs.openVersion(t, ino, in)); err != nil {
				return err
			}
		}
	}
	if mode&fallocKeepSize == 0 && end > in.Size {
		if err := fs.charge(h, t, in.Realms, int64(end-in.Size), 0); err != nil {
			return err
		}
		if err := fs.truncate(ctx, t, ino, in, end); err != nil {
			return err
		}
	}
	in.Ctime = fs.now()
	if mode != fallocKeepSize {
		in.Mtime = in.Ctime
	}
	if err := t.putInode(ino, in); err != nil {
		return err
	}
	return t.commit()
}
