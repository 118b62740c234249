package nfs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/plumeria-fs/plumeria/filesys"
)

// Sizes this server offers (FSINFO) and takes.
const (
	maxIO   = 1 << 20 // rtmax, wtmax: a READ or WRITE moves at most this much
	fhMax   = 64      // NFS3_FHSIZE
	maxName = 1024    // names longer than this do not decode (the file system's bound is lower)
	maxPath = 4096    // symlink targets
)

// stable_how of WRITE.
const (
	unstable = 0
	dataSync = 1
	fileSync = 2
)

// ACCESS bits.
const (
	accessRead    = 0x01
	accessLookup  = 0x02
	accessModify  = 0x04
	accessExtend  = 0x08
	accessDelete  = 0x10
	accessExecute = 0x20
)

var nfsProcs = map[uint32]proc{
	0:  {"null", func(*request, *encoder) uint32 { return nfsOK }},
	1:  {"getattr", getattr},
	2:  {"setattr", setattr},
	3:  {"lookup", lookup},
	4:  {"access", access},
	5:  {"readlink", readlink},
	6:  {"read", read},
	7:  {"write", write},
	8:  {"create", create},
	9:  {"mkdir", mkdir},
	10: {"symlink", symlink},
	11: {"mknod", mknod},
	12: {"remove", remove},
	13: {"rmdir", rmdir},
	14: {"rename", rename},
	15: {"link", link},
	16: {"readdir", readdir},
	17: {"readdirplus", readdirplus},
	18: {"fsstat", fsstat},
	19: {"fsinfo", fsinfo},
	20: {"pathconf", pathconf},
	21: {"commit", commit},
}

// status translates err for this request's procedure.
func (r *request) status(op string, err error) uint32 { return toStatus(r.s.log, op, err) }

// file returns the attributes of the inode fh names: NFS3ERR_STALE when it
// was freed or its number names a newer file.
func (r *request) file(fh []byte) (filesys.Attr, uint32) {
	ino, gen, err := r.s.h.parse(fh)
	if err != nil {
		return filesys.Attr{}, r.status("handle", err)
	}
	a, err := r.fs.Getattr(r.ctx(), ino)
	switch {
	case errors.Is(err, filesys.ErrNotFound):
		return a, nfsErrStale
	case err != nil:
		return a, r.status("getattr", err)
	case a.Gen != gen:
		return a, nfsErrStale
	}
	return a, nfsOK
}

// dir is file for a directory the caller changes (want: the access bits
// it needs on it, 0: none).
func (r *request) dir(fh []byte, want uint32) (filesys.Attr, uint32) {
	a, st := r.file(fh)
	switch {
	case st != nfsOK:
		return a, st
	case !isDir(a):
		return a, nfsErrNotDir
	case want&filesys.MayWrite != 0 && r.s.opts.ReadOnly:
		return a, nfsErrROFS
	}
	if err := r.c.CheckAccess(a, want); err != nil {
		return a, r.status("access", err)
	}
	return a, nfsOK
}

// durable waits until every change made so far is on stable storage
// (the redo log's group commit batches concurrent waits into one write).
func (r *request) durable(op string) uint32 {
	r.s.m.durableWait()
	if err := r.fs.Sync(r.ctx()); err != nil {
		if !errors.Is(err, filesys.ErrWouldBlock) { // suspended: nothing new lost
			r.s.dataLost(err)
		}
		return r.status(op, err)
	}
	return nfsOK
}

// owns reports whether the caller owns a (knfsd's owner override for
// READ and WRITE: the client checked the mode when it opened the file).
func (r *request) owns(a filesys.Attr) bool { return r.c.Uid == a.Uid }

func getattr(r *request, e *encoder) uint32 {
	fh := r.args().opaque(fhMax)
	if r.args().err != nil {
		return statusGarbage
	}
	a, st := r.file(fh)
	e.u32(st)
	if st == nfsOK {
		r.fattr(e, a)
	}
	return st
}

func setattr(r *request, e *encoder) uint32 {
	d := r.args()
	fh, s := d.opaque(fhMax), d.sattr()
	guard := d.boolean()
	var ctime [2]uint32
	if guard {
		ctime[0], ctime[1] = d.u32(), d.u32()
	}
	if d.err != nil {
		return statusGarbage
	}
	a, st := r.file(fh)
	if st == nfsOK && r.s.opts.ReadOnly {
		st = nfsErrROFS
	}
	if st == nfsOK && guard && (uint32(a.Ctime.Unix()) != ctime[0] || uint32(a.Ctime.Nanosecond()) != ctime[1]) {
		st = nfsErrNotSync
	}
	if st == nfsOK {
		st = r.setattr(a, s.set)
	}
	e.u32(st)
	r.wcc(e, a.Ino)
	return st
}

// setattr checks and applies set to a, durably.
func (r *request) setattr(a filesys.Attr, set filesys.SetAttr) uint32 {
	size := set.Size
	if size != nil && r.owns(a) {
		// knfsd's owner override: the client checked the mode when it
		// opened the file (a 0444 file that tar creates, then writes).
		set.Size = nil
	}
	set, err := r.c.CheckSetattr(a, set)
	set.Size = size
	if err == nil {
		_, err = r.fs.Setattr(r.ctx(), a.Ino, set)
	}
	if err != nil {
		return r.status("setattr", err)
	}
	return r.durable("setattr")
}

func lookup(r *request, e *encoder) uint32 {
	d := r.args()
	fh, name := d.opaque(fhMax), d.str(maxName)
	if d.err != nil {
		return statusGarbage
	}
	dir, st := r.dir(fh, filesys.MayExec)
	var a filesys.Attr
	if st == nfsOK {
		var err error
		switch name {
		case ".":
			a = dir
		case "..":
			a, err = r.fs.Parent(r.ctx(), dir.Ino)
		default:
			a, err = r.fs.Lookup(r.ctx(), dir.Ino, name)
		}
		st = r.status("lookup", err)
	}
	e.u32(st)
	if st == nfsOK {
		e.opaque(r.s.h.make(a.Ino, a.Gen))
		r.postOp(e, a, true)
	}
	r.postOp(e, dir, dir.Ino != 0)
	return st
}

func access(r *request, e *encoder) uint32 {
	d := r.args()
	fh, want := d.opaque(fhMax), d.u32()
	if d.err != nil {
		return statusGarbage
	}
	a, st := r.file(fh)
	e.u32(st)
	r.postOp(e, a, st == nfsOK)
	if st != nfsOK {
		return st
	}
	var got uint32
	if r.c.Permits(a, filesys.MayRead) {
		got |= accessRead
	}
	if r.c.Permits(a, filesys.MayWrite) && !r.s.opts.ReadOnly {
		got |= accessModify | accessExtend
		if isDir(a) {
			got |= accessDelete
		}
	}
	if r.c.Permits(a, filesys.MayExec) {
		if isDir(a) {
			got |= accessLookup
		} else {
			got |= accessExecute
		}
	}
	e.u32(got & want)
	return st
}

func readlink(r *request, e *encoder) uint32 {
	fh := r.args().opaque(fhMax)
	if r.args().err != nil {
		return statusGarbage
	}
	a, st := r.file(fh)
	var target string
	if st == nfsOK {
		if a.Mode&syscall.S_IFMT != syscall.S_IFLNK {
			st = nfsErrInval
		} else {
			var err error
			target, err = r.fs.Readlink(r.ctx(), a.Ino)
			st = r.status("readlink", err)
		}
	}
	e.u32(st)
	r.postOp(e, a, a.Ino != 0)
	if st == nfsOK {
		e.str(target)
	}
	return st
}

// regular checks that a is a file the caller may read or write (want).
func (r *request) regular(a filesys.Attr, want uint32) uint32 {
	switch {
	case isDir(a):
		return nfsErrIsDir
	case !isReg(a):
		return nfsErrInval
	case want == filesys.MayWrite && r.s.opts.ReadOnly:
		return nfsErrROFS
	case r.owns(a):
		return nfsOK
	}
	return r.status("access", r.c.CheckAccess(a, want))
}

func read(r *request, e *encoder) uint32 {
	d := r.args()
	fh, off, count := d.opaque(fhMax), d.u64(), d.u32()
	if d.err != nil {
		return statusGarbage
	}
	count = min(count, maxIO)
	a, st := r.file(fh)
	if st == nfsOK {
		st = r.regular(a, filesys.MayRead)
	}
	if st != nfsOK {
		e.u32(st)
		r.postOp(e, a, a.Ino != 0)
		return st
	}
	// The data goes straight into the reply: status, attributes, count,
	// eof and the opaque's length are filled in around it.
	e.u32(nfsOK)
	r.postOp(e, a, true)
	head := len(e.b)
	e.u32(0) // count
	e.u32(0) // eof
	e.u32(0) // length
	start := len(e.b)
	e.b = slices.Grow(e.b, int(count)+3)[:start+int(count)]
	n, err := r.fs.Read(r.ctx(), a.Ino, a.Gen, e.b[start:], off)
	if err != nil {
		st = r.status("read", err)
		e.b = e.b[:0]
		replyHeader(e, r.call.xid, acceptSuccess)
		e.u32(st)
		r.postOp(e, a, true)
		return st
	}
	e.b = e.b[:start+n]
	if pad := (4 - n%4) % 4; pad > 0 {
		e.b = append(e.b, make([]byte, pad)...)
	}
	binary.BigEndian.PutUint32(e.b[head:], uint32(n))
	if off+uint64(n) >= a.Size {
		binary.BigEndian.PutUint32(e.b[head+4:], 1)
	}
	binary.BigEndian.PutUint32(e.b[head+8:], uint32(n))
	return nfsOK
}

func write(r *request, e *encoder) uint32 {
	d := r.args()
	fh, off, count, stable := d.opaque(fhMax), d.u64(), d.u32(), d.u32()
	data := d.opaque(maxIO)
	if d.err != nil || stable > fileSync {
		return statusGarbage
	}
	if int(count) < len(data) {
		data = data[:count]
	}
	verf := r.s.Verifier() // before the write: a loss after it changes COMMIT's
	a, st := r.file(fh)
	if st == nfsOK {
		st = r.regular(a, filesys.MayWrite)
	}
	n := 0
	if st == nfsOK {
		var err error
		n, err = r.fs.Write(r.ctx(), a.Ino, a.Gen, data, off, false)
		st = r.status("write", err)
	}
	if st == nfsOK && stable != unstable {
		st = r.commit(a.Ino, stable == dataSync)
	}
	e.u32(st)
	r.wcc(e, a.Ino)
	if st == nfsOK {
		e.u32(uint32(n))
		e.u32(stable)
		e.u64(verf)
	}
	return st
}

// commit makes ino's data durable: a close (the next file version, on a
// volume that keeps them) and an fsync. A failure means acknowledged
// unstable data may be lost: the verifier changes.
func (r *request) commit(ino uint64, dataOnly bool) uint32 {
	err := r.fs.Flush(r.ctx(), ino)
	r.s.m.durableWait()
	if serr := r.fs.Fsync(r.ctx(), ino, dataOnly); err == nil {
		err = serr
	}
	if err != nil {
		if !errors.Is(err, filesys.ErrWouldBlock) { // suspended: nothing new lost
			r.s.dataLost(fmt.Errorf("inode %d: %w", ino, err))
		}
		return r.status("commit", err)
	}
	return nfsOK
}

func commit(r *request, e *encoder) uint32 {
	d := r.args()
	fh := d.opaque(fhMax)
	d.u64() // offset and count: the whole file is made durable
	d.u32()
	if d.err != nil {
		return statusGarbage
	}
	a, st := r.file(fh)
	if st == nfsOK && !r.s.opts.ReadOnly {
		st = r.commit(a.Ino, false)
	}
	e.u32(st)
	r.wcc(e, a.Ino)
	if st == nfsOK {
		e.u64(r.s.Verifier()) // after the sync: any loss before it shows
	}
	return st
}

// createHow of CREATE.
const (
	createUnchecked = 0
	createGuarded   = 1
	createExclusive = 2
)

func create(r *request, e *encoder) uint32 {
	d := r.args()
	fh, name, how := d.opaque(fhMax), d.str(maxName), d.u32()
	var s sattr
	var verf []byte
	switch how {
	case createUnchecked, createGuarded:
		s = d.sattr()
	case createExclusive:
		verf = d.fixed(8)
	default:
		return statusGarbage
	}
	if d.err != nil {
		return statusGarbage
	}
	dir, st := r.dir(fh, filesys.MayWrite|filesys.MayExec)
	var a filesys.Attr
	if st == nfsOK {
		a, st = r.create(dir, name, how, s, verf)
	}
	return r.made(e, dir, a, st)
}

// create makes file name in dir as CREATE's how says.
func (r *request) create(dir filesys.Attr, name string, how uint32, s sattr, verf []byte) (filesys.Attr, uint32) {
	ctx := r.ctx()
	mode := s.mode(0o644)
	if how == createUnchecked {
		// An existing file is kept; only a size (O_TRUNC) applies to it.
		if a, err := r.fs.Lookup(ctx, dir.Ino, name); err == nil {
			if !isReg(a) {
				return a, nfsErrExist
			}
			if s.set.Size != nil {
				if st := r.setattr(a, filesys.SetAttr{Size: s.set.Size}); st != nfsOK {
					return a, st
				}
				a, _ = r.fs.Getattr(ctx, a.Ino)
			}
			return a, nfsOK
		}
	}
	a, err := r.fs.Create(ctx, dir.Ino, name, mode, r.c, true)
	if how == createExclusive {
		// The verifier goes in the times (as knfsd does), so that a resent
		// CREATE finds its own file; the client sets the real times next.
		at := int64(binary.BigEndian.Uint32(verf))
		mt := int64(binary.BigEndian.Uint32(verf[4:]))
		if errors.Is(err, filesys.ErrExists) {
			if a, lerr := r.fs.Lookup(ctx, dir.Ino, name); lerr == nil && isReg(a) && a.Atime.Unix() == at && a.Mtime.Unix() == mt {
				return a, nfsOK
			}
			return a, nfsErrExist
		}
		if err == nil {
			atime, mtime := unixTime(at), unixTime(mt)
			a, err = r.fs.Setattr(ctx, a.Ino, filesys.SetAttr{Atime: &atime, Mtime: &mtime})
		}
	}
	if err != nil {
		return a, r.status("create", err)
	}
	if st := r.applyOwner(&a, s); st != nfsOK {
		return a, st
	}
	if s.set.Size != nil && *s.set.Size != 0 {
		if st := r.setattr(a, filesys.SetAttr{Size: s.set.Size}); st != nfsOK {
			return a, st
		}
	}
	return a, r.durable("create")
}

// applyOwner applies the owner and group a create's sattr asks for, if
// they differ from the ones the new node took from the caller.
func (r *request) applyOwner(a *filesys.Attr, s sattr) uint32 {
	var set filesys.SetAttr
	if s.set.Uid != nil && *s.set.Uid != a.Uid {
		set.Uid = s.set.Uid
	}
	if s.set.Gid != nil && *s.set.Gid != a.Gid {
		set.Gid = s.set.Gid
	}
	if set.Uid == nil && set.Gid == nil {
		return nfsOK
	}
	set, err := r.c.CheckSetattr(*a, set)
	if err == nil {
		*a, err = r.fs.Setattr(r.ctx(), a.Ino, set)
	}
	return r.status("setattr", err)
}

// made encodes the reply of CREATE, MKDIR, SYMLINK and MKNOD.
func (r *request) made(e *encoder, dir, a filesys.Attr, st uint32) uint32 {
	e.u32(st)
	if st == nfsOK {
		r.postFH(e, a)
		r.postOpOf(e, a.Ino)
	}
	r.wcc(e, dir.Ino)
	return st
}

func mkdir(r *request, e *encoder) uint32 {
	d := r.args()
	fh, name, s := d.opaque(fhMax), d.str(maxName), d.sattr()
	if d.err != nil {
		return statusGarbage
	}
	dir, st := r.dir(fh, filesys.MayWrite|filesys.MayExec)
	var a filesys.Attr
	if st == nfsOK {
		a, st = r.makeNode("mkdir", s, func() (filesys.Attr, error) {
			return r.fs.Mkdir(r.ctx(), dir.Ino, name, s.mode(0o755), r.c)
		})
	}
	return r.made(e, dir, a, st)
}

// makeNode runs mk (a MKDIR, SYMLINK or MKNOD), applies the owner s
// asks for and waits until it is durable.
func (r *request) makeNode(op string, s sattr, mk func() (filesys.Attr, error)) (filesys.Attr, uint32) {
	a, err := mk()
	if err != nil {
		return a, r.status(op, err)
	}
	if st := r.applyOwner(&a, s); st != nfsOK {
		return a, st
	}
	return a, r.durable(op)
}

func symlink(r *request, e *encoder) uint32 {
	d := r.args()
	fh, name, s, target := d.opaque(fhMax), d.str(maxName), d.sattr(), d.str(maxPath)
	if d.err != nil {
		return statusGarbage
	}
	dir, st := r.dir(fh, filesys.MayWrite|filesys.MayExec)
	var a filesys.Attr
	if st == nfsOK {
		a, st = r.makeNode("symlink", s, func() (filesys.Attr, error) {
			return r.fs.Symlink(r.ctx(), dir.Ino, name, target, r.c)
		})
	}
	return r.made(e, dir, a, st)
}

func mknod(r *request, e *encoder) uint32 {
	d := r.args()
	fh, name, typ := d.opaque(fhMax), d.str(maxName), d.u32()
	var s sattr
	var rdev uint32
	var mode uint32
	switch typ {
	case nf3Chr, nf3Blk:
		s = d.sattr()
		major, minor := d.u32(), d.u32()
		rdev = uint32(unix.Mkdev(major, minor))
		mode = syscall.S_IFCHR
		if typ == nf3Blk {
			mode = syscall.S_IFBLK
		}
	case nf3Sock, nf3FIFO:
		s = d.sattr()
		mode = syscall.S_IFSOCK
		if typ == nf3FIFO {
			mode = syscall.S_IFIFO
		}
	case nf3Reg, nf3Dir, nf3Lnk:
		if d.err != nil {
			return statusGarbage
		}
		e.u32(nfsErrBadType)
		r.wcc(e, 0)
		return nfsErrBadType
	default:
		return statusGarbage
	}
	if d.err != nil {
		return statusGarbage
	}
	dir, st := r.dir(fh, filesys.MayWrite|filesys.MayExec)
	if st == nfsOK && (typ == nf3Chr || typ == nf3Blk) && r.c.Uid != 0 {
		st = nfsErrPerm // CAP_MKNOD
	}
	var a filesys.Attr
	if st == nfsOK {
		a, st = r.makeNode("mknod", s, func() (filesys.Attr, error) {
			return r.fs.Mknod(r.ctx(), dir.Ino, name, mode|s.mode(0o644), rdev, r.c)
		})
	}
	return r.made(e, dir, a, st)
}

// mayRemove checks that the caller may remove name from dir (sticky
// directories) and returns what name is.
func (r *request) mayRemove(dir filesys.Attr, name string) (filesys.Attr, uint32) {
	victim, err := r.fs.Lookup(r.ctx(), dir.Ino, name)
	if err != nil {
		return victim, r.status("lookup", err)
	}
	return victim, r.status("access", r.c.MayDelete(dir, victim))
}

func remove(r *request, e *encoder) uint32 { return removeName(r, e, false) }
func rmdir(r *request, e *encoder) uint32  { return removeName(r, e, true) }

func removeName(r *request, e *encoder, isDir bool) uint32 {
	d := r.args()
	fh, name := d.opaque(fhMax), d.str(maxName)
	if d.err != nil {
		return statusGarbage
	}
	dir, st := r.dir(fh, filesys.MayWrite|filesys.MayExec)
	if st == nfsOK && (name == "." || name == "..") {
		st = nfsErrInval
	}
	if st == nfsOK {
		_, st = r.mayRemove(dir, name)
	}
	if st == nfsOK {
		var err error
		if isDir {
			err = r.fs.Rmdir(r.ctx(), dir.Ino, name)
		} else {
			err = r.fs.Unlink(r.ctx(), dir.Ino, name)
		}
		if st = r.status("remove", err); st == nfsOK {
			st = r.durable("remove")
		}
	}
	e.u32(st)
	r.wcc(e, dir.Ino)
	return st
}

func rename(r *request, e *encoder) uint32 {
	d := r.args()
	ffh, fname, tfh, tname := d.opaque(fhMax), d.str(maxName), d.opaque(fhMax), d.str(maxName)
	if d.err != nil {
		return statusGarbage
	}
	from, st := r.dir(ffh, filesys.MayWrite|filesys.MayExec)
	var to filesys.Attr
	if st == nfsOK {
		to, st = r.dir(tfh, filesys.MayWrite|filesys.MayExec)
	}
	for _, n := range []string{fname, tname} {
		if st == nfsOK && (n == "." || n == "..") {
			st = nfsErrInval
		}
	}
	var src filesys.Attr
	if st == nfsOK {
		src, st = r.mayRemove(from, fname)
	}
	if st == nfsOK && isDir(src) && from.Ino != to.Ino {
		// The moved directory's ".." changes: the kernel asks write
		// permission on it.
		st = r.status("access", r.c.CheckAccess(src, filesys.MayWrite))
	}
	if st == nfsOK {
		if _, lerr := r.fs.Lookup(r.ctx(), to.Ino, tname); lerr == nil {
			_, st = r.mayRemove(to, tname)
		}
	}
	if st == nfsOK {
		if st = r.status("rename", r.fs.Rename(r.ctx(), from.Ino, fname, to.Ino, tname, 0)); st == nfsOK {
			st = r.durable("rename")
		}
	}
	e.u32(st)
	r.wcc(e, from.Ino)
	r.wcc(e, to.Ino)
	return st
}

func link(r *request, e *encoder) uint32 {
	d := r.args()
	fh, dfh, name := d.opaque(fhMax), d.opaque(fhMax), d.str(maxName)
	if d.err != nil {
		return statusGarbage
	}
	a, st := r.file(fh)
	var dir filesys.Attr
	if st == nfsOK {
		dir, st = r.dir(dfh, filesys.MayWrite|filesys.MayExec)
	}
	if st == nfsOK && isDir(a) {
		st = nfsErrIsDir
	}
	if st == nfsOK {
		_, err := r.fs.Link(r.ctx(), a.Ino, dir.Ino, name)
		if st = r.status("link", err); st == nfsOK {
			st = r.durable("link")
		}
	}
	e.u32(st)
	r.postOpOf(e, a.Ino)
	r.wcc(e, dir.Ino)
	return st
}

func fsstat(r *request, e *encoder) uint32 {
	fh := r.args().opaque(fhMax)
	if r.args().err != nil {
		return statusGarbage
	}
	a, st := r.file(fh)
	var sf filesys.Statfs
	if st == nfsOK {
		var err error
		sf, err = r.fs.Statfs(r.ctx())
		st = r.status("fsstat", err)
	}
	e.u32(st)
	r.postOp(e, a, a.Ino != 0)
	if st == nfsOK {
		bs := uint64(sf.Bsize)
		e.u64(sf.Blocks * bs)
		e.u64(sf.Bfree * bs)
		e.u64(sf.Bavail * bs)
		e.u64(sf.Files)
		e.u64(sf.Ffree)
		e.u64(sf.Ffree)
		e.u32(0) // invarsec: it changes at any time
	}
	return st
}

// FSINFO properties.
const (
	fsfLink        = 0x01
	fsfSymlink     = 0x02
	fsfHomogeneous = 0x08
	fsfCanSetTime  = 0x10
)

func fsinfo(r *request, e *encoder) uint32 {
	fh := r.args().opaque(fhMax)
	if r.args().err != nil {
		return statusGarbage
	}
	a, st := r.file(fh)
	e.u32(st)
	r.postOp(e, a, a.Ino != 0)
	if st == nfsOK {
		e.u32(maxIO) // rtmax
		e.u32(maxIO) // rtpref
		e.u32(4096)  // rtmult
		e.u32(maxIO) // wtmax
		e.u32(maxIO) // wtpref
		e.u32(4096)  // wtmult
		e.u32(64 << 10)
		e.u64(filesys.FileBytesMax)
		e.u32(0) // time_delta: nanoseconds
		e.u32(1)
		e.u32(fsfLink | fsfSymlink | fsfHomogeneous | fsfCanSetTime)
	}
	return st
}

func pathconf(r *request, e *encoder) uint32 {
	fh := r.args().opaque(fhMax)
	if r.args().err != nil {
		return statusGarbage
	}
	a, st := r.file(fh)
	e.u32(st)
	r.postOp(e, a, a.Ino != 0)
	if st == nfsOK {
		e.u32(filesys.LinksMax)
		e.u32(filesys.NameBytesMax)
		e.boolean(true)  // no_trunc: long names are refused
		e.boolean(true)  // chown_restricted
		e.boolean(false) // case_insensitive
		e.boolean(true)  // case_preserving
	}
	return st
}
