package filesys

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// File versions (Mammoth §2.2; issue H). On a volume that keeps them
// (VersionDevice), closing a regular file changed since its newest version
// makes a new, immutable one:
//
//   - Every byte of a file is written at the file version it belongs to:
//     the inode's fver+1 (the version being made) until the close that
//     makes it. The bricks keep a block's newest bytes of every version,
//     so a read at version f sees the file's extent as that version left
//     it; blocks no later version changed are shared, never copied.
//   - The close logs the inode with fver = f, FlagPending, the time and
//     the node: until the file changes again, the inode is version f's
//     record (its size, attributes, and the bytes of a file stored
//     inline). The log batch carrying it waits for every data write
//     issued before it (ordered data, data.go), so a durable version has
//     all its bytes; a crash before it is durable leaves no version (the
//     next close makes f again, over what was written at f).
//   - Before the file next changes, or is freed, the record is written to
//     the extent's history block (layout/history.go) at f (materialize),
//     and the transaction of that change waits for it (not hidesData): a
//     file created, written and closed once costs no write of its own
//     for its version.
//   - fver is kept when an inode is freed and reused, so versions of one
//     extent never decrease; a freed file's extent is decommitted at the
//     version after its last, which leaves its versions readable.
//
// The flag FlagModified in the inode marks a file changed since its newest
// version, so any node's close makes the version; the node that changed it
// also remembers it (modified), so closes of untouched files take no lock.
// Space held by old versions is not given back yet: retention is to come.

// fverMax is the largest file version (the bricks keep 2^32-1 for
// unversioned writes).
const fverMax = 1<<32 - 2

// ErrTooManyVersions: a file reached fverMax versions.
var ErrTooManyVersions = errors.New("file has the most versions a file can have")

// openVersion returns the file version ino's writes belong to now (0 when
// the volume keeps none), and marks the inode changed since its newest
// version, writing the newest version's record first if it is pending
// (t's log batch then waits for it). The caller holds the inode's lock in
// write mode and stores in.
func (fs *FS) openVersion(t *tx, ino uint64, in *layout.Inode) uint32 {
	if fs.vdev == nil || !isReg(in) {
		return 0
	}
	fs.materialize(t, ino, in)
	in.Flags |= layout.FlagModified
	fs.modified.Lock()
	if fs.modified.inos == nil {
		fs.modified.inos = map[uint64]struct{}{}
	}
	fs.modified.inos[ino] = struct{}{}
	fs.modified.Unlock()
	return in.FVer + 1
}

// modifiedSet is the set of inodes this node changed since it last made
// their version.
type modifiedSet struct {
	sync.Mutex
	inos map[uint64]struct{}
}

func (fs *FS) takeModified(ino uint64) bool {
	fs.modified.Lock()
	defer fs.modified.Unlock()
	_, ok := fs.modified.inos[ino]
	delete(fs.modified.inos, ino)
	return ok
}

// writeData writes file bytes at addr as file version fver (0: untagged).
func (fs *FS) writeData(ctx context.Context, p []byte, addr uint64, fver uint32) error {
	if fver == 0 {
		return fs.cfg.Dev.WriteData(ctx, p, addr)
	}
	return fs.vdev.WriteDataVersion(ctx, p, addr, fver)
}

// decommit frees [addr, addr+n) as of file version fver (0: untagged).
func (fs *FS) decommit(ctx context.Context, addr, n uint64, fver uint32) error {
	if fver == 0 {
		return fs.cfg.Dev.Decommit(ctx, addr, n)
	}
	return fs.vdev.DecommitVersion(ctx, addr, n, fver)
}

// extentVersion is the version at which what is not part of a file
// version goes to inode in's extent: a freed file's decommit (above its
// last version, so its versions stay readable), a long symlink's target.
func (fs *FS) extentVersion(in *layout.Inode) uint32 {
	if fs.vdev == nil {
		return 0
	}
	return in.FVer + 1
}

// makeVersion makes ino's next version if this node changed it since its
// newest one (a close: Flush).
func (fs *FS) makeVersion(ctx context.Context, ino uint64) error {
	if fs.vdev == nil || !fs.takeModified(ino) {
		return nil
	}
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
	if in.Free() || !isReg(in) || in.Flags&layout.FlagModified == 0 {
		return nil // another node's close made it
	}
	f := in.FVer + 1
	if f > fverMax {
		return fmt.Errorf("%w: inode %d", ErrTooManyVersions, ino)
	}
	// The log batch that records fver = f waits for the version's data
	// (t may expose data: not hidesData).
	in.FVer = f
	in.Flags = in.Flags&^layout.FlagModified | layout.FlagPending
	in.Closed = toTime(fs.now()).UnixNano()
	in.Node = nodeName(fs.cfg.ID, layout.NodeBytes)
	if err := t.putInode(ino, in); err != nil {
		return err
	}
	return t.commit()
}

// Created is when the file system was formatted.
func (fs *FS) Created() time.Time { return time.Unix(0, fs.super.Created) }

// KeepsVersions reports whether the volume keeps file versions.
func (fs *FS) KeepsVersions() bool { return fs.vdev != nil }

// nodeName fits a node's id into n bytes.
func nodeName(id string, n int) string {
	if len(id) <= n {
		return id
	}
	return id[:n]
}

// pendingRecord is the history record of in's pending version (in has
// FlagPending and is unchanged since; a free inode keeps the mode in rdev:
// freedInode).
func pendingRecord(ino uint64, in *layout.Inode) *layout.FileVersion {
	mode := in.Mode
	if in.Free() {
		mode = in.Rdev
	}
	v := &layout.FileVersion{Ino: ino, Gen: in.Gen, FVer: in.FVer, Mode: mode, Uid: in.Uid, Gid: in.Gid, Size: in.Size,
		Closed: fromTime(time.Unix(0, in.Closed)), Mtime: in.Mtime, Ctime: in.Ctime, Node: in.Node,
		Inline: in.Flags&layout.FlagInline != 0}
	if v.Inline {
		v.Data = slices.Clone(in.Inline)
	}
	return v
}

// materialize writes the history record of in's pending version, if any,
// before the file changes or is freed, and makes t's log batch wait for it
// (the change in t would lose the inode state that is the record; callers
// set t.hidesData before, never after). The
// caller holds the inode's lock in write mode and stores in.
func (fs *FS) materialize(t *tx, ino uint64, in *layout.Inode) {
	if fs.vdev == nil || in.Flags&layout.FlagPending == 0 {
		return
	}
	b, err := layout.EncodeHistory(pendingRecord(ino, in))
	if err != nil {
		// Only a corrupt inode can get here (EncodeInode checks the
		// same bounds): keep the version out rather than stop.
		fs.log.Warn("a pending file version does not encode: dropped", "ino", ino, "fver", in.FVer, "err", err)
	} else {
		fs.data.write(t.ctx, ino, b, layout.HistoryOff, in.FVer)
		t.hidesData = false // the batch waits for the record
	}
	in.Flags &^= layout.FlagPending
	in.Closed, in.Node = 0, ""
}

// Version is one version of a file, as Versions lists it.
type Version struct {
	FVer   uint32
	Closed time.Time
	Node   string
	Attr   Attr // as the file was: size, mode, owner, times
	rec    *layout.FileVersion
}

// ErrNoVersions: the volume keeps no file versions.
var ErrNoVersions = errors.New("this volume keeps no file versions (create it with file versions on)")

// Versions lists regular file ino's versions, oldest first. Versions of an
// earlier file that had the same inode number are not listed.
func (fs *FS) Versions(ctx context.Context, ino uint64) ([]Version, error) {
	return fs.VersionsOf(ctx, ino, 0)
}

// VersionsOf lists the versions of the file of generation gen at inode
// number ino (0: the file there now), oldest first: also of a file deleted
// since, whose number may have been reused.
func (fs *FS) VersionsOf(ctx context.Context, ino, gen uint64) ([]Version, error) {
	if fs.vdev == nil {
		return nil, ErrNoVersions
	}
	in, err := fs.settledInode(ctx, ino)
	if err != nil {
		return nil, err
	}
	if gen == 0 {
		if in.Free() {
			return nil, fmt.Errorf("%w: inode %d", ErrStale, ino)
		}
		if !isReg(in) {
			return nil, fmt.Errorf("%w: inode %d is not a regular file", ErrInvalid, ino)
		}
		gen = in.Gen
	}
	pending := in.Gen == gen && in.Flags&layout.FlagPending != 0
	recs, err := fs.records(ctx, ino, in)
	if err != nil {
		return nil, err
	}
	var out []Version
	for _, rec := range recs {
		if rec.Gen == gen { // not an earlier file at this number
			out = append(out, versionOf(ino, rec))
		}
	}
	if pending {
		out = append(out, versionOf(ino, pendingRecord(ino, in)))
	}
	return out, nil
}

// records returns the history records of inode number ino (in: its
// inode, its lock taken and released by the caller) of every file that had
// the number, oldest first: those of versions made and durable (at most
// in.FVer) whose record was written, not a pending version's (the inode
// is its record: pendingRecord).
func (fs *FS) records(ctx context.Context, ino uint64, in *layout.Inode) ([]*layout.FileVersion, error) {
	hist := layout.ExtentAddr(ino) + layout.HistoryOff
	fvers, err := fs.vdev.BlockVersions(ctx, hist)
	if err != nil {
		return nil, fs.ioError("list file versions", hist, err)
	}
	pending := in.Flags&layout.FlagPending != 0
	var out []*layout.FileVersion
	b := make([]byte, layout.BlockBytes)
	for _, f := range fvers {
		if f == 0 || f > in.FVer || pending && f == in.FVer {
			continue // untagged, a record of a change never durable, or the inode is the record
		}
		if err := fs.vdev.ReadAtVersion(ctx, b, hist, f); err != nil {
			return nil, fs.ioError("read a file version's record", hist, err)
		}
		rec, err := layout.DecodeHistory(b, ino)
		if err != nil {
			return nil, fmt.Errorf("%w: version %d of inode %d: %v", ErrIO, f, ino, err)
		}
		if rec.FVer == f {
			out = append(out, rec)
		}
	}
	return out, nil
}

func versionOf(ino uint64, rec *layout.FileVersion) Version {
	in := &layout.Inode{Mode: rec.Mode, Nlink: 1, Uid: rec.Uid, Gid: rec.Gid, Size: rec.Size, Gen: rec.Gen,
		Mtime: rec.Mtime, Ctime: rec.Ctime, Atime: rec.Mtime}
	return Version{FVer: rec.FVer, Closed: toTime(rec.Closed), Node: rec.Node, Attr: attrOf(ino, in), rec: rec}
}

// VersionAt returns the newest version made at or before t of file ino of
// generation gen (0: the file there now); ok false if it has none.
func (fs *FS) VersionAt(ctx context.Context, ino, gen uint64, t time.Time) (Version, bool, error) {
	vs, err := fs.VersionsOf(ctx, ino, gen)
	if err != nil {
		return Version{}, false, err
	}
	for i := len(vs) - 1; i >= 0; i-- {
		if !vs[i].Closed.After(t) {
			return vs[i], true, nil
		}
	}
	return Version{}, false, nil
}

// ReadVersion reads version v (from Versions) of file ino at off: the
// bytes as the close that made v left them.
func (fs *FS) ReadVersion(ctx context.Context, ino uint64, v Version, p []byte, off uint64) (int, error) {
	if fs.vdev == nil || v.rec == nil {
		return 0, ErrNoVersions
	}
	if off >= v.rec.Size {
		return 0, nil
	}
	n := int(min(uint64(len(p)), v.rec.Size-off))
	if v.rec.Inline {
		return copy(p[:n], v.rec.Data[off:]), nil
	}
	addr := layout.ExtentAddr(ino) + off
	if err := fs.vdev.ReadAtVersion(ctx, p[:n], addr, v.FVer); err != nil {
		return 0, fs.ioError("read a file version", addr, err)
	}
	return n, nil
}

// settledInode returns ino's inode (maybe free) once every node's writes of its data
// are on the volume: taking its lock makes another node that changed it
// write everything back first, and this node's own writes are waited for.
func (fs *FS) settledInode(ctx context.Context, ino uint64) (*layout.Inode, error) {
	h, err := fs.acquire(ctx, r(inodeLock(ino)))
	if err != nil {
		return nil, err
	}
	defer h.release()
	in, err := fs.newTx(ctx).anyInode(ino)
	if err != nil {
		return nil, err
	}
	fs.data.settle(ino)
	return in, nil
}
