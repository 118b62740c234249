// Package history puts the past of a file system inside its mount: the
// directory .plumeria in the root, reachable by name but never listed (so
// that find, du and backup tools do not wander into it), holds
//
//	snapshots/NAME/...   each snapshot of the volume's file system, read-only
//	at/T                 on a volume that keeps file versions, the file
//	                     system as it was at time T (RFC 3339, or seconds
//	                     since the epoch): each directory's names then, each
//	                     file's newest version closed by then (timeView);
//	                     otherwise a symlink to snapshots/NAME, the newest
//	                     snapshot taken at or before T
//
// FS wraps the live file system and serves the same calls the FUSE
// adapter makes (frontend/fuse.FileSystem), routing each by inode number:
//
//	ino < 1<<32             the live file system, unchanged
//	1<<32 | k, k < 1<<20    .plumeria (1), .plumeria/snapshots (2), .plumeria/at (3)
//	1<<32 | 1<<20 + i       the symlink at/T to the i-th snapshot name linked here
//	(s+2)<<32 | ino         inode ino of the s-th snapshot or view opened here
//
// Live inode numbers stay below layout.InodesMax (2^24), so the ranges never
// meet. Everything under .plumeria is read-only: a change there is
// filesys.ErrReadOnly (EROFS).
package history

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/plumeria-fs/plumeria/filesys"
)

// Name is the name of the history directory in the root.
const Name = ".plumeria"

const (
	liveMax     = 1 << 32
	dotIno      = 1<<32 | 1 // .plumeria
	snapsIno    = 1<<32 | 2 // .plumeria/snapshots
	atIno       = 1<<32 | 3 // .plumeria/at
	linkBase    = 1<<32 | 1<<20
	linksMax    = 1<<32 - 1<<20
	snapsName   = "snapshots"
	atName      = "at"
	snapSlotMax = 1<<31 - 2
)

// Snapshot is one snapshot of the volume: its name and when it was taken
// (zero if unknown: it is not found by time).
type Snapshot struct {
	Name string
	At   time.Time
}

// Snapshots is what FS needs to know about the volume's snapshots.
type Snapshots interface {
	// List returns the volume's snapshots.
	List(ctx context.Context) ([]Snapshot, error)
	// Open opens snapshot name's file system read-only
	// (filesys.Config.ReadOnly); FS calls it for a name List returned.
	// closeFn closes it and what it stands on.
	Open(ctx context.Context, name string) (fs *filesys.FS, closeFn func(context.Context), err error)
}

// FS is the live file system with .plumeria in its root.
type FS struct {
	live    *filesys.FS
	snaps   Snapshots
	started time.Time // the times of the synthetic directories

	mu struct {
		sync.Mutex
		byName map[string]int // opened snapshots: name → slot
		slots  []*opened
		links  map[string]uint64 // snapshot name → its at/T symlink's inode number
		linked []string          // by link number - linkBase
	}
}

type opened struct {
	name  string
	fs    tree
	close func(context.Context)
}

// tree is a read-only file system routed to by slot: a snapshot's
// (*filesys.FS opened read-only) or the live one as it was at a time
// (timeView). Its calls are those of filesys.FS.
type tree interface {
	Lookup(ctx context.Context, dir uint64, name string) (filesys.Attr, error)
	Getattr(ctx context.Context, ino uint64) (filesys.Attr, error)
	ReadDir(ctx context.Context, dir uint64, after uint64, max int) ([]filesys.DirEntry, bool, error)
	Readlink(ctx context.Context, ino uint64) (string, error)
	Open(ctx context.Context, ino, gen uint64) error
	Hold(ino uint64)
	Unhold(ctx context.Context, ino uint64)
	Release(ctx context.Context, ino uint64)
	Read(ctx context.Context, ino, gen uint64, p []byte, off uint64) (int, error)
	Fsync(ctx context.Context, ino uint64, dataOnly bool) error
	Flush(ctx context.Context, ino uint64) error
	Getxattr(ctx context.Context, ino uint64, name string) ([]byte, error)
	Listxattr(ctx context.Context, ino uint64) ([]string, error)
	Getlk(ctx context.Context, ino uint64, owner uint64, lk filesys.FileLock) (filesys.FileLock, error)
	Setlk(ctx context.Context, ino uint64, owner uint64, lk filesys.FileLock, flock, wait bool) error
}

// New wraps live; snaps lists and opens the volume's snapshots.
func New(live *filesys.FS, snaps Snapshots) *FS {
	h := &FS{live: live, snaps: snaps, started: time.Now()}
	h.mu.byName = map[string]int{}
	h.mu.links = map[string]uint64{}
	return h
}

// CloseSnapshots closes the snapshots opened here (at unmount). The live
// file system is its owner's to close.
func (h *FS) CloseSnapshots(ctx context.Context) {
	h.mu.Lock()
	slots := h.mu.slots
	h.mu.slots, h.mu.byName = nil, map[string]int{}
	h.mu.Unlock()
	for _, o := range slots {
		if o != nil {
			o.close(ctx)
		}
	}
}

// route says where ino lives: fs and its own inode number there, or a
// synthetic directory (fs nil).
func (h *FS) route(ino uint64) (tree, uint64, error) {
	if ino < liveMax {
		return h.live, ino, nil
	}
	s := ino>>32 - 2
	if ino>>32 == 1 {
		if ino == dotIno || ino == snapsIno || ino == atIno {
			return nil, ino, nil
		}
		if _, ok := h.linkTarget(ino); ok {
			return nil, ino, nil
		}
		return nil, 0, filesys.ErrStale
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s >= uint64(len(h.mu.slots)) || h.mu.slots[s] == nil {
		return nil, 0, filesys.ErrStale // a snapshot closed since (deleted)
	}
	return h.mu.slots[s].fs, ino & (liveMax - 1), nil
}

// base is the high bits that the file system ino belongs to gives its
// inode numbers as the kernel sees them (0 for the live one): the numbers
// a call returns are in the same file system as the one it was given.
func base(ino uint64) uint64 { return ino &^ (liveMax - 1) }

// slotBase is base for the s-th snapshot opened here.
func slotBase(s int) uint64 { return uint64(s+2) << 32 }

// out maps the inode number fs returned into the kernel's numbers.
func out(b uint64, a filesys.Attr, err error) (filesys.Attr, error) {
	if err == nil {
		a.Ino |= b
	}
	return a, err
}

// synthAttr returns the attributes of a directory or symlink of
// .plumeria (fs nil in route).
func (h *FS) synthAttr(ino uint64) filesys.Attr {
	if target, ok := h.linkTarget(ino); ok {
		return filesys.Attr{Ino: ino, Gen: 1, Mode: syscall.S_IFLNK | 0o777, Nlink: 1, Size: uint64(len(target)),
			Atime: h.started, Mtime: h.started, Ctime: h.started}
	}
	return filesys.Attr{Ino: ino, Gen: 1, Mode: syscall.S_IFDIR | 0o555, Nlink: 2,
		Atime: h.started, Mtime: h.started, Ctime: h.started}
}

// link returns the inode number of the symlink at/T that names snapshot
// name (made once, never reused).
func (h *FS) link(name string) (uint64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ino, ok := h.mu.links[name]; ok {
		return ino, nil
	}
	if len(h.mu.linked) >= linksMax {
		return 0, fmt.Errorf("%w: %d snapshots linked on this node", filesys.ErrNoSpace, len(h.mu.linked))
	}
	ino := linkBase + uint64(len(h.mu.linked))
	h.mu.links[name] = ino
	h.mu.linked = append(h.mu.linked, name)
	return ino, nil
}

// linkTarget returns what symlink ino points to.
func (h *FS) linkTarget(ino uint64) (string, bool) {
	if ino < linkBase || ino >= liveMax<<1 {
		return "", false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	i := ino - linkBase
	if i >= uint64(len(h.mu.linked)) {
		return "", false
	}
	return "../" + snapsName + "/" + h.mu.linked[i], true
}

// ParseTime reads a time as .plumeria/at/T and the CLI take it: RFC 3339
// (2026-11-25T10:00:00Z, fractions and offsets allowed), seconds since
// the epoch (1764064800, fractions allowed), or the @GMT token of Windows'
// Previous Versions and Samba's vfs_shadow_copy2 (@GMT-2026.11.25-10.00.00,
// UTC).
func ParseTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(gmtToken, s); err == nil {
		return t, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && f >= 0 && f < 1<<40 && !strings.ContainsAny(s, "eEnNxXpP") {
		sec, frac := math.Modf(f)
		return time.Unix(int64(sec), int64(frac*1e9)), nil
	}
	return time.Time{}, fmt.Errorf("%w: time %q: give RFC 3339 (2026-11-25T10:00:00Z), seconds since the epoch or @GMT-2026.11.25-10.00.00", filesys.ErrInvalid, s)
}

// gmtToken is the layout of an @GMT token.
const gmtToken = "@GMT-2006.01.02-15.04.05"

// TimeName is the name .plumeria/at lists a snapshot taken at t under:
// t rounded up to the second, in UTC, so that the name resolves to that
// snapshot (or to one taken within the same second after it).
func TimeName(t time.Time) string {
	if r := t.Truncate(time.Second); r.Before(t) {
		t = r.Add(time.Second)
	}
	return t.UTC().Format(time.RFC3339)
}

// at returns the newest of snaps taken at or before t.
func at(snaps []Snapshot, t time.Time) (Snapshot, bool) {
	var best Snapshot
	found := false
	for _, s := range snaps {
		if s.At.IsZero() || s.At.After(t) {
			continue
		}
		if !found || s.At.After(best.At) || s.At.Equal(best.At) && s.Name < best.Name {
			best, found = s, true
		}
	}
	return best, found
}

// snapshot opens (once) snapshot name and returns its slot's file system.
// A snapshot deleted since it was opened here is closed: the kernel's
// references to its inodes get ErrStale.
func (h *FS) snapshot(ctx context.Context, name string) (tree, uint64, error) {
	snaps, err := h.list(ctx)
	if err != nil {
		return nil, 0, err
	}
	if !slices.ContainsFunc(snaps, func(s Snapshot) bool { return s.Name == name }) {
		h.forget(ctx, name)
		return nil, 0, filesys.ErrNotFound
	}
	if fs, b, ok := h.opened(name); ok {
		return fs, b, nil
	}
	sfs, closeFn, err := h.snaps.Open(ctx, name)
	if err != nil {
		return nil, 0, err
	}
	return h.install(ctx, name, sfs, closeFn)
}

// install puts fs in a new slot under name, or returns the one a
// concurrent call installed meanwhile (closing fs).
func (h *FS) install(ctx context.Context, name string, fs tree, closeFn func(context.Context)) (tree, uint64, error) {
	h.mu.Lock()
	s, ok := h.mu.byName[name] // opened meanwhile by another lookup?
	full := !ok && len(h.mu.slots) >= snapSlotMax
	if !ok && !full {
		s = len(h.mu.slots)
		h.mu.byName[name] = s
		h.mu.slots = append(h.mu.slots, &opened{name: name, fs: fs, close: closeFn})
	}
	h.mu.Unlock()
	switch {
	case full:
		closeFn(ctx)
		return nil, 0, fmt.Errorf("%w: %d snapshots opened on this node", filesys.ErrNoSpace, snapSlotMax)
	case ok:
		closeFn(ctx)
		if fs, b, ok := h.opened(name); ok {
			return fs, b, nil
		}
		return nil, 0, filesys.ErrNotFound // deleted meanwhile
	}
	return fs, slotBase(s), nil
}

// opened returns snapshot name's file system and base if it is open here.
func (h *FS) opened(name string) (tree, uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.mu.byName[name]
	if !ok {
		return nil, 0, false
	}
	return h.mu.slots[s].fs, slotBase(s), true
}

// forget closes snapshot name if it is open here.
func (h *FS) forget(ctx context.Context, name string) {
	h.mu.Lock()
	s, ok := h.mu.byName[name]
	var o *opened
	if ok {
		o = h.mu.slots[s]
		h.mu.slots[s] = nil // its number is never reused: stale from now on
		delete(h.mu.byName, name)
	}
	h.mu.Unlock()
	if o != nil {
		o.close(ctx)
	}
}

// Lookup finds name in dir; .plumeria in the root is the history directory.
func (h *FS) Lookup(ctx context.Context, dir uint64, name string) (filesys.Attr, error) {
	if dir == filesys.RootIno && name == Name {
		return h.synthAttr(dotIno), nil
	}
	fs, ino, err := h.route(dir)
	if err != nil {
		return filesys.Attr{}, err
	}
	switch {
	case fs != nil:
		a, err := fs.Lookup(ctx, ino, name)
		return out(base(dir), a, err)
	case ino == dotIno && name == snapsName:
		return h.synthAttr(snapsIno), nil
	case ino == dotIno && name == atName:
		return h.synthAttr(atIno), nil
	case ino == atIno && h.live.KeepsVersions():
		t, err := ParseTime(name)
		if err != nil {
			return filesys.Attr{}, err
		}
		if c := h.live.Created(); t.Before(c) {
			return filesys.Attr{}, fmt.Errorf("%w: %s is before the file system was made (%s)", filesys.ErrInvalid, name, c.UTC().Format(time.RFC3339))
		}
		fs, b, err := h.view(ctx, t)
		if err != nil {
			return filesys.Attr{}, err
		}
		a, err := fs.Getattr(ctx, filesys.RootIno)
		return out(b, a, err)
	case ino == atIno:
		t, err := ParseTime(name)
		if err != nil {
			return filesys.Attr{}, err
		}
		snaps, err := h.list(ctx)
		if err != nil {
			return filesys.Attr{}, err
		}
		s, ok := at(snaps, t)
		if !ok {
			return filesys.Attr{}, filesys.ErrNotFound // no snapshot that old
		}
		l, err := h.link(s.Name)
		if err != nil {
			return filesys.Attr{}, err
		}
		return h.synthAttr(l), nil
	case ino >= linkBase:
		return filesys.Attr{}, filesys.ErrNotDir
	case ino == snapsIno:
		fs, b, err := h.snapshot(ctx, name)
		if err != nil {
			return filesys.Attr{}, err
		}
		a, err := fs.Getattr(ctx, filesys.RootIno)
		return out(b, a, err)
	}
	return filesys.Attr{}, filesys.ErrNotFound
}

// Getattr returns ino's attributes.
func (h *FS) Getattr(ctx context.Context, ino uint64) (filesys.Attr, error) {
	fs, in, err := h.route(ino)
	if err != nil {
		return filesys.Attr{}, err
	}
	if fs == nil {
		return h.synthAttr(ino), nil
	}
	a, err := fs.Getattr(ctx, in)
	return out(base(ino), a, err)
}

// ReadDir lists dir. The root's listing does not show .plumeria.
func (h *FS) ReadDir(ctx context.Context, dir uint64, after uint64, max int) ([]filesys.DirEntry, bool, error) {
	fs, ino, err := h.route(dir)
	if err != nil {
		return nil, false, err
	}
	if fs != nil {
		ents, done, err := fs.ReadDir(ctx, ino, after, max)
		for i := range ents {
			ents[i].Ino |= base(dir)
		}
		return ents, done, err
	}
	if _, ok := h.linkTarget(ino); ok {
		return nil, false, filesys.ErrNotDir
	}
	var names []string
	mode := uint32(syscall.S_IFDIR)
	switch ino {
	case dotIno:
		names = []string{atName, snapsName}
	case atIno:
		snaps, err := h.list(ctx)
		if err != nil {
			return nil, false, err
		}
		for _, s := range snaps {
			if !s.At.IsZero() {
				names = append(names, TimeName(s.At))
			}
		}
		slices.Sort(names)
		names = slices.Compact(names)
		mode = syscall.S_IFLNK
		if h.live.KeepsVersions() {
			mode = syscall.S_IFDIR // views of the live file system (timeView)
		}
	default:
		snaps, err := h.list(ctx)
		if err != nil {
			return nil, false, err
		}
		for _, s := range snaps {
			names = append(names, s.Name)
		}
		slices.Sort(names)
		h.mu.Lock()
		var gone []string
		for name := range h.mu.byName {
			if _, ok := slices.BinarySearch(names, name); !ok && !strings.HasPrefix(name, "\x00") {
				gone = append(gone, name)
			}
		}
		h.mu.Unlock()
		for _, name := range gone {
			h.forget(ctx, name)
		}
	}
	// Cookie i+1 is names[i]; a listing resumed after a change of the
	// snapshot list may skip or repeat a name, as with any directory.
	var ents []filesys.DirEntry
	for i := int(after); i < len(names) && len(ents) < max; i++ {
		ents = append(ents, filesys.DirEntry{Name: names[i], Ino: h.entryIno(ino, names[i]), Mode: mode, Cookie: uint64(i + 1)})
	}
	return ents, int(after)+len(ents) >= len(names), nil
}

// entryIno is the inode number a listing of a synthetic directory shows
// for name: the snapshot's root once it is open, else a number no inode
// has (the kernel looks the name up before it uses one).
func (h *FS) entryIno(dir uint64, name string) uint64 {
	switch {
	case dir == dotIno && name == atName:
		return atIno
	case dir == dotIno:
		return snapsIno
	case dir == atIno:
		return 1<<32 | 0xffffffff
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.mu.byName[name]; ok {
		return slotBase(s) | filesys.RootIno
	}
	return 1<<32 | 0xffffffff
}

// Statfs reports the live file system's capacity.
func (h *FS) Statfs(ctx context.Context) (filesys.Statfs, error) { return h.live.Statfs(ctx) }

// SetInvalidator registers the kernel's invalidator with the live file
// system: snapshots never change.
func (h *FS) SetInvalidator(fn func(ino uint64, dir bool, name string)) { h.live.SetInvalidator(fn) }

// CacheFor is the live file system's: what the kernel learns of a
// snapshot stays true, but one bound for the whole mount is simpler.
func (h *FS) CacheFor() time.Duration { return h.live.CacheFor() }

// UncachedNames reports the directories whose names the kernel must not
// cache (frontend/fuse.UncachedNames): the list of snapshots changes
// without any lock telling this node.
//
// Nor the names of a view of the past (timeView): one of a time still to
// come changes as the live file system does.
func (h *FS) UncachedNames(dir uint64) bool {
	if dir == snapsIno || dir == atIno {
		return true
	}
	if dir < liveMax || dir>>32 == 1 {
		return false
	}
	fs, _, err := h.route(dir)
	_, isView := fs.(*timeView)
	return err == nil && isView
}

// view opens (once per time) the live file system as it was at t.
func (h *FS) view(ctx context.Context, t time.Time) (tree, uint64, error) {
	name := "\x00at " + t.UTC().Format(time.RFC3339Nano) // never a snapshot's name
	if fs, b, ok := h.opened(name); ok {
		return fs, b, nil
	}
	return h.install(ctx, name, newTimeView(h.live, t), func(context.Context) {})
}

// list returns the volume's snapshots.
func (h *FS) list(ctx context.Context) ([]Snapshot, error) {
	snaps, err := h.snaps.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: list snapshots: %v", filesys.ErrIO, err)
	}
	return snaps, nil
}
