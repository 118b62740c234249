package fuse

import (
	"context"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plumeria-fs/plumeria/filesys"
)

// memFS is an in-memory FileSystem for the tests: one mutex, one map of
// inodes. Locks are local to it (no other nodes).
type memFS struct {
	mu      sync.Mutex
	inodes  map[uint64]*memInode
	nextIno uint64
	nextGen uint64
	locks   map[uint64][]memLock // by inode
	inval   func(ino uint64, dir bool, name string)

	waits, interrupted int // Setlk calls that waited, and those ended by ctx
}

type memInode struct {
	attr   filesys.Attr
	data   []byte
	target string
	ents   map[string]memEnt // directories
	cookie uint64            // last cookie given in this directory
	xattrs map[string][]byte
	opens  int
}

type memEnt struct {
	ino, cookie uint64
}

type memLock struct {
	owner      uint64
	flock      bool
	typ        int16
	start, end uint64
	pid        uint32
}

var _ FileSystem = (*memFS)(nil)

const memNameMax = 255

const memLockWaitMax = 30 * time.Second

func newMemFS() *memFS {
	f := &memFS{inodes: map[uint64]*memInode{}, nextIno: filesys.RootIno, locks: map[uint64][]memLock{}}
	root := f.newInode(syscall.S_IFDIR|0o755, filesys.Caller{})
	root.attr.Nlink = 2
	return f
}

func (f *memFS) newInode(mode uint32, c filesys.Caller) *memInode {
	now := time.Now()
	f.nextGen++
	in := &memInode{attr: filesys.Attr{
		Ino: f.nextIno, Gen: f.nextGen, Mode: mode, Nlink: 1, Uid: c.Uid, Gid: c.Gid,
		Atime: now, Mtime: now, Ctime: now,
	}, xattrs: map[string][]byte{}}
	if mode&syscall.S_IFMT == syscall.S_IFDIR {
		in.ents = map[string]memEnt{}
	}
	f.inodes[f.nextIno] = in
	f.nextIno++
	return in
}

func (f *memFS) get(ino uint64) (*memInode, error) {
	in := f.inodes[ino]
	if in == nil {
		return nil, filesys.ErrStale
	}
	return in, nil
}

func (f *memFS) dir(ino uint64) (*memInode, error) {
	d, err := f.get(ino)
	if err != nil {
		return nil, err
	}
	if d.ents == nil {
		return nil, filesys.ErrNotDir
	}
	return d, nil
}

func (in *memInode) isDir() bool { return in.ents != nil }

func (in *memInode) touch() { in.attr.Mtime = time.Now(); in.attr.Ctime = in.attr.Mtime }

func (in *memInode) stat() filesys.Attr {
	a := in.attr
	a.Size = uint64(len(in.data))
	if in.target != "" {
		a.Size = uint64(len(in.target))
	}
	a.Blocks = (uint64(len(in.data)) + 511) / 512
	return a
}

func (f *memFS) Lookup(_ context.Context, dir uint64, name string) (filesys.Attr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.dir(dir)
	if err != nil {
		return filesys.Attr{}, err
	}
	if len(name) > memNameMax {
		return filesys.Attr{}, filesys.ErrNameTooLong
	}
	e, ok := d.ents[name]
	if !ok {
		return filesys.Attr{}, filesys.ErrNotFound
	}
	return f.inodes[e.ino].stat(), nil
}

func (f *memFS) Getattr(_ context.Context, ino uint64) (filesys.Attr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.get(ino)
	if err != nil {
		return filesys.Attr{}, err
	}
	return in.stat(), nil
}

func (f *memFS) Setattr(_ context.Context, ino uint64, set filesys.SetAttr) (filesys.Attr, error) {
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
		size := int(*set.Size)
		if size <= len(in.data) {
			in.data = in.data[:size]
		} else {
			in.data = append(in.data, make([]byte, size-len(in.data))...)
		}
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
func (f *memFS) add(dir uint64, name string, mode uint32, c filesys.Caller) (*memInode, error) {
	d, err := f.dir(dir)
	if err != nil {
		return nil, err
	}
	if len(name) > memNameMax {
		return nil, filesys.ErrNameTooLong
	}
	if _, ok := d.ents[name]; ok {
		return nil, filesys.ErrExists
	}
	in := f.newInode(mode, c)
	d.cookie++
	d.ents[name] = memEnt{ino: in.attr.Ino, cookie: d.cookie}
	if in.isDir() {
		in.attr.Nlink = 2
		d.attr.Nlink++
	}
	d.touch()
	return in, nil
}

func (f *memFS) Create(_ context.Context, dir uint64, name string, mode uint32, c filesys.Caller, excl bool) (filesys.Attr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d, err := f.dir(dir); err == nil && !excl {
		if e, ok := d.ents[name]; ok {
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

func (f *memFS) Mknod(_ context.Context, dir uint64, name string, mode, rdev uint32, c filesys.Caller) (filesys.Attr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.add(dir, name, mode, c)
	if err != nil {
		return filesys.Attr{}, err
	}
	in.attr.Rdev = rdev
	return in.stat(), nil
}

func (f *memFS) Mkdir(_ context.Context, dir uint64, name string, mode uint32, c filesys.Caller) (filesys.Attr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.add(dir, name, syscall.S_IFDIR|mode&0o7777, c)
	if err != nil {
		return filesys.Attr{}, err
	}
	return in.stat(), nil
}

func (f *memFS) Symlink(_ context.Context, dir uint64, name, target string, c filesys.Caller) (filesys.Attr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.add(dir, name, syscall.S_IFLNK|0o777, c)
	if err != nil {
		return filesys.Attr{}, err
	}
	in.target = target
	return in.stat(), nil
}

func (f *memFS) Link(_ context.Context, ino, dir uint64, name string) (filesys.Attr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.get(ino)
	if err != nil {
		return filesys.Attr{}, err
	}
	if in.isDir() {
		return filesys.Attr{}, filesys.ErrNotPermitted
	}
	d, err := f.dir(dir)
	if err != nil {
		return filesys.Attr{}, err
	}
	if len(name) > memNameMax {
		return filesys.Attr{}, filesys.ErrNameTooLong
	}
	if _, ok := d.ents[name]; ok {
		return filesys.Attr{}, filesys.ErrExists
	}
	d.cookie++
	d.ents[name] = memEnt{ino: ino, cookie: d.cookie}
	d.touch()
	in.attr.Nlink++
	in.attr.Ctime = time.Now()
	return in.stat(), nil
}

// drop unlinks one name of in and frees it when nothing refers to it.
func (f *memFS) drop(in *memInode) {
	in.attr.Ctime = time.Now()
	if in.isDir() {
		in.attr.Nlink = 0
	} else {
		in.attr.Nlink--
	}
	if in.attr.Nlink == 0 && in.opens == 0 {
		delete(f.inodes, in.attr.Ino)
	}
}

func (f *memFS) remove(dir uint64, name string, wantDir bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.dir(dir)
	if err != nil {
		return err
	}
	e, ok := d.ents[name]
	if !ok {
		return filesys.ErrNotFound
	}
	in := f.inodes[e.ino]
	switch {
	case wantDir && !in.isDir():
		return filesys.ErrNotDir
	case !wantDir && in.isDir():
		return filesys.ErrIsDir
	case wantDir && len(in.ents) > 0:
		return filesys.ErrNotEmpty
	}
	delete(d.ents, name)
	if wantDir {
		d.attr.Nlink--
	}
	d.touch()
	f.drop(in)
	return nil
}

func (f *memFS) Unlink(_ context.Context, dir uint64, name string) error {
	return f.remove(dir, name, false)
}

func (f *memFS) Rmdir(_ context.Context, dir uint64, name string) error {
	return f.remove(dir, name, true)
}

func (f *memFS) Rename(_ context.Context, dir uint64, name string, newDir uint64, newName string, flags uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	src, err := f.dir(dir)
	if err != nil {
		return err
	}
	dst, err := f.dir(newDir)
	if err != nil {
		return err
	}
	if len(newName) > memNameMax {
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
		src.ents[name] = memEnt{ino: old.ino, cookie: e.cookie}
		dst.ents[newName] = memEnt{ino: e.ino, cookie: old.cookie}
		if in.isDir() != other.isDir() && src != dst {
			if in.isDir() {
				src.attr.Nlink--
				dst.attr.Nlink++
			} else {
				src.attr.Nlink++
				dst.attr.Nlink--
			}
		}
		src.touch()
		dst.touch()
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
		case victim.isDir() && len(victim.ents) > 0:
			return filesys.ErrNotEmpty
		}
		if victim.isDir() {
			dst.attr.Nlink--
		}
		f.drop(victim)
	}
	delete(src.ents, name)
	dst.cookie++
	dst.ents[newName] = memEnt{ino: e.ino, cookie: dst.cookie}
	if in.isDir() {
		src.attr.Nlink--
		dst.attr.Nlink++
	}
	in.attr.Ctime = time.Now()
	src.touch()
	dst.touch()
	return nil
}

// isAncestor reports whether a is dir or one of its ancestors.
func (f *memFS) isAncestor(a, dir uint64) bool {
	for {
		if dir == a {
			return true
		}
		if dir == filesys.RootIno {
			return false
		}
		dir = f.parent(dir)
	}
}

func (f *memFS) parent(dir uint64) uint64 {
	for ino, in := range f.inodes {
		for _, e := range in.ents {
			if e.ino == dir {
				return ino
			}
		}
	}
	return filesys.RootIno
}

func (f *memFS) Readlink(_ context.Context, ino uint64) (string, error) {
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

func (f *memFS) Open(_ context.Context, ino, gen uint64) error {
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

func (f *memFS) Hold(ino uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if in := f.inodes[ino]; in != nil {
		in.opens++
	}
}

func (f *memFS) Unhold(ctx context.Context, ino uint64) { f.Release(ctx, ino) }

func (f *memFS) Release(_ context.Context, ino uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in := f.inodes[ino]
	if in == nil {
		return
	}
	in.opens--
	if in.opens == 0 && in.attr.Nlink == 0 {
		delete(f.inodes, ino)
	}
}

func (f *memFS) Read(_ context.Context, ino, gen uint64, p []byte, off uint64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.get(ino)
	if err != nil {
		return 0, err
	}
	if gen != 0 && in.attr.Gen != gen {
		return 0, filesys.ErrStale
	}
	if off >= uint64(len(in.data)) {
		return 0, nil
	}
	return copy(p, in.data[off:]), nil
}

func (f *memFS) Write(_ context.Context, ino, gen uint64, p []byte, off uint64, appendMode bool) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.get(ino)
	if err != nil {
		return 0, err
	}
	if gen != 0 && in.attr.Gen != gen {
		return 0, filesys.ErrStale
	}
	if appendMode {
		off = uint64(len(in.data))
	}
	if end := int(off) + len(p); end > len(in.data) {
		in.data = append(in.data, make([]byte, end-len(in.data))...)
	}
	copy(in.data[off:], p)
	in.touch()
	return len(p), nil
}

func (f *memFS) Fsync(context.Context, uint64, bool) error { return nil }
func (f *memFS) Flush(uint64) error                        { return nil }

func (f *memFS) Fallocate(_ context.Context, ino uint64, off, length uint64, mode uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.get(ino)
	if err != nil {
		return err
	}
	switch mode {
	case 0:
	case unix.FALLOC_FL_KEEP_SIZE:
		return nil // the fake allocates nothing ahead
	default:
		return filesys.ErrNotSupported
	}
	if end := int(off + length); end > len(in.data) {
		in.data = append(in.data, make([]byte, end-len(in.data))...)
	}
	return nil
}

func (f *memFS) ReadDir(_ context.Context, dir uint64, after uint64, max int) ([]filesys.DirEntry, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.dir(dir)
	if err != nil {
		return nil, false, err
	}
	var all []filesys.DirEntry
	for name, e := range d.ents {
		if e.cookie > after {
			all = append(all, filesys.DirEntry{Name: name, Ino: e.ino, Mode: f.inodes[e.ino].attr.Mode & syscall.S_IFMT, Cookie: e.cookie})
		}
	}
	slices.SortFunc(all, func(a, b filesys.DirEntry) int { return int(a.Cookie) - int(b.Cookie) })
	if len(all) > max {
		return all[:max], false, nil
	}
	return all, true, nil
}

func (f *memFS) Statfs(context.Context) (filesys.Statfs, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return filesys.Statfs{Bsize: 4096, Blocks: 1 << 20, Bfree: 1 << 19, Bavail: 1 << 18,
		Files: 1 << 16, Ffree: 1<<16 - uint64(len(f.inodes)), NameLen: memNameMax}, nil
}

func (f *memFS) Getxattr(_ context.Context, ino uint64, name string) ([]byte, error) {
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

func (f *memFS) Setxattr(_ context.Context, ino uint64, name string, value []byte, flags uint32) error {
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

func (f *memFS) Listxattr(_ context.Context, ino uint64) ([]string, error) {
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

func (f *memFS) Removexattr(_ context.Context, ino uint64, name string) error {
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

// conflict returns a lock on ino that keeps owner from taking lk.
func (f *memFS) conflict(ino, owner uint64, lk filesys.FileLock, flock bool) (memLock, bool) {
	for _, h := range f.locks[ino] {
		if h.owner == owner || h.flock != flock {
			continue
		}
		if h.typ == syscall.F_WRLCK || lk.Type == syscall.F_WRLCK {
			if h.start <= lk.End && lk.Start <= h.end {
				return h, true
			}
		}
	}
	return memLock{}, false
}

func (f *memFS) Getlk(_ context.Context, ino uint64, owner uint64, lk filesys.FileLock) (filesys.FileLock, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h, ok := f.conflict(ino, owner, lk, false); ok {
		return filesys.FileLock{Type: h.typ, Start: h.start, End: h.end, Pid: h.pid}, nil
	}
	return filesys.FileLock{Type: syscall.F_UNLCK}, nil
}

// Setlk takes or drops a lock. A POSIX lock replaces the owner's locks in
// its range, splitting them; adjacent locks are not merged.
// A wait gives up after memLockWaitMax (EDEADLK), so that a test bug
// cannot hang the process.
func (f *memFS) Setlk(ctx context.Context, ino uint64, owner uint64, lk filesys.FileLock, flock, wait bool) error {
	deadline := time.Now().Add(memLockWaitMax)
	for {
		f.mu.Lock()
		_, busy := f.conflict(ino, owner, lk, flock)
		if lk.Type == syscall.F_UNLCK || !busy {
			var kept []memLock
			for _, h := range f.locks[ino] {
				mine := h.owner == owner && h.flock == flock
				if !mine || !flock && (h.end < lk.Start || lk.End < h.start) {
					kept = append(kept, h)
					continue
				}
				if flock {
					continue
				}
				// Keep the parts of h outside the new range.
				if h.start < lk.Start {
					l := h
					l.end = lk.Start - 1
					kept = append(kept, l)
				}
				if lk.End < h.end {
					r := h
					r.start = lk.End + 1
					kept = append(kept, r)
				}
			}
			if lk.Type != syscall.F_UNLCK {
				kept = append(kept, memLock{owner: owner, flock: flock, typ: lk.Type, start: lk.Start, end: lk.End, pid: lk.Pid})
			}
			f.locks[ino] = kept
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

func (f *memFS) SetInvalidator(fn func(ino uint64, dir bool, name string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inval = fn
}

// invalidate calls the registered invalidator, as the real file system
// does when another node changed something.
func (f *memFS) invalidate(ino uint64, dir bool, name string) {
	f.mu.Lock()
	fn := f.inval
	f.mu.Unlock()
	fn(ino, dir, name)
}

func (f *memFS) counts() (waits, interrupted, inodes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waits, f.interrupted, len(f.inodes)
}

// locksOf returns the locks held on ino.
func (f *memFS) locksOf(ino uint64) []memLock {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.locks[ino])
}
