package history

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/plumeria-fs/plumeria/filesys"
)

// timeView is the live file system as it was at a time (MNT/.plumeria/at/T
// on a volume that keeps file versions): each directory has the names it
// had then (filesys.NamesAt, from its name log), and each regular file
// reads as its newest version closed at or before then
// (filesys.VersionAt), also files deleted or renamed since. Its inode
// numbers are the live ones; which file a number meant then (its
// generation) is remembered as names are looked up.
//
// What it cannot show: a symlink, device or fifo removed since (their
// contents are not kept), a file's xattrs as they were (they are the live
// file's, if it is the same file), a file that existed at the time but was
// not closed by then (it shows empty).
//
// Permissions: an old version is readable by whom its permissions as they
// were and as they are now both allow: for a file that still exists the
// permission bits shown are those of both, and an owner or group that
// changed since drops that class's bits.
type timeView struct {
	live  *filesys.FS
	at    time.Time
	fixed bool // at is in the past: what the view shows never changes

	mu    sync.Mutex
	known map[uint64]viewIno    // inode numbers shown: what they were at `at`
	names map[viewIno]dirNames  // directories' names (fixed views only)
	vers  map[viewIno]versionAt // files' versions (fixed views only)
}

type dirNames struct {
	names []filesys.NameAt
	nlog  uint64 // the directory's name log length when they were read
}

type versionAt struct {
	v  filesys.Version
	ok bool
}

type viewIno struct {
	ino, gen uint64 // gen 0: the inode there now
	typ      uint8
}

// namesCacheMax bounds the directories whose names a view keeps.
const namesCacheMax = 256

func newTimeView(live *filesys.FS, at time.Time) *timeView {
	return &timeView{live: live, at: at, fixed: at.Before(time.Now()),
		known: map[uint64]viewIno{filesys.RootIno: {ino: filesys.RootIno, typ: syscall.S_IFDIR >> 12}},
		names: map[viewIno]dirNames{}, vers: map[viewIno]versionAt{}}
}

// version returns file vi's newest version closed at or before v.at.
func (v *timeView) version(ctx context.Context, vi viewIno) (filesys.Version, bool, error) {
	v.mu.Lock()
	c, ok := v.vers[vi]
	v.mu.Unlock()
	if ok {
		return c.v, c.ok, nil
	}
	ver, found, err := v.live.VersionAt(ctx, vi.ino, vi.gen, v.at)
	if err != nil {
		return filesys.Version{}, false, err
	}
	if v.fixed {
		v.mu.Lock()
		if len(v.vers) >= versCacheMax {
			clear(v.vers)
		}
		v.vers[vi] = versionAt{ver, found}
		v.mu.Unlock()
	}
	return ver, found, nil
}

// versCacheMax bounds the files whose version a view keeps.
const versCacheMax = 4096

func (v *timeView) get(ino uint64) (viewIno, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	vi, ok := v.known[ino]
	if !ok {
		return viewIno{}, filesys.ErrStale
	}
	return vi, nil
}

func (v *timeView) learn(vi viewIno) {
	v.mu.Lock()
	v.known[vi.ino] = vi
	v.mu.Unlock()
}

// current returns the live inode's attributes if it is still the file vi
// names (ok false: deleted, or its number reused).
func (v *timeView) current(ctx context.Context, vi viewIno) (filesys.Attr, bool, error) {
	a, err := v.live.Getattr(ctx, vi.ino)
	switch {
	case errors.Is(err, filesys.ErrNotFound) || errors.Is(err, filesys.ErrStale):
		return filesys.Attr{}, false, nil
	case err != nil:
		return filesys.Attr{}, false, err
	}
	return a, vi.gen == 0 || a.Gen == vi.gen, nil
}

// dirNames returns directory vi's names at v.at. An entry of Gen 0 is the
// file there when they were read: nlog tells whether that is still so.
func (v *timeView) dirNames(ctx context.Context, vi viewIno) (dirNames, error) {
	if vi.typ != syscall.S_IFDIR>>12 {
		return dirNames{}, filesys.ErrNotDir
	}
	v.mu.Lock()
	dn, ok := v.names[vi]
	v.mu.Unlock()
	if ok {
		return dn, nil
	}
	gen := vi.gen
	if gen == 0 { // the root
		a, err := v.live.Getattr(ctx, vi.ino)
		if err != nil {
			return dirNames{}, err
		}
		gen = a.Gen
	}
	ns, nlog, err := v.live.NamesAt(ctx, vi.ino, gen, v.at)
	if err != nil {
		return dirNames{}, err
	}
	dn = dirNames{ns, nlog}
	if v.fixed {
		v.mu.Lock()
		if len(v.names) >= namesCacheMax {
			clear(v.names)
		}
		v.names[vi] = dn
		v.mu.Unlock()
	}
	return dn, nil
}

// attr returns what vi was at v.at.
func (v *timeView) attr(ctx context.Context, vi viewIno) (filesys.Attr, error) {
	cur, same, err := v.current(ctx, vi)
	if err != nil {
		return filesys.Attr{}, err
	}
	switch uint32(vi.typ) << 12 {
	case syscall.S_IFREG:
		ver, ok, err := v.version(ctx, vi)
		if err != nil {
			return filesys.Attr{}, err
		}
		var a filesys.Attr
		switch {
		case ok:
			a = ver.Attr
		case same: // not closed by then: empty
			a = cur
			a.Size, a.Blocks = 0, 0
		default:
			a = filesys.Attr{Ino: vi.ino, Gen: vi.gen, Mode: syscall.S_IFREG | 0o444, Nlink: 1}
		}
		if same && ok {
			a.Mode = a.Mode&^0o7777 | allowedNow(a, cur)
		}
		a.Nlink = 1
		return a, nil
	case syscall.S_IFDIR:
		if same {
			return cur, nil
		}
		return filesys.Attr{Ino: vi.ino, Gen: vi.gen, Mode: syscall.S_IFDIR | 0o555, Nlink: 2,
			Atime: v.at, Mtime: v.at, Ctime: v.at}, nil
	}
	if same {
		return cur, nil
	}
	return filesys.Attr{}, filesys.ErrNotFound // a removed symlink, device or fifo: not kept
}

// allowedNow returns the permission bits of then that now also allows.
func allowedNow(then, now filesys.Attr) uint32 {
	perm := then.Mode & now.Mode & 0o777
	if then.Uid != now.Uid {
		perm &^= 0o700
	}
	if then.Gid != now.Gid {
		perm &^= 0o070
	}
	return perm
}

func (v *timeView) Lookup(ctx context.Context, dir uint64, name string) (filesys.Attr, error) {
	dvi, err := v.get(dir)
	if err != nil {
		return filesys.Attr{}, err
	}
	for try := 0; ; try++ {
		dn, err := v.dirNames(ctx, dvi)
		if err != nil {
			return filesys.Attr{}, err
		}
		i, found := slices.BinarySearchFunc(dn.names, name, func(n filesys.NameAt, name string) int { return strings.Compare(n.Name, name) })
		if !found {
			return filesys.Attr{}, filesys.ErrNotFound
		}
		n := dn.names[i]
		vi := viewIno{ino: n.Ino, gen: n.Gen, typ: n.Type}
		if vi.gen == 0 {
			// The file there when the names were read: which one it is
			// (its generation) is what the inode has now if the
			// directory's names did not change since (every change of
			// them lengthens its name log).
			a, aerr := v.live.Getattr(ctx, vi.ino)
			nlog, err := v.live.NameLogLen(ctx, dvi.ino)
			if err != nil {
				return filesys.Attr{}, err
			}
			if aerr != nil || nlog != dn.nlog {
				if try < 3 {
					v.forgetNames(dvi) // changed since: read the names again
					continue
				}
				return filesys.Attr{}, errors.Join(aerr, filesys.ErrNotFound)
			}
			vi.gen = a.Gen
		}
		a, err := v.attr(ctx, vi)
		if err != nil {
			return filesys.Attr{}, err
		}
		v.learn(vi)
		return a, nil
	}
}

func (v *timeView) forgetNames(vi viewIno) {
	v.mu.Lock()
	delete(v.names, vi)
	v.mu.Unlock()
}

func (v *timeView) Getattr(ctx context.Context, ino uint64) (filesys.Attr, error) {
	vi, err := v.get(ino)
	if err != nil {
		return filesys.Attr{}, err
	}
	return v.attr(ctx, vi)
}

func (v *timeView) ReadDir(ctx context.Context, dir uint64, after uint64, max int) ([]filesys.DirEntry, bool, error) {
	dvi, err := v.get(dir)
	if err != nil {
		return nil, false, err
	}
	dn, err := v.dirNames(ctx, dvi)
	if err != nil {
		return nil, false, err
	}
	ns := dn.names
	var ents []filesys.DirEntry
	i := int(after)
	for ; i < len(ns) && len(ents) < max; i++ {
		n := ns[i]
		if t := uint32(n.Type) << 12; n.Gen != 0 && t != syscall.S_IFREG && t != syscall.S_IFDIR {
			continue // removed since and not kept
		}
		ents = append(ents, filesys.DirEntry{Name: n.Name, Ino: n.Ino, Mode: uint32(n.Type) << 12, Cookie: uint64(i + 1)})
	}
	return ents, i >= len(ns), nil
}

func (v *timeView) Readlink(ctx context.Context, ino uint64) (string, error) {
	vi, err := v.get(ino)
	if err != nil {
		return "", err
	}
	if _, same, err := v.current(ctx, vi); err != nil || !same {
		return "", errors.Join(err, filesys.ErrNotFound)
	}
	return v.live.Readlink(ctx, ino)
}

func (v *timeView) Read(ctx context.Context, ino, gen uint64, p []byte, off uint64) (int, error) {
	vi, err := v.get(ino)
	if err != nil {
		return 0, err
	}
	if uint32(vi.typ)<<12 != syscall.S_IFREG {
		return 0, filesys.ErrIsDir
	}
	ver, ok, err := v.version(ctx, vi)
	if err != nil || !ok {
		return 0, err
	}
	return v.live.ReadVersion(ctx, vi.ino, ver, p, off)
}

func (v *timeView) Getxattr(ctx context.Context, ino uint64, name string) ([]byte, error) {
	vi, err := v.get(ino)
	if err != nil {
		return nil, err
	}
	if _, same, err := v.current(ctx, vi); err != nil || !same {
		return nil, errors.Join(err, filesys.ErrNoAttr)
	}
	return v.live.Getxattr(ctx, ino, name)
}

func (v *timeView) Listxattr(ctx context.Context, ino uint64) ([]string, error) {
	vi, err := v.get(ino)
	if err != nil {
		return nil, err
	}
	if _, same, err := v.current(ctx, vi); err != nil || !same {
		return nil, err
	}
	return v.live.Listxattr(ctx, ino)
}

// Nothing under a view is opened, held or locked in the live file system:
// what it shows is immutable (versions), or read fresh at each call.
func (v *timeView) Open(ctx context.Context, ino, gen uint64) error { _, err := v.get(ino); return err }
func (v *timeView) Hold(ino uint64)                                 {}
func (v *timeView) Unhold(ctx context.Context, ino uint64)          {}
func (v *timeView) Release(ctx context.Context, ino uint64)         {}
func (v *timeView) Fsync(ctx context.Context, ino uint64, dataOnly bool) error {
	return nil
}
func (v *timeView) Flush(ctx context.Context, ino uint64) error { return nil }
func (v *timeView) Getlk(ctx context.Context, ino uint64, owner uint64, lk filesys.FileLock) (filesys.FileLock, error) {
	return filesys.FileLock{Type: syscall.F_UNLCK}, nil
}
func (v *timeView) Setlk(ctx context.Context, ino uint64, owner uint64, lk filesys.FileLock, flock, wait bool) error {
	if lk.Type == syscall.F_UNLCK {
		return nil
	}
	return filesys.ErrNotSupported
}
