package fuse

import (
	"context"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/plumeria-fs/plumeria/filesys"
)

// node is one inode the kernel knows. It holds no state of its own: the
// inode number (StableAttr().Ino, also the FUSE node ID) names it to
// FileSystem, which holds everything else.
type node struct {
	fs.Inode
	m *Server
}

var (
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeReadlinker     = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeReleaser       = (*node)(nil)
	_ fs.NodeReader         = (*node)(nil)
	_ fs.NodeWriter         = (*node)(nil)
	_ fs.NodeFlusher        = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeAllocater      = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeStatfser       = (*node)(nil)
	_ fs.NodeGetxattrer     = (*node)(nil)
	_ fs.NodeSetxattrer     = (*node)(nil)
	_ fs.NodeListxattrer    = (*node)(nil)
	_ fs.NodeRemovexattrer  = (*node)(nil)
	_ fs.NodeGetlker        = (*node)(nil)
	_ fs.NodeSetlker        = (*node)(nil)
	_ fs.NodeSetlkwer       = (*node)(nil)
)

func (n *node) ino() uint64 { return n.StableAttr().Ino }

func (n *node) errno(op string, err error) syscall.Errno {
	en := toErrno(n.m.log, op, n.ino(), err)
	if en == syscall.ENOENT && !nameOps[op] {
		// The inode the kernel holds is gone (removed, maybe by another
		// node): ESTALE makes the VFS walk the path again (LOOKUP_REVAL)
		// where a path was given, instead of failing with ENOENT a name
		// that exists.
		return syscall.ESTALE
	}
	return en
}

// nameOps are the operations whose ENOENT is about a name in directory
// n (or n itself being a removed directory), which stays ENOENT.
var nameOps = map[string]bool{"lookup": true, "create": true, "mknod": true, "mkdir": true,
	"symlink": true, "link": true, "unlink": true, "rmdir": true, "rename": true}

// child returns the go-fuse inode for a, which go-fuse then swaps for the
// one it already knows under the same number (hard links, racing lookups),
// and fills out.
func (n *node) child(ctx context.Context, a filesys.Attr, out *fuse.EntryOut) *fs.Inode {
	fillAttr(&out.Attr, a)
	out.SetEntryTimeout(n.m.ttl.entry)
	out.SetAttrTimeout(n.m.ttl.attrOf(a)) // rawFS.entry cuts both to the lease
	id := fs.StableAttr{Ino: a.Ino, Gen: a.Gen, Mode: a.Mode & syscall.S_IFMT}
	return n.NewInode(ctx, &node{m: n.m}, id)
}

// caller is who sent the request; new inodes take its ids, and its
// umask where no default ACL decides (the kernel leaves it to us:
// CAP_DONT_MASK).
func (n *node) caller(ctx context.Context) filesys.Caller {
	if c, ok := fuse.FromContext(ctx); ok {
		return filesys.Caller{Uid: c.Uid, Gid: c.Gid, Umask: n.m.extras.of(ctx)}
	}
	return filesys.Caller{}
}

func isDir(a filesys.Attr) bool { return a.Mode&syscall.S_IFMT == syscall.S_IFDIR }

// attrTTL is how long the kernel may keep a's attributes (Options, cut
// to the file system's lease).
func (m *Server) attrTTL(a filesys.Attr) time.Duration { return m.bound(m.ttl.attrOf(a)) }

// attrOf is the configured attribute timeout for a, before the lease cut.
func (t ttls) attrOf(a filesys.Attr) time.Duration {
	if isDir(a) {
		return t.dirAttr
	}
	return t.attr
}

// bound cuts a timeout to what the file system's lease leaves
// (FileSystem.CacheFor).
func (m *Server) bound(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return min(d, m.fsys.CacheFor())
}

// fillAttr copies a into out. Blksize is set so that go-fuse keeps Blocks
// (it computes Blocks from Size when Blksize is 0, which hides sparseness).
func fillAttr(out *fuse.Attr, a filesys.Attr) {
	out.Ino = a.Ino
	out.Size = a.Size
	out.Blocks = a.Blocks
	out.Mode = a.Mode
	out.Nlink = a.Nlink
	out.Uid, out.Gid = a.Uid, a.Gid
	out.Rdev = a.Rdev
	out.Blksize = 4096
	out.SetTimes(&a.Atime, &a.Mtime, &a.Ctime)
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (_ *fs.Inode, en syscall.Errno) {
	defer n.m.stats.done("lookup", time.Now(), &en)
	a, err := n.m.fsys.Lookup(opCtx(ctx), n.ino(), name)
	if err != nil {
		// ENOENT becomes a negative entry of ttl.negative (go-fuse).
		return nil, n.errno("lookup", err)
	}
	return n.child(ctx, a, out), 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) (en syscall.Errno) {
	defer n.m.stats.done("getattr", time.Now(), &en)
	a, err := n.m.fsys.Getattr(opCtx(ctx), n.ino())
	if err != nil {
		return n.errno("getattr", err)
	}
	if g := n.genOf(f); g != 0 && a.Gen != g {
		// The number names a newer file now (another node freed and
		// reused it): its attributes are not this file's. The kernel
		// would take its size and read or stat the wrong file.
		return syscall.ESTALE
	}
	fillAttr(&out.Attr, a)
	out.SetTimeout(n.m.attrTTL(a))
	return 0
}

func (n *node) Setattr(ctx context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) (en syscall.Errno) {
	defer n.m.stats.done("setattr", time.Now(), &en)
	var set filesys.SetAttr
	if mode, ok := in.GetMode(); ok {
		mode &= 0o7777
		set.Mode = &mode
	}
	if uid, ok := in.GetUID(); ok {
		set.Uid = &uid
	}
	if gid, ok := in.GetGID(); ok {
		set.Gid = &gid
	}
	if size, ok := in.GetSize(); ok {
		set.Size = &size
	}
	if t, ok := in.GetATime(); ok {
		set.Atime = &t
	}
	if t, ok := in.GetMTime(); ok {
		set.Mtime = &t
	}
	// The kernel leaves this to the file system (HANDLE_KILLPRIV_V2): a
	// chown, or a truncate by a caller without CAP_FSETID.
	set.KillPriv = in.Valid&fuse.FATTR_KILL_SUIDGID != 0
	a, err := n.m.fsys.Setattr(opCtx(ctx), n.ino(), set)
	if err != nil {
		return n.errno("setattr", err)
	}
	fillAttr(&out.Attr, a)
	out.SetTimeout(n.m.attrTTL(a))
	return 0
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (_ *fs.Inode, _ fs.FileHandle, _ uint32, en syscall.Errno) {
	defer n.m.stats.done("create", time.Now(), &en)
	excl := flags&syscall.O_EXCL != 0
	a, err := n.m.fsys.Create(opCtx(ctx), n.ino(), name, mode, n.caller(ctx), excl)
	if err != nil {
		return nil, nil, 0, n.errno("create", err)
	}
	if flags&syscall.O_TRUNC != 0 && a.Size != 0 {
		// The name existed: the kernel thinks it created the file, so it
		// will not truncate it.
		if a, err = n.m.fsys.Setattr(opCtx(ctx), a.Ino, filesys.SetAttr{Size: new(uint64)}); err != nil {
			return nil, nil, 0, toErrno(n.m.log, "create truncate", a.Ino, err)
		}
	}
	if err := n.m.fsys.Open(opCtx(ctx), a.Ino, a.Gen); err != nil {
		return nil, nil, 0, toErrno(n.m.log, "create open", a.Ino, err)
	}
	ch := n.child(ctx, a, out)
	return ch, &handle{appendMode: flags&syscall.O_APPEND != 0, gen: a.Gen}, n.m.createFlags(a.Ino), 0
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (_ *fs.Inode, en syscall.Errno) {
	defer n.m.stats.done("mknod", time.Now(), &en)
	a, err := n.m.fsys.Mknod(opCtx(ctx), n.ino(), name, mode, rdev, n.caller(ctx))
	if err != nil {
		return nil, n.errno("mknod", err)
	}
	return n.child(ctx, a, out), 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (_ *fs.Inode, en syscall.Errno) {
	defer n.m.stats.done("mkdir", time.Now(), &en)
	// The kernel leaves S_IFDIR out of MKDIR's mode.
	a, err := n.m.fsys.Mkdir(opCtx(ctx), n.ino(), name, mode&0o7777|syscall.S_IFDIR, n.caller(ctx))
	if err != nil {
		return nil, n.errno("mkdir", err)
	}
	return n.child(ctx, a, out), 0
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (_ *fs.Inode, en syscall.Errno) {
	defer n.m.stats.done("symlink", time.Now(), &en)
	a, err := n.m.fsys.Symlink(opCtx(ctx), n.ino(), name, target, n.caller(ctx))
	if err != nil {
		return nil, n.errno("symlink", err)
	}
	return n.child(ctx, a, out), 0
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (_ *fs.Inode, en syscall.Errno) {
	defer n.m.stats.done("link", time.Now(), &en)
	a, err := n.m.fsys.Link(opCtx(ctx), target.EmbeddedInode().StableAttr().Ino, n.ino(), name)
	if err != nil {
		return nil, n.errno("link", err)
	}
	return n.child(ctx, a, out), 0
}

func (n *node) Unlink(ctx context.Context, name string) (en syscall.Errno) {
	defer n.m.stats.done("unlink", time.Now(), &en)
	return n.errno("unlink", n.m.fsys.Unlink(opCtx(ctx), n.ino(), name))
}

func (n *node) Rmdir(ctx context.Context, name string) (en syscall.Errno) {
	defer n.m.stats.done("rmdir", time.Now(), &en)
	return n.errno("rmdir", n.m.fsys.Rmdir(opCtx(ctx), n.ino(), name))
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) (en syscall.Errno) {
	defer n.m.stats.done("rename", time.Now(), &en)
	var f uint32
	switch flags {
	case 0:
	case unix.RENAME_NOREPLACE:
		f = filesys.RenameNoReplace
	case unix.RENAME_EXCHANGE:
		f = filesys.RenameExchange
	default: // RENAME_WHITEOUT, or a combination
		return syscall.EINVAL
	}
	to := newParent.EmbeddedInode().StableAttr().Ino
	return n.errno("rename", n.m.fsys.Rename(opCtx(ctx), n.ino(), name, to, newName, f))
}

func (n *node) Readlink(ctx context.Context) (_ []byte, en syscall.Errno) {
	defer n.m.stats.done("readlink", time.Now(), &en)
	n.m.inval.refresh(n.ino())
	t, err := n.m.fsys.Readlink(opCtx(ctx), n.ino())
	if err != nil {
		return nil, n.errno("readlink", err)
	}
	return []byte(t), 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) (en syscall.Errno) {
	defer n.m.stats.done("statfs", time.Now(), &en)
	s, err := n.m.fsys.Statfs(ctx)
	if err != nil {
		return n.errno("statfs", err)
	}
	out.Bsize, out.Frsize = s.Bsize, s.Bsize
	out.Blocks, out.Bfree, out.Bavail = s.Blocks, s.Bfree, s.Bavail
	out.Files, out.Ffree = s.Files, s.Ffree
	out.NameLen = s.NameLen
	return 0
}

// Getxattr copies the value into dest. When dest is too small it returns
// the size and ERANGE; go-fuse turns that into the size answer a probe
// (getxattr with size 0) expects.
func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (_ uint32, en syscall.Errno) {
	defer n.m.stats.done("getxattr", time.Now(), &en)
	n.m.inval.refresh(n.ino())
	v, err := n.m.fsys.Getxattr(opCtx(ctx), n.ino(), attr)
	if err != nil {
		return 0, n.errno("getxattr", err)
	}
	if len(v) > len(dest) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) (en syscall.Errno) {
	defer n.m.stats.done("setxattr", time.Now(), &en)
	if n.m.extras.of(ctx)&fuse.SETXATTR_ACL_KILL_SGID != 0 {
		flags |= filesys.XattrACLKillSGID
	}
	return n.errno("setxattr", n.m.fsys.Setxattr(opCtx(ctx), n.ino(), attr, data, flags))
}

// Listxattr writes the names NUL-terminated, as listxattr(2) returns them;
// a too small dest gets the size and ERANGE, as in Getxattr.
func (n *node) Listxattr(ctx context.Context, dest []byte) (_ uint32, en syscall.Errno) {
	defer n.m.stats.done("listxattr", time.Now(), &en)
	n.m.inval.refresh(n.ino())
	names, err := n.m.fsys.Listxattr(opCtx(ctx), n.ino())
	if err != nil {
		return 0, n.errno("listxattr", err)
	}
	size := 0
	for _, s := range names {
		size += len(s) + 1
	}
	if size > len(dest) {
		return uint32(size), syscall.ERANGE
	}
	b := dest[:0]
	for _, s := range names {
		b = append(append(b, s...), 0)
	}
	return uint32(len(b)), 0
}

func (n *node) Removexattr(ctx context.Context, attr string) (en syscall.Errno) {
	defer n.m.stats.done("removexattr", time.Now(), &en)
	return n.errno("removexattr", n.m.fsys.Removexattr(opCtx(ctx), n.ino(), attr))
}
