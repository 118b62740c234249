// Package history puts the past of a file system inside its mount: the
// directory .plumeria in the root, reachable by name but never listed (so
// that find, du and backup tools do not wander into it), holds
// snapshots/NAME/..., each a volume snapshot's file system, read-only.
//
// FS wraps the live file system and serves the same calls the FUSE
// adapter makes (frontend/fuse.FileSystem), routing each by inode number:
//
//	ino < 1<<32             the live file system, unchanged
//	1<<32 | k               .plumeria (k=1) and .plumeria/snapshots (k=2)
//	(s+2)<<32 | ino         inode ino of the s-th snapshot opened here
//
// Live inode numbers stay below layout.InodesMax (2^24), so the ranges never
// meet. Everything under .plumeria is read-only: a change there is
// filesys.ErrReadOnly (EROFS).
package history

import (
	"context"
	"fmt"
	"slices"
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
	snapsName   = "snapshots"
	snapSlotMax = 1<<31 - 2
)

// Snapshots is what FS needs to know about the volume's snapshots.
type Snapshots interface {
	// List returns the names of the volume's snapshots.
	List(ctx context.Context) ([]string, error)
	// Open opens snapshot name's file system read-only
	// (filesys.Config.ReadOnly); filesys.ErrNotFound if there is none.
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
	}
}

type opened struct {
	name  string
	fs    *filesys.FS
	close func(context.Context)
}

// New wraps live; snaps lists and opens the volume's snapshots.
func New(live *filesys.FS, snaps Snapshots) *FS {
	h := &FS{live: live, snaps: snaps, started: time.Now()}
	h.mu.byName = map[string]int{}
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
func (h *FS) route(ino uint64) (*filesys.FS, uint64, error) {
	if ino < liveMax {
		return h.live, ino, nil
	}
	s := ino>>32 - 2
	if ino>>32 == 1 {
		if ino == dotIno || ino == snapsIno {
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

// outIno maps an inode number of fs to the one the kernel sees.
func (h *FS) outIno(fs *filesys.FS, ino uint64) uint64 {
	if fs == h.live {
		return ino
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for s, o := range h.mu.slots {
		if o != nil && o.fs == fs {
			return uint64(s+2)<<32 | ino
		}
	}
	return 0 // not reached: fs came from route
}

func (h *FS) out(fs *filesys.FS, a filesys.Attr, err error) (filesys.Attr, error) {
	if err == nil {
		a.Ino = h.outIno(fs, a.Ino)
	}
	return a, err
}

func (h *FS) dirAttr(ino uint64) filesys.Attr {
	return filesys.Attr{Ino: ino, Gen: 1, Mode: syscall.S_IFDIR | 0o555, Nlink: 2,
		Atime: h.started, Mtime: h.started, Ctime: h.started}
}

// snapshot opens (once) snapshot name and returns its slot's file system.
// A snapshot deleted since it was opened here is closed: the kernel's
// references to its inodes get ErrStale.
func (h *FS) snapshot(ctx context.Context, name string) (*filesys.FS, error) {
	names, err := h.snaps.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: list snapshots: %v", filesys.ErrIO, err)
	}
	if !slices.Contains(names, name) {
		h.forget(ctx, name)
		return nil, filesys.ErrNotFound
	}
	h.mu.Lock()
	if s, ok := h.mu.byName[name]; ok {
		fs := h.mu.slots[s].fs
		h.mu.Unlock()
		return fs, nil
	}
	h.mu.Unlock()
	fs, closeFn, err := h.snaps.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.mu.byName[name]; ok { // opened meanwhile by another lookup
		closeFn(ctx)
		return h.mu.slots[s].fs, nil
	}
	if len(h.mu.slots) >= snapSlotMax {
		closeFn(ctx)
		return nil, fmt.Errorf("%w: %d snapshots opened on this node", filesys.ErrNoSpace, len(h.mu.slots))
	}
	h.mu.byName[name] = len(h.mu.slots)
	h.mu.slots = append(h.mu.slots, &opened{name: name, fs: fs, close: closeFn})
	return fs, nil
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
		return h.dirAttr(dotIno), nil
	}
	fs, ino, err := h.route(dir)
	if err != nil {
		return filesys.Attr{}, err
	}
	switch {
	case fs != nil:
		a, err := fs.Lookup(ctx, ino, name)
		return h.out(fs, a, err)
	case ino == dotIno && name == snapsName:
		return h.dirAttr(snapsIno), nil
	case ino == snapsIno:
		fs, err := h.snapshot(ctx, name)
		if err != nil {
			return filesys.Attr{}, err
		}
		a, err := fs.Getattr(ctx, filesys.RootIno)
		return h.out(fs, a, err)
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
		return h.dirAttr(ino), nil
	}
	a, err := fs.Getattr(ctx, in)
	return h.out(fs, a, err)
}

// ReadDir lists dir. The root's listing does not show .plumeria.
func (h *FS) ReadDir(ctx context.Context, dir uint64, after uint64, max int) ([]filesys.DirEntry, bool, error) {
	fs, ino, err := h.route(dir)
	if err != nil {
		return nil, false, err
	}
	if fs != nil {
		ents, done, err := fs.ReadDir(ctx, ino, after, max)
		if fs != h.live {
			for i := range ents {
				ents[i].Ino = h.outIno(fs, ents[i].Ino)
			}
		}
		return ents, done, err
	}
	var names []string
	if ino == dotIno {
		names = []string{snapsName}
	} else {
		if names, err = h.snaps.List(ctx); err != nil {
			return nil, false, fmt.Errorf("%w: list snapshots: %v", filesys.ErrIO, err)
		}
		slices.Sort(names)
		h.mu.Lock()
		var gone []string
		for name := range h.mu.byName {
			if _, ok := slices.BinarySearch(names, name); !ok {
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
		ents = append(ents, filesys.DirEntry{Name: names[i], Ino: h.entryIno(ino, names[i]), Mode: syscall.S_IFDIR, Cookie: uint64(i + 1)})
	}
	return ents, int(after)+len(ents) >= len(names), nil
}

// entryIno is the inode number a listing of a synthetic directory shows
// for name: the snapshot's root once it is open, else a number no inode
// has (the kernel looks the name up before it uses one).
func (h *FS) entryIno(dir uint64, name string) uint64 {
	if dir == dotIno {
		return snapsIno
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.mu.byName[name]; ok {
		return uint64(s+2)<<32 | filesys.RootIno
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
func (h *FS) UncachedNames(dir uint64) bool { return dir == snapsIno }
