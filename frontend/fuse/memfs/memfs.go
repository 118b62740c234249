// Package memfs is an in-memory file system that implements the FUSE
// adapter's FileSystem (frontend/fuse): one mutex, one map of inodes, file
// content in sparse chunks, directories listed in a stable cookie order,
// and locks local to it (there are no other nodes).
//
// The adapter's tests mount it, and `plumeria bench DIR --floor` serves it
// through the adapter to measure what FUSE itself costs. Change,
// Invalidate, Counts and Locks let a test act as another node would:
// change files behind the kernel's back, then call the invalidator.
package memfs

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plumeria-fs/plumeria/filesys"
)

// FS is the file system. Its methods are those of the adapter's
// FileSystem (see frontend/fuse/fs.go) plus the test hooks; all are safe
// for concurrent use. New makes one holding only the root directory.
type FS struct {
	mu      sync.Mutex
	inodes  map[uint64]*inode
	nextIno uint64
	nextGen uint64
	locks   map[uint64][]Lock // by inode
	inval   func(ino uint64, dir bool, name string)

	waits, interrupted int // Setlk calls that waited, and those ended by ctx
}

type inode struct {
	attr   filesys.Attr // Size and Blocks are derived (stat)
	data   content      // regular files
	target string       // symlinks
	dir    *directory   // directories; nil otherwise
	xattrs map[string][]byte
	opens  int // Opens and Holds not yet released
}

// NameMax is the longest name, in bytes.
const NameMax = 255

// LockWaitMax bounds a Setlk that waits: it then fails with
// filesys.ErrDeadlock, so that a test bug cannot hang the process.
const LockWaitMax = 30 * time.Second

// New returns an empty file system: a root directory, mode 0755, owned by
// uid and gid 0.
func New() *FS {
	f := &FS{inodes: map[uint64]*inode{}, nextIno: filesys.RootIno, locks: map[uint64][]Lock{}}
	root := f.newInode(syscall.S_IFDIR|0o755, filesys.Caller{})
	root.attr.Nlink = 2
	root.dir.parent = filesys.RootIno
	return f
}

func (f *FS) newInode(mode uint32, c filesys.Caller) *inode {
	now := time.Now()
	f.nextGen++
	if mode&syscall.S_IFMT != syscall.S_IFLNK {
		mode &^= c.Umask & 0o777 // no default ACLs here: the umask always applies
	}
	in := &inode{attr: filesys.Attr{
		Ino: f.nextIno, Gen: f.nextGen, Mode: mode, Nlink: 1, Uid: c.Uid, Gid: c.Gid,
		Atime: now, Mtime: now, Ctime: now,
	}, xattrs: map[string][]byte{}}
	if mode&syscall.S_IFMT == syscall.S_IFDIR {
		in.dir = &directory{ents: map[string]entry{}}
	}
	f.inodes[f.nextIno] = in
	f.nextIno++
	return in
}

func (f *FS) get(ino uint64) (*inode, error) {
	in := f.inodes[ino]
	if in == nil {
		return nil, filesys.ErrStale
	}
	return in, nil
}

func (f *FS) getDir(ino uint64) (*inode, error) {
	d, err := f.get(ino)
	if err != nil {
		return nil, err
	}
	if d.dir == nil {
		return nil, filesys.ErrNotDir
	}
	return d, nil
}

func (in *inode) isDir() bool { return in.dir != nil }

func (in *inode) touch() { in.attr.Mtime = time.Now(); in.attr.Ctime = in.attr.Mtime }

func (in *inode) stat() filesys.Attr {
	a := in.attr
	a.Size = in.data.size
	if in.target != "" {
		a.Size = uint64(len(in.target))
	}
	a.Blocks = (in.data.alloc + 511) / 512
	return a
}

func (f *FS) Lookup(_ context.Context, dir uint64, name string) (filesys.Attr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.getDir(dir)
	if err != nil {
		return filesys.Attr{}, err
	}
	if len(name) > NameMax {
		return filesys.Attr{}, filesys.ErrNameTooLong
	}
	e, ok := d.dir.ents[name]
	if !ok {
		return filesys.Attr{}, filesys.ErrNotFound
	}
	return f.inodes[e.ino].stat(), nil
}

func (f *FS) Getattr(_ context.Context, ino uint64) (filesys.Attr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.get(ino)
	if err != nil {
		return filesys.Attr{}, err
	}
	return in.stat(), nil
}

func (f *FS) Setattr(_ context.Context, ino uint64, set filesys.SetAttr) (filesys.Attr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.get(ino)
	if err != nil {
		return filesys.Attr{}, err
	}
	if set.Size != nil {
		if in.isDir() {
			return filesys.Attr{}, filesys.ErrIsDir
		}
		in.data.truncate(*set.Size)
		in.touch()
	}
	if set.Mode != nil {
		in.attr.Mode = in.attr.Mode&syscall.S_IFMT | *set.Mode&0o7777
	}
	if set.Uid != nil {
		in.attr.Uid = *set.Uid
	}
	if set.Gid != nil {
		in.attr.Gid = *set.Gid
	}
	if set.Atime != nil {
		in.attr.Atime = *set.Atime
	}
	if set.Mtime != nil {
		in.attr.Mtime = *set.Mtime
	}
	in.attr.Ctime = time.Now()
	return in.stat(), nil
}

// add links a new inode of mode into dir under name.
func (f *FS) add(dir uint64, name string, mode uint32, c filesys.Caller) (*inode, error) {
	d, err := f.getDir(dir)
	if err != nil {
		return nil, err
	}
	if len(name) > NameMax {
		return nil, filesys.ErrNameTooLong
	}
	if _, ok := d.dir.ents[name]; ok {
		return nil, filesys.ErrExists
	}
	in := f.newInode(mode, c)
	d.dir.link(name, in.attr.Ino)
	if in.isDir() {
		in.attr.Nlink = 2
		in.dir.parent = dir
		d.attr.Nlink++
	}
	d.touch()
	return in, nil
}

func (f *FS) Create(_ context.Context, dir uint64, name string, mode uint32, c filesys.Caller, excl bool) (filesys.Attr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d, err := f.getDir(dir); err == nil && !excl {
		if e, ok := d.dir.ents[name]; ok {
			if in := f.inodes[e.ino]; in.isDir() {
				return filesys.Attr{}, filesys.ErrIsDir
			}
			return f.inodes[e.ino].stat(), nil
		}
	}
	in, err := f.add(dir, name, syscall.S_IFREG|mode&0o7777, c)
	if err != nil {
		return filesys.Attr{}, err
	}
	return in.stat(), nil
}

func (f *FS) Mknod(_ context.Context, dir uint64, name string, mode, rdev uint32, c filesys.Caller) (filesys.Attr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if mode&syscall.S_IFMT == syscall.S_IFDIR {
		return filesys.Attr{}, filesys.ErrInvalid // directories come from Mkdir
	}
	in, err := f.add(dir, name, mode, c)
	if err != nil {
		return filesys.Attr{}, err
	}
	in.attr.Rdev = rdev
	return in.stat(), nil
}

func (f *FS) Mkdir(_ context.Context, dir uint64, name string, mode uint32, c filesys.Caller) (filesys.Attr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.add(dir, name, syscall.S_IFDIR|mode&0o7777, c)
	if err != nil {
		return filesys.Attr{}, err
	}
	return in.stat(), nil
}

func (f *FS) Symlink(_ context.Context, dir uint64, name, target string, c filesys.Caller) (filesys.Attr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.add(dir, name, syscall.S_IFLNK|0o777, c)
	if err != nil {
		return filesys.Attr{}, err
	}
	in.target = target
	return in.stat(), nil
}

func (f *FS) Link(_ context.Context, ino, dir uint64, name string) (filesys.Attr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.get(ino)
	if err != nil {
		return filesys.Attr{}, err
	}
	if in.isDir() {
		return filesys.Attr{}, filesys.ErrNotPermitted
	}
	d, err := f.getDir(dir)
	if err != nil {
		return filesys.Attr{}, err
	}
	if len(name) > NameMax {
		return filesys.Attr{}, filesys.ErrNameTooLong
	}
	if _, ok := d.dir.ents[name]; ok {
		return filesys.Attr{}, filesys.ErrExists
	}
	d.dir.link(name, ino)
	d.touch()
	in.attr.Nlink++
	in.attr.Ctime = time.Now()
	return in.stat(), nil
}

// drop unlinks one name of in and frees it when nothing refers to it.
func (f *FS) drop(in *inode) {
	in.attr.Ctime = time.Now()
	if in.isDir() {
		in.attr.Nlink = 0
	} else {
		in.attr.Nlink--
	}
	f.freeIfUnused(in)
}

// freeIfUnused frees in once it has neither names nor opens.
func (f *FS) freeIfUnused(in *inode) {
	if in.attr.Nlink == 0 && in.opens == 0 {
		delete(f.inodes, in.attr.Ino)
		delete(f.locks, in.attr.Ino)
	}
}

func (f *FS) remove(dir uint64, name string, wantDir bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.getDir(dir)
	if err != nil {
		return err
	}
	e, ok := d.dir.ents[name]
	if !ok {
		return filesys.ErrNotFound
	}
	in := f.inodes[e.ino]
	switch {
	case wantDir && !in.isDir():
		return filesys.ErrNotDir
	case !wantDir && in.isDir():
		return filesys.ErrIsDir
	case wantDir && len(in.dir.ents) > 0:
		return filesys.ErrNotEmpty
	}
	d.dir.unlink(name)
	if wantDir {
		d.attr.Nlink--
	}
	d.touch()
	f.drop(in)
	return nil
}

func (f *FS) Unlink(_ context.Context, dir uint64, name string) error {
	return f.remove(dir, name, false)
}

func (f *FS) Rmdir(_ context.Context, dir uint64, name string) error {
	return f.remove(dir, name, true)
}

func (f *FS) Rename(_ context.Context, dir uint64, name string, newDir uint64, newName string, flags uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rename(dir, name, newDir, newName, flags)
}

func (f *FS) rename(dir uint64, name string, newDir uint64, newName string, flags uint32) error {
	srcIn, err := f.getDir(dir)
	if err != nil {
		return err
	}
	dstIn, err := f.getDir(newDir)
	if err != nil {
		return err
	}
	src, dst := srcIn.dir, dstIn.dir
	if len(newName) > NameMax {
		return filesys.ErrNameTooLong
	}
	e, ok := src.ents[name]
	if !ok {
		return filesys.ErrNotFound
	}
	in := f.inodes[e.ino]
	old, exists := dst.ents[newName]
	if exists && old.ino == e.ino {
		return nil
	}
	switch {
	case flags&filesys.RenameExchange != 0:
		if !exists {
			return filesys.ErrNotFound
		}
		other := f.inodes[old.ino]
		if in.isDir() && f.isAncestor(e.ino, newDir) || other.isDir() && f.isAncestor(old.ino, dir) {
			return filesys.ErrInvalid
		}
		// Each name keeps its place (cookie) in its directory.
		src.ents[name] = entry{ino: old.ino, cookie: e.cookie}
		dst.ents[newName] = entry{ino: e.ino, cookie: old.cookie}
		if in.isDir() {
			in.dir.parent = newDir
		}
		if other.isDir() {
			other.dir.parent = dir
		}
		if in.isDir() != other.isDir() && srcIn != dstIn {
			if in.isDir() {
				srcIn.attr.Nlink--
				dstIn.attr.Nlink++
			} else {
				srcIn.attr.Nlink++
				dstIn.attr.Nlink--
			}
		}
		now := time.Now()
		in.attr.Ctime, other.attr.Ctime = now, now
		srcIn.touch()
		dstIn.touch()
		return nil
	case exists && flags&filesys.RenameNoReplace != 0:
		return filesys.ErrExists
	}
	if in.isDir() && f.isAncestor(e.ino, newDir) {
		return filesys.ErrInvalid
	}
	if exists {
		victim := f.inodes[old.ino]
		switch {
		case victim.isDir() && !in.isDir():
			return filesys.ErrIsDir
		case !victim.isDir() && in.isDir():
			return filesys.ErrNotDir
		case victim.isDir() && len(victim.dir.ents) > 0:
			return filesys.ErrNotEmpty
		}
		dst.unlink(newName)
		if victim.isDir() {
			dstIn.attr.Nlink--
		}
		f.drop(victim)
	}
	src.unlink(name)
	dst.link(newName, e.ino)
	if in.isDir() {
		in.dir.parent = newDir
		srcIn.attr.Nlink--
		dstIn.attr.Nlink++
	}
	in.attr.Ctime = time.Now()
	srcIn.touch()
	dstIn.touch()
	return nil
}

// isAncestor reports whether directory a is dir or one of its ancestors.
func (f *FS) isAncestor(a, dir uint64) bool {
	for {
		if dir == a {
			return true
		}
		d := f.inodes[dir]
		if dir == filesys.RootIno || d == nil || d.dir == nil {
			return false
		}
		dir = d.dir.parent
	}
}

func (f *FS) Readlink(_ context.Context, ino uint64) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.get(ino)
	if err != nil {
		return "", err
	}
	if in.attr.Mode&syscall.S_IFMT != syscall.S_IFLNK {
		return "", filesys.ErrInvalid
	}
	return in.target, nil
}

func (f *FS) Open(_ context.Context, ino, gen uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.get(ino)
	if err != nil {
		return err
	}
	if gen != 0 && in.attr.Gen != gen {
		return filesys.ErrStale
	}
	in.opens++
	return nil
}

func (f *FS) Hold(ino uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if in := f.inodes[ino]; in != nil {
		in.opens++
	}
}

func (f *FS) Unhold(ctx context.Context, ino uint64) { f.Release(ctx, ino) }

func (f *FS) Release(_ context.Context, ino uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in := f.inodes[ino]
	if in == nil {
		return
	}
	in.opens--
	f.freeIfUnused(in)
}

// file returns the file ino of generation gen (0: any) for a read or
// write; f.mu is held.
func (f *FS) file(ino, gen uint64) (*inode, error) {
	in, err := f.get(ino)
	switch {
	case err != nil:
		return nil, err
	case gen != 0 && in.attr.Gen != gen:
		return nil, filesys.ErrStale
	case in.isDir():
		return nil, filesys.ErrIsDir
	}
	return in, nil
}

func (f *FS) Read(_ context.Context, ino, gen uint64, p []byte, off uint64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.file(ino, gen)
	if err != nil {
		return 0, err
	}
	return in.data.read(p, off), nil
}

func (f *FS) Write(_ context.Context, ino, gen uint64, p []byte, off uint64, appendMode bool) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.file(ino, gen)
	if err != nil {
		return 0, err
	}
	if appendMode {
		off = in.data.size
	}
	if off+uint64(len(p)) < off {
		return 0, filesys.ErrInvalid
	}
	in.data.write(p, off)
	in.touch()
	return len(p), nil
}

func (f *FS) Fsync(context.Context, uint64, bool) error { return nil }
func (f *FS) Flush(context.Context, uint64) error       { return nil }

// Fallocate supports mode 0 (extends the size; nothing is allocated
// ahead) and FALLOC_FL_KEEP_SIZE (a no-op); other modes are
// filesys.ErrNotSupported.
func (f *FS) Fallocate(_ context.Context, ino uint64, off, length uint64, mode uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.get(ino)
	if err != nil {
		return err
	}
	switch mode {
	case 0:
	case unix.FALLOC_FL_KEEP_SIZE:
		return nil
	default:
		return filesys.ErrNotSupported
	}
	if end := off + length; end > in.data.size {
		in.data.truncate(end)
		in.attr.Ctime = time.Now()
	}
	return nil
}

func (f *FS) ReadDir(_ context.Context, dir uint64, after uint64, max int) ([]filesys.DirEntry, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.getDir(dir)
	if err != nil {
		return nil, false, err
	}
	slots := d.dir.order
	i := sort.Search(len(slots), func(i int) bool { return slots[i].cookie > after })
	var out []filesys.DirEntry
	for ; i < len(slots); i++ {
		s := slots[i]
		if s.gone {
			continue
		}
		if len(out) == max {
			return out, false, nil
		}
		ino := d.dir.ents[s.name].ino
		out = append(out, filesys.DirEntry{Name: s.name, Ino: ino, Mode: f.inodes[ino].attr.Mode & syscall.S_IFMT, Cookie: s.cookie})
	}
	return out, true, nil
}

// Statfs reports a fixed capacity (4 GiB in 4 KiB blocks, half free, a
// quarter available; 65536 inodes) whatever is stored.
func (f *FS) Statfs(context.Context) (filesys.Statfs, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	const files = 1 << 16
	return filesys.Statfs{Bsize: 4096, Blocks: 1 << 20, Bfree: 1 << 19, Bavail: 1 << 18,
		Files: files, Ffree: uint64(max(0, files-len(f.inodes))), NameLen: NameMax}, nil
}

func (f *FS) Getxattr(_ context.Context, ino uint64, name string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.get(ino)
	if err != nil {
		return nil, err
	}
	v, ok := in.xattrs[name]
	if !ok {
		return nil, filesys.ErrNoAttr
	}
	return slices.Clone(v), nil
}

func (f *FS) Setxattr(_ context.Context, ino uint64, name string, value []byte, flags uint32) error {
	if strings.HasPrefix(name, "system.") {
		// POSIX ACLs need the mode kept in step (filesys/acl.go); not here.
		return fmt.Errorf("%w: %s in memfs", filesys.ErrNotSupported, name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.get(ino)
	if err != nil {
		return err
	}
	_, ok := in.xattrs[name]
	switch {
	case ok && flags&filesys.XattrCreate != 0:
		return filesys.ErrExists
	case !ok && flags&filesys.XattrReplace != 0:
		return filesys.ErrNoAttr
	}
	in.xattrs[name] = slices.Clone(value)
	in.attr.Ctime = time.Now()
	return nil
}

func (f *FS) Listxattr(_ context.Context, ino uint64) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.get(ino)
	if err != nil {
		return nil, err
	}
	var names []string
	for n := range in.xattrs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

func (f *FS) Removexattr(_ context.Context, ino uint64, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.get(ino)
	if err != nil {
		return err
	}
	if _, ok := in.xattrs[name]; !ok {
		return filesys.ErrNoAttr
	}
	delete(in.xattrs, name)
	return nil
}

// Lock is one lock held on a file: a POSIX record lock of Owner over
// [Start, End], or (Flock) a flock of the whole file.
type Lock struct {
	Owner      uint64
	Flock      bool
	Type       int16 // syscall.F_RDLCK or F_WRLCK
	Start, End uint64
	Pid        uint32
}

// conflict returns a lock on ino that keeps owner from taking lk.
func (f *FS) conflict(ino, owner uint64, lk filesys.FileLock, flock bool) (Lock, bool) {
	for _, h := range f.locks[ino] {
		if h.Owner == owner || h.Flock != flock {
			continue
		}
		if h.Type == syscall.F_WRLCK || lk.Type == syscall.F_WRLCK {
			if h.Start <= lk.End && lk.Start <= h.End {
				return h, true
			}
		}
	}
	return Lock{}, false
}

func (f *FS) Getlk(_ context.Context, ino uint64, owner uint64, lk filesys.FileLock) (filesys.FileLock, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h, ok := f.conflict(ino, owner, lk, false); ok {
		return filesys.FileLock{Type: h.Type, Start: h.Start, End: h.End, Pid: h.Pid}, nil
	}
	return filesys.FileLock{Type: syscall.F_UNLCK}, nil
}

// Setlk takes or drops a lock. A POSIX lock replaces the owner's locks in
// its range, splitting them; adjacent locks are not merged.
// A wait gives up after LockWaitMax (filesys.ErrDeadlock).
func (f *FS) Setlk(ctx context.Context, ino uint64, owner uint64, lk filesys.FileLock, flock, wait bool) error {
	deadline := time.Now().Add(LockWaitMax)
	for {
		f.mu.Lock()
		_, busy := f.conflict(ino, owner, lk, flock)
		if lk.Type == syscall.F_UNLCK || !busy {
			var kept []Lock
			for _, h := range f.locks[ino] {
				mine := h.Owner == owner && h.Flock == flock
				if !mine || !flock && (h.End < lk.Start || lk.End < h.Start) {
					kept = append(kept, h)
					continue
				}
				if flock {
					continue
				}
				// Keep the parts of h outside the new range.
				if h.Start < lk.Start {
					l := h
					l.End = lk.Start - 1
					kept = append(kept, l)
				}
				if lk.End < h.End {
					r := h
					r.Start = lk.End + 1
					kept = append(kept, r)
				}
			}
			if lk.Type != syscall.F_UNLCK {
				kept = append(kept, Lock{Owner: owner, Flock: flock, Type: lk.Type, Start: lk.Start, End: lk.End, Pid: lk.Pid})
			}
			if len(kept) == 0 {
				delete(f.locks, ino)
			} else {
				f.locks[ino] = kept
			}
			f.mu.Unlock()
			return nil
		}
		if wait {
			f.waits++
		}
		f.mu.Unlock()
		if !wait {
			return filesys.ErrWouldBlock
		}
		if time.Now().After(deadline) {
			return filesys.ErrDeadlock
		}
		select {
		case <-ctx.Done():
			f.mu.Lock()
			f.interrupted++
			f.mu.Unlock()
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// CacheFor is unbounded: memfs has no leases (it tells the kernel of
// every change through the invalidator).
func (f *FS) CacheFor() time.Duration { return math.MaxInt64 }

func (f *FS) SetInvalidator(fn func(ino uint64, dir bool, name string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inval = fn
}

// Invalidate calls the registered invalidator (if any), as the real file
// system does when another node is about to change something: ino's
// attributes and pages, or with dir its names (name: that one only).
func (f *FS) Invalidate(ino uint64, dir bool, name string) {
	f.mu.Lock()
	fn := f.inval
	f.mu.Unlock()
	if fn != nil {
		fn(ino, dir, name)
	}
}

// Counts are a few of the file system's counters, for tests.
type Counts struct {
	LockWaits   int // Setlk calls that had to wait
	Interrupted int // of those, the ones ended by their context
	Inodes      int // inodes alive (the root included)
}

// Counts returns the counters now.
func (f *FS) Counts() Counts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Counts{LockWaits: f.waits, Interrupted: f.interrupted, Inodes: len(f.inodes)}
}

// Locks returns the locks held on ino.
func (f *FS) Locks(ino uint64) []Lock {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.locks[ino])
}

// State is the file system as Change's function sees it, locked. Changes
// made through it bypass the FileSystem methods: they touch no times
// unless said, and call no invalidator, which is how another node's
// changes look to this one. It is valid only during that function.
type State struct{ f *FS }

// Change runs fn with the file system locked; fn must not call f's
// methods.
func (f *FS) Change(fn func(s *State)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(&State{f: f})
}

// Attr returns inode ino's attributes for the caller to change in place,
// or nil if there is no such inode. Size and Blocks are not kept there:
// they follow the content (WriteAt, Truncate).
func (s *State) Attr(ino uint64) *filesys.Attr {
	in := s.f.inodes[ino]
	if in == nil {
		return nil
	}
	return &in.attr
}

// WriteAt writes p into regular file ino at off, touching no times.
func (s *State) WriteAt(ino uint64, p []byte, off uint64) error {
	in, err := s.f.get(ino)
	if err != nil {
		return err
	}
	if in.isDir() {
		return filesys.ErrIsDir
	}
	in.data.write(p, off)
	return nil
}

// Truncate sets the size of regular file ino, touching no times.
func (s *State) Truncate(ino uint64, size uint64) error {
	in, err := s.f.get(ino)
	if err != nil {
		return err
	}
	if in.isDir() {
		return filesys.ErrIsDir
	}
	in.data.truncate(size)
	return nil
}

// Rename renames as FileSystem.Rename does (flags 0).
func (s *State) Rename(dir uint64, name string, newDir uint64, newName string) error {
	return s.f.rename(dir, name, newDir, newName, 0)
}
