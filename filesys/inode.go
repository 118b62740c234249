package filesys

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/plumeria-fs/plumeria/filesys/dir"
	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// File type bits, as stat(2).
const (
	typeMask = syscall.S_IFMT
	typeDir  = syscall.S_IFDIR
	typeReg  = syscall.S_IFREG
	typeLnk  = syscall.S_IFLNK
)

func isDir(in *layout.Inode) bool { return in.Mode&typeMask == typeDir }
func isReg(in *layout.Inode) bool { return in.Mode&typeMask == typeReg }

// inode reads inode ino; the caller holds its lock. A free inode is
// ErrNotFound (a stale number).
func (t *tx) inode(ino uint64) (*layout.Inode, error) {
	in, err := t.anyInode(ino)
	if err != nil {
		return nil, err
	}
	if in.Free() {
		return nil, fmt.Errorf("%w: inode %d was deleted", ErrNotFound, ino)
	}
	return in, nil
}

// anyInode reads inode ino, free or not; the caller holds its lock.
func (t *tx) anyInode(ino uint64) (*layout.Inode, error) {
	if !layout.ValidIno(ino) {
		return nil, fmt.Errorf("%w: inode %d", ErrStale, ino)
	}
	b, err := t.read(layout.InodeAddr(ino), inodeLock(ino))
	if err != nil {
		return nil, err
	}
	in, _, err := layout.DecodeInode(b, ino)
	if err != nil {
		return nil, fmt.Errorf("%w: inode %d: %v", ErrIO, ino, err)
	}
	return in, nil
}

// putInode stages in as inode ino's new content.
func (t *tx) putInode(ino uint64, in *layout.Inode) error {
	b, err := t.write(layout.InodeAddr(ino), inodeLock(ino))
	if err != nil {
		return err
	}
	if !in.Fits() {
		return fmt.Errorf("%w: inode %d is full (inline data, directory root and xattrs share %d bytes)", ErrNoSpace, ino, layout.InlineBytes)
	}
	return layout.EncodeInode(b, ino, layout.Version(b), in)
}

func toTime(t layout.Time) time.Time { return time.Unix(t.Sec, int64(t.Nsec)) }
func fromTime(t time.Time) layout.Time {
	return layout.Time{Sec: t.Unix(), Nsec: uint32(t.Nanosecond())}
}

func attrOf(ino uint64, in *layout.Inode) Attr {
	a := Attr{Ino: ino, Gen: in.Gen, Mode: in.Mode, Nlink: in.Nlink, Uid: in.Uid, Gid: in.Gid, Rdev: in.Rdev,
		Size: in.Size, Atime: toTime(in.Atime), Mtime: toTime(in.Mtime), Ctime: toTime(in.Ctime)}
	used := min(in.Size, in.HWM)
	if in.Flags&layout.FlagInline != 0 {
		used = uint64(len(in.Inline))
	}
	a.Blocks = (used + 511) / 512
	if len(in.Xattrs) > 0 {
		a.ACL = accessACLOf(in)
	}
	return a
}

// dirOf decodes directory in's root.
func dirOf(ino uint64, in *layout.Inode) (*dir.Dir, error) {
	if !isDir(in) {
		return nil, fmt.Errorf("%w: inode %d", ErrNotDir, ino)
	}
	d, err := dir.Decode(in.Inline, inlineMax(in))
	if err != nil {
		return nil, fmt.Errorf("%w: directory %d: %v", ErrIO, ino, err)
	}
	return d, nil
}

func inlineMax(in *layout.Inode) int { return layout.InlineBytes - in.XattrBytes() }

// dirBlocks gives filesys/dir the blocks of directory ino through tx t.
type dirBlocks struct {
	t   *tx
	ino uint64
}

func (d dirBlocks) Read(n uint64) ([]byte, error) {
	if n >= layout.DirBlocksMax {
		return nil, fmt.Errorf("%w: directory %d block %d out of range", ErrIO, d.ino, n)
	}
	d.readAhead(n)
	b, err := d.t.read(layout.DirBlockAddr(d.ino, n), inodeLock(d.ino))
	if err != nil {
		return nil, err
	}
	h, err := layout.DecodeHeader(b)
	if err != nil || (h.Kind != layout.KindNone && (h.Kind != layout.KindDir || h.Owner != d.ino)) {
		return nil, fmt.Errorf("%w: directory %d block %d: %v (kind %v)", ErrIO, d.ino, n, err, h.Kind)
	}
	return b[layout.HeaderBytes:], nil
}

func (d dirBlocks) Write(n uint64, p []byte) error {
	d.readAhead(n)
	b, err := d.t.write(layout.DirBlockAddr(d.ino, n), inodeLock(d.ino))
	if err != nil {
		return err
	}
	layout.PutHeader(b, layout.Header{Kind: layout.KindDir, Version: layout.Version(b), Owner: d.ino, Index: n})
	copy(b[layout.HeaderBytes:], p)
	return nil
}

// dirReadAhead is how many blocks of a directory one volume read brings
// into the cache (64 KiB): a growing directory splits into the next blocks
// in turn, and each would otherwise cost a read of its own (their old
// contents must be read: their versions go on).
const dirReadAhead = 16

// readAhead caches blocks n.. of the directory (up to dirReadAhead of them,
// stopping before the first already cached) with one volume read, if block
// n is not cached. The caller holds the directory's lock, which covers
// them all. A failure only leaves them uncached.
func (d dirBlocks) readAhead(n uint64) {
	d.t.readAhead(layout.DirBlockAddr(d.ino, n), min(dirReadAhead, layout.DirBlocksMax-n), inodeLock(d.ino))
}

// readAhead caches up to n consecutive blocks from addr (stopping before
// the first already cached) with one volume read, if the block at addr is
// not cached or staged. lockID covers them all and the caller holds it. A
// failure only leaves them uncached.
func (t *tx) readAhead(addr, n, lockID uint64) {
	fs := t.fs
	if t.staged[addr] != nil {
		return
	}
	c := fs.cache
	k := uint64(0)
	c.mu.Lock()
	for k < n && c.blocks[addr+k*layout.BlockBytes] == nil {
		k++
	}
	c.mu.Unlock()
	if k < 2 {
		return // cached, or one block: the plain load reads it
	}
	buf := make([]byte, k*layout.BlockBytes)
	if err := fs.cfg.Dev.ReadAt(t.ctx, buf, addr); err != nil {
		return
	}
	for x := range k {
		c.insertClean(addr+x*layout.BlockBytes, lockID, buf[x*layout.BlockBytes:(x+1)*layout.BlockBytes:(x+1)*layout.BlockBytes])
	}
}

// saveDir stores directory d's root back into its inode.
func saveDir(in *layout.Inode, d *dir.Dir) { in.Inline = d.Encode() }

// allocInode allocates an inode in a resource group this operation holds
// (h holds rgLock(g) in write mode) and takes its lock. That lock comes
// out of order (after the group's), and a free inode's lock can still be
// held by an operation that waits for this group: a rename or a last close
// that locked the inode before another node freed it. So it is only tried
// (allocTryWait for the cluster lock, not at all for the local one); a
// free inode whose lock is busy is passed over for the next free one.
func (fs *FS) allocInode(t *tx, h *held, g int, init func(ino uint64, old *layout.Inode) *layout.Inode) (uint64, *layout.Inode, error) {
	b, err := t.write(layout.RGAddr(g), rgLock(g))
	if err != nil {
		return 0, nil, err
	}
	rg, err := layout.DecodeRG(b, g)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: resource group %d: %v", ErrIO, g, err)
	}
	var i int
	var ino uint64
	for try, from := 0, 0; ; try, from = try+1, i+1 {
		if i = rg.FindFree(from); i < 0 || try >= allocTriesMax || (try > 0 && i < from) {
			return 0, nil, errGroupFull // full, or every free inode tried is busy
		}
		ino = uint64(g)*layout.InodesPerRG + uint64(i)
		ok, err := h.tryAdd(t.ctx, inodeLock(ino), allocTryWait)
		if err != nil {
			return 0, nil, err
		}
		if ok {
			break
		}
	}
	ib, err := t.read(layout.InodeAddr(ino), inodeLock(ino))
	if err != nil {
		return 0, nil, err
	}
	old, _, err := layout.DecodeInode(ib, ino)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: inode %d: %v", ErrIO, ino, err)
	}
	if !old.Free() {
		// The bitmap is the authority: an inode left by an earlier format
		// (format --force) or lost by a repaired bitmap is reused.
		fs.log.Warn("reusing an inode that is free in its group's bitmap but not in its block", "ino", ino)
	}
	if old.HWM > 0 {
		// Bytes of an earlier file at this number may remain after a
		// crash: clear them before the number is reused, once the record
		// that freed it is durable (it may be in this node's log only).
		if err := fs.Sync(t.ctx); err != nil {
			return 0, nil, err
		}
		fs.data.settle(ino)
		if err := fs.decommit(t.ctx, layout.ExtentAddr(ino), old.HWM, fs.extentVersion(old)); err != nil {
			return 0, nil, fs.ioError("clear a reused extent", layout.ExtentAddr(ino), err)
		}
	}
	fs.pages.drop(ino) // a new file at the number
	rg.Set(i)
	rg.Encode(b, g, layout.Version(b))
	fs.prefetchAfter(g, rg, i)
	fs.materialize(t, ino, old) // a deleted file's pending version: its record before its inode goes
	in := init(ino, old)
	in.Gen = old.Gen + 1
	in.FVer = old.FVer // file versions of one extent never decrease
	in.NLog = old.NLog // the name log goes on behind an earlier directory's records
	if err := t.putInode(ino, in); err != nil {
		return 0, nil, err
	}
	return ino, in, nil
}

var errGroupFull = fmt.Errorf("%w: resource group full", ErrNoSpace)

// allocTryWait bounds the wait for a free inode's cluster lock (another
// node may have it cached and must give it back: normally milliseconds);
// allocTriesMax bounds the free inodes tried in one group.
const (
	allocTryWait  = 2 * time.Second
	allocTriesMax = 8
)

// freeInode marks inode ino free in its group (h holds the group's lock)
// and stages the free inode, keeping its generation, high-water mark, file
// version and name log length.
func (fs *FS) freeInode(t *tx, ino uint64, in *layout.Inode) error {
	g := layout.RGOf(ino)
	b, err := t.write(layout.RGAddr(g), rgLock(g))
	if err != nil {
		return err
	}
	rg, err := layout.DecodeRG(b, g)
	if err != nil {
		return fmt.Errorf("%w: resource group %d: %v", ErrIO, g, err)
	}
	rg.Clear(int(ino % layout.InodesPerRG))
	rg.Encode(b, g, layout.Version(b))
	fs.pages.drop(ino)
	return t.putInode(ino, freedInode(in))
}

// freedInode returns what a free inode keeps of in: its generation,
// high-water mark, file version and name log length; and, if the file's
// newest version is pending (FlagPending: the inode is its record), the
// record's fields, with the mode in rdev (a free inode's mode is 0) until
// the number is reused (allocInode writes the record then). Deleting a
// file written once costs no write for its version either.
func freedInode(in *layout.Inode) *layout.Inode {
	free := &layout.Inode{Gen: in.Gen, HWM: in.HWM, FVer: in.FVer, NLog: in.NLog}
	if in.Flags&layout.FlagPending != 0 && isReg(in) {
		free.Flags = layout.FlagPending | in.Flags&layout.FlagInline
		free.Rdev, free.Uid, free.Gid, free.Size = in.Mode, in.Uid, in.Gid, in.Size
		free.Mtime, free.Ctime, free.Closed, free.Node = in.Mtime, in.Ctime, in.Closed, in.Node
		if in.Flags&layout.FlagInline != 0 {
			free.Inline = in.Inline
		}
	}
	return free
}

// clearExtent decommits a freed regular file's data and records that the
// extent is clean. It holds the inode's lock, so nobody allocates the inode
// meanwhile, and syncs the log first: the record that freed the inode must
// be durable before its data goes, or a crash would bring the file back
// (the free lost with the log's tail) over zeros. Best effort: a later
// allocation clears the extent otherwise.
func (fs *FS) clearExtent(ctx context.Context, ino uint64, hwm uint64) {
	if hwm == 0 {
		return
	}
	h, err := fs.acquire(ctx, r(barrierLock), w(inodeLock(ino)))
	if err != nil {
		return
	}
	defer h.release()
	t := fs.newTx(ctx)
	b, err := t.read(layout.InodeAddr(ino), inodeLock(ino))
	if err != nil {
		return
	}
	in, _, err := layout.DecodeInode(b, ino)
	if err != nil || !in.Free() || in.HWM != hwm {
		return
	}
	if err := fs.Sync(ctx); err != nil {
		return
	}
	fs.data.settle(ino)
	if err := fs.decommit(ctx, layout.ExtentAddr(ino), hwm, fs.extentVersion(in)); err != nil {
		fs.log.Warn("could not free a deleted file's data (the next user of the inode will)", "ino", ino, "err", err)
		return
	}
	in.HWM = 0
	if t.putInode(ino, in) == nil {
		t.commit()
	}
}

// A directory's blocks fit its region.
const _ = uint64(layout.DirBlocksMax - dir.MaxBlocks)
