package filesys

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/plumeria-fs/plumeria/filesys/dir"
	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// NameBytesMax bounds a name in a directory.
const NameBytesMax = dir.NameBytesMax

func checkName(name string) error {
	switch {
	case len(name) > NameBytesMax:
		return fmt.Errorf("%w: %d bytes (at most %d)", ErrNameTooLong, len(name), NameBytesMax)
	case name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("%w: name %q", ErrInvalid, name)
	}
	return nil
}

// opInodes holds the inodes one operation reads and changes, each decoded
// once, so that an inode met twice (a rename within one directory) is one
// object; put stages every changed one.
type opInodes struct {
	t       *tx
	m       map[uint64]*layout.Inode
	changed map[uint64]bool
}

func newOpInodes(t *tx) *opInodes {
	return &opInodes{t: t, m: map[uint64]*layout.Inode{}, changed: map[uint64]bool{}}
}

func (o *opInodes) get(ino uint64) (*layout.Inode, error) {
	if in := o.m[ino]; in != nil {
		return in, nil
	}
	in, err := o.t.inode(ino)
	if err != nil {
		return nil, err
	}
	o.m[ino] = in
	return in, nil
}

func (o *opInodes) mark(ino uint64) { o.changed[ino] = true }

// dir returns directory ino's inode and root.
func (o *opInodes) dir(ino uint64) (*layout.Inode, *dir.Dir, error) {
	in, err := o.get(ino)
	if err != nil {
		return nil, nil, err
	}
	if in.Nlink == 0 {
		return nil, nil, fmt.Errorf("%w: directory %d was removed", ErrNotFound, ino)
	}
	d, err := dirOf(ino, in)
	return in, d, err
}

func (o *opInodes) put() error {
	for ino := range o.changed {
		if err := o.t.putInode(ino, o.m[ino]); err != nil {
			return err
		}
	}
	return nil
}

// dirError translates filesys/dir's errors.
func dirError(err error, name string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, dir.ErrExists):
		return fmt.Errorf("%w: %q", ErrExists, name)
	case errors.Is(err, dir.ErrNotFound):
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	case errors.Is(err, dir.ErrBadName):
		return fmt.Errorf("%w: name %q", ErrInvalid, name)
	case errors.Is(err, dir.ErrFull):
		return fmt.Errorf("%w: directory is full", ErrNoSpace)
	case errors.Is(err, dir.ErrCorrupt):
		return fmt.Errorf("%w: %v (run plumeria fsck)", ErrIO, err)
	}
	return err
}

// lookupEntry finds name in directory parent under a read lock.
func (fs *FS) lookupEntry(ctx context.Context, parent uint64, name string) (dir.Entry, error) {
	if err := checkName(name); err != nil {
		return dir.Entry{}, err
	}
	h, err := fs.acquire(ctx, r(inodeLock(parent)))
	if err != nil {
		return dir.Entry{}, err
	}
	defer h.release()
	return lookupLocked(fs.newTx(ctx), parent, name)
}

// lookupLocked finds name in directory parent; t's caller holds parent's
// lock.
func lookupLocked(t *tx, parent uint64, name string) (dir.Entry, error) {
	_, d, err := newOpInodes(t).dir(parent)
	if err != nil {
		return dir.Entry{}, err
	}
	e, ok, err := d.Lookup(dirBlocks{t, parent}, name)
	if err != nil {
		return dir.Entry{}, dirError(err, name)
	}
	if !ok {
		return dir.Entry{}, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return e, nil
}

// lookupRaced, when set (tests), runs between a Lookup's two lock sets.
var lookupRaced func(parent uint64, name string, ino uint64)

// Lookup returns the attributes of name in directory parent. The entry and
// the inode's attributes are read under both their locks at once: between
// two lock sets another node could free the inode and reuse its number for
// a new file, whose attributes (and generation) the caller would then take
// for name's. Locks are taken in id order; when the child's id is below
// the parent's, a first look learns the child and a second, holding both,
// checks that name still names it.
func (fs *FS) Lookup(ctx context.Context, parent uint64, name string) (Attr, error) {
	if err := checkName(name); err != nil {
		return Attr{}, err
	}
	var guess uint64 // the inode name held at the last look (0: none yet)
	for try := 0; ; try++ {
		if try > 0 && ctx.Err() != nil {
			return Attr{}, fmt.Errorf("%w: lookup of %q: %v", ErrInterrupted, name, ctx.Err())
		}
		ws := []want{r(inodeLock(parent))}
		if guess != 0 && guess != parent {
			ws = append(ws, r(inodeLock(guess)))
		}
		h, err := fs.acquire(ctx, ws...)
		if err != nil {
			return Attr{}, err
		}
		a, again, err := fs.lookupAttr(ctx, h, parent, name, guess)
		h.release()
		if err != nil || again == 0 {
			return a, err
		}
		guess = again
		if lookupRaced != nil {
			lookupRaced(parent, name, guess)
		}
	}
}

// lookupAttr reads name's entry in parent and its inode's attributes under
// h, which holds parent's lock and guess's. A child that is neither guess
// nor above parent (its lock cannot be added in order) is returned as
// again: the caller locks it too and looks again.
func (fs *FS) lookupAttr(ctx context.Context, h *held, parent uint64, name string, guess uint64) (_ Attr, again uint64, _ error) {
	t := fs.newTx(ctx)
	e, err := lookupLocked(t, parent, name)
	if err != nil {
		return Attr{}, 0, err
	}
	switch {
	case e.Ino == guess || e.Ino == parent:
	case e.Ino > parent && guess == 0:
		if err := h.add(ctx, r(inodeLock(e.Ino))); err != nil {
			return Attr{}, 0, err
		}
	default:
		return Attr{}, e.Ino, nil
	}
	in, err := t.inode(e.Ino)
	if err != nil {
		return Attr{}, 0, err
	}
	return attrOf(e.Ino, in), 0, nil
}

// Getattr returns inode ino's attributes.
func (fs *FS) Getattr(ctx context.Context, ino uint64) (Attr, error) {
	h, err := fs.acquire(ctx, r(inodeLock(ino)))
	if err != nil {
		return Attr{}, err
	}
	defer h.release()
	in, err := fs.newTx(ctx).inode(ino)
	if err != nil {
		return Attr{}, err
	}
	return attrOf(ino, in), nil
}

// Parent returns the attributes of directory dir's parent (the root's
// is itself): ".." for adapters whose clients look it up (NFS). The
// answer can be stale by the time it returns, as a lookup's can.
func (fs *FS) Parent(ctx context.Context, dir uint64) (Attr, error) {
	h, err := fs.acquire(ctx, r(inodeLock(dir)))
	if err != nil {
		return Attr{}, err
	}
	in, err := fs.newTx(ctx).inode(dir)
	h.release()
	switch {
	case err != nil:
		return Attr{}, err
	case in.Mode&typeMask != typeDir:
		return Attr{}, fmt.Errorf("%w: inode %d", ErrNotDir, dir)
	case dir == RootIno || in.Parent == 0:
		return fs.Getattr(ctx, dir)
	}
	return fs.Getattr(ctx, in.Parent)
}

// ReadDir lists directory ino's entries with cookies above after.
func (fs *FS) ReadDir(ctx context.Context, ino uint64, after uint64, max int) ([]DirEntry, bool, error) {
	h, err := fs.acquire(ctx, r(inodeLock(ino)))
	if err != nil {
		return nil, false, err
	}
	defer h.release()
	t := fs.newTx(ctx)
	in, err := t.inode(ino)
	if err != nil {
		return nil, false, err
	}
	d, err := dirOf(ino, in)
	if err != nil {
		return nil, false, err
	}
	ents, done, err := d.List(dirBlocks{t, ino}, after, max)
	if err != nil {
		return nil, false, dirError(err, "")
	}
	out := make([]DirEntry, len(ents))
	for i, e := range ents {
		out[i] = DirEntry{Name: e.Name, Ino: e.Ino, Mode: uint32(e.Type) << 12, Cookie: e.Cookie}
	}
	return out, done, nil
}

// Readlink returns a symlink's target.
func (fs *FS) Readlink(ctx context.Context, ino uint64) (string, error) {
	h, err := fs.acquire(ctx, r(inodeLock(ino)))
	if err != nil {
		return "", err
	}
	defer h.release()
	in, err := fs.newTx(ctx).inode(ino)
	if err != nil {
		return "", err
	}
	if in.Mode&typeMask != typeLnk {
		return "", fmt.Errorf("%w: inode %d is not a symlink", ErrInvalid, ino)
	}
	if len(in.Inline) == 0 && in.Size > 0 && in.Size <= SymlinkBytesMax {
		b := make([]byte, in.Size)
		if err := fs.cfg.Dev.ReadAt(ctx, b, layout.ExtentAddr(ino)); err != nil {
			return "", fs.ioError("read a long symlink target", layout.ExtentAddr(ino), err)
		}
		return string(b), nil
	}
	return string(in.Inline), nil
}

// newInode describes an inode to create.
type newInode struct {
	mode, rdev uint32
	c          Caller
	inline     []byte
	extent     []byte // written to the extent before the inode is logged
	size       uint64
}

// makeNode creates name in parent (Create, Mkdir, Mknod, Symlink). With
// excl false an existing name is returned instead (Create without O_EXCL).
func (fs *FS) makeNode(ctx context.Context, parent uint64, name string, n newInode, excl bool) (Attr, error) {
	return withQuota(ctx, fs, func() (Attr, error) { return fs.makeNodeOnce(ctx, parent, name, n, excl) })
}

func (fs *FS) makeNodeOnce(ctx context.Context, parent uint64, name string, n newInode, excl bool) (Attr, error) {
	if err := checkName(name); err != nil {
		return Attr{}, err
	}
	for try := 0; try < layout.RGsMax; try++ {
		g := (fs.rg + try) % layout.RGsMax
		a, existing, err := fs.makeNodeIn(ctx, parent, name, n, g)
		switch {
		case errors.Is(err, errGroupFull):
			continue
		case err != nil:
			return Attr{}, err
		case existing != 0 && excl:
			return Attr{}, fmt.Errorf("%w: %q", ErrExists, name)
		case existing != 0:
			a, err := fs.Getattr(ctx, existing)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			return a, err
		}
		return a, nil
	}
	return Attr{}, fmt.Errorf("%w: every resource group is full (%d inodes)", ErrNoSpace, layout.InodesMax)
}

func (fs *FS) makeNodeIn(ctx context.Context, parent uint64, name string, n newInode, g int) (Attr, uint64, error) {
	h, err := fs.acquire(ctx, r(barrierLock), w(inodeLock(parent)), w(rgLock(g)))
	if err != nil {
		return Attr{}, 0, err
	}
	defer h.release()
	t := fs.newTx(ctx)
	o := newOpInodes(t)
	pin, d, err := o.dir(parent)
	if err != nil {
		return Attr{}, 0, err
	}
	blocks := dirBlocks{t, parent}
	if e, ok, err := d.Lookup(blocks, name); err != nil {
		return Attr{}, 0, dirError(err, name)
	} else if ok {
		return Attr{}, e.Ino, nil
	}
	now := fs.now()
	isNewDir := n.mode&typeMask == typeDir
	// The new inode's mode and lists, before it is allocated: a parent's
	// default list that does not decode fails the create, not later.
	proto := &layout.Inode{Mode: n.mode}
	if err := inheritACL(parent, pin, proto, n.c); err != nil {
		return Attr{}, 0, err
	}
	rs := innerRealms(parent, pin)
	ino, in, err := fs.allocInode(t, h, g, func(ino uint64, _ *layout.Inode) *layout.Inode {
		in := &layout.Inode{Mode: proto.Mode, Nlink: 1, Uid: n.c.Uid, Gid: n.c.Gid, Rdev: n.rdev,
			Size: n.size, Atime: now, Mtime: now, Ctime: now, Inline: n.inline, Xattrs: proto.Xattrs, Realms: rs}
		if pin.Mode&syscall.S_ISGID != 0 {
			in.Gid = pin.Gid
			if isNewDir {
				in.Mode |= syscall.S_ISGID
			}
		}
		switch {
		case isNewDir:
			in.Nlink, in.Parent = 2, parent
			in.Inline = dir.New(inlineMax(in)).Encode()
		case n.mode&typeMask == typeReg:
			in.Flags = layout.FlagInline
		}
		return in
	})
	if err != nil {
		return Attr{}, 0, err
	}
	if err := fs.charge(h, t, rs, chargedBytes(in), 1); err != nil {
		return Attr{}, 0, err
	}
	if len(n.extent) > 0 {
		if err := fs.writeData(ctx, n.extent, layout.ExtentAddr(ino), fs.extentVersion(in)); err != nil {
			return Attr{}, 0, fs.ioError("write a long symlink target", layout.ExtentAddr(ino), err)
		}
		in.HWM = uint64(len(n.extent))
		if err := t.putInode(ino, in); err != nil {
			return Attr{}, 0, err
		}
	}
	if isReg(in) && fs.vdev != nil {
		fs.openVersion(t, ino, in) // a new file's first close makes its first version
		if err := t.putInode(ino, in); err != nil {
			return Attr{}, 0, err
		}
	}
	if err := d.Insert(blocks, dir.Entry{Name: name, Ino: ino, Type: uint8(n.mode >> 12)}); err != nil {
		return Attr{}, 0, dirError(err, name)
	}
	if err := fs.logName(t, parent, pin, layout.NameAdded, name, ino, in.Gen, uint8(n.mode>>12), now); err != nil {
		return Attr{}, 0, err
	}
	saveDir(pin, d)
	pin.Mtime, pin.Ctime = now, now
	if isNewDir {
		pin.Nlink++
	}
	o.mark(parent)
	if err := o.put(); err != nil {
		return Attr{}, 0, err
	}
	if err := t.commit(); err != nil {
		return Attr{}, 0, err
	}
	return attrOf(ino, in), 0, nil
}

// Create makes a regular file, or returns the existing one unless excl.
func (fs *FS) Create(ctx context.Context, parent uint64, name string, mode uint32, c Caller, excl bool) (Attr, error) {
	return fs.makeNode(ctx, parent, name, newInode{mode: typeReg | mode&0o7777, c: c}, excl)
}

// Mkdir makes a directory.
func (fs *FS) Mkdir(ctx context.Context, parent uint64, name string, mode uint32, c Caller) (Attr, error) {
	return fs.makeNode(ctx, parent, name, newInode{mode: typeDir | mode&0o7777, c: c}, true)
}

// Mknod makes a device, fifo or socket node (or a regular file).
func (fs *FS) Mknod(ctx context.Context, parent uint64, name string, mode, rdev uint32, c Caller) (Attr, error) {
	switch mode & typeMask {
	case syscall.S_IFCHR, syscall.S_IFBLK, syscall.S_IFIFO, syscall.S_IFSOCK, typeReg:
	case 0:
		mode |= typeReg
	default:
		return Attr{}, fmt.Errorf("%w: mknod of type %o", ErrInvalid, mode&typeMask)
	}
	return fs.makeNode(ctx, parent, name, newInode{mode: mode, rdev: rdev, c: c}, true)
}

// FileBytesMax bounds a file's size.
const FileBytesMax = layout.FileBytesMax

// SymlinkBytesMax bounds a symlink's target (PATH_MAX - 1). Targets up to
// symlinkInlineMax bytes live in the inode, longer ones in its extent.
const (
	SymlinkBytesMax  = 4095
	symlinkInlineMax = layout.InlineBytes - 256
)

// Symlink makes a symbolic link to target.
func (fs *FS) Symlink(ctx context.Context, parent uint64, name, target string, c Caller) (Attr, error) {
	switch {
	case len(target) == 0:
		return Attr{}, fmt.Errorf("%w: empty symlink target", ErrNotFound)
	case len(target) > SymlinkBytesMax:
		return Attr{}, fmt.Errorf("%w: symlink target of %d bytes", ErrNameTooLong, len(target))
	}
	n := newInode{mode: typeLnk | 0o777, c: c, size: uint64(len(target))}
	if len(target) <= symlinkInlineMax {
		n.inline = []byte(target)
	} else {
		n.extent = []byte(target)
	}
	return fs.makeNode(ctx, parent, name, n, true)
}
