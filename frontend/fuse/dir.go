package fuse

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/plumeria-fs/plumeria/filesys"
)

// Directory offsets, as telldir(3) returns them and seekdir(3) takes them.
// An entry's offset is the position just after it. Real entries use their
// FileSystem cookies unchanged; "." and ".." take the two largest offsets
// the kernel accepts (off_t is signed), which FileSystem never uses.
const (
	offsetStart  = 0             // before "."
	offsetDot    = 1<<63 - 1     // after "."
	offsetDotDot = offsetDot - 1 // after "..": the first real entry is next
	cookieMax    = offsetDotDot - 1
)

// dirPageEntries is how many entries one FileSystem.ReadDir call asks for.
// A 4 KiB READDIR reply holds about 100 short names, so a page serves a few
// replies; a huge directory is never read whole.
const dirPageEntries = 256

// dirHandle is one opendir(3): a cursor over FileSystem.ReadDir pages.
// go-fuse serializes the calls on one handle (it holds the handle's lock
// for Readdirent and Seekdir).
type dirHandle struct {
	n    *node
	pos  uint64             // offset of the last entry returned
	page []filesys.DirEntry // fetched, not yet returned
	done bool               // nothing follows page
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileFsyncdirer   = (*dirHandle)(nil)
	_ fs.FileReleasedirer = (*dirHandle)(nil)
)

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.m.inval.refresh(n.ino())
	return &dirHandle{n: n}, n.m.dirFlags(n.ino()), 0
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.pos, d.page, d.done = off, nil, false
	return 0
}

// Readdirent returns the entry after d.pos, or nil at the end.
func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	switch d.pos {
	case offsetStart:
		d.pos = offsetDot
		return &fuse.DirEntry{Name: ".", Ino: d.n.ino(), Mode: syscall.S_IFDIR, Off: offsetDot}, 0
	case offsetDot:
		d.pos = offsetDotDot
		parent := d.n.ino()
		if _, p := d.n.Parent(); p != nil {
			parent = p.StableAttr().Ino
		}
		return &fuse.DirEntry{Name: "..", Ino: parent, Mode: syscall.S_IFDIR, Off: offsetDotDot}, 0
	}
	if len(d.page) == 0 {
		if d.done {
			return nil, 0
		}
		if errno := d.fetch(ctx); errno != 0 {
			return nil, errno
		}
		if len(d.page) == 0 {
			return nil, 0
		}
	}
	e := d.page[0]
	d.page = d.page[1:]
	d.pos = e.Cookie
	return &fuse.DirEntry{Name: e.Name, Ino: e.Ino, Mode: e.Mode & syscall.S_IFMT, Off: e.Cookie}, 0
}

// fetch reads the page after d.pos and checks its cookies: a cookie out of
// order or out of range would make the kernel loop or skip entries.
func (d *dirHandle) fetch(ctx context.Context) (en syscall.Errno) {
	defer d.n.m.stats.done("readdir", time.Now(), &en)
	after := d.pos
	if after == offsetDotDot {
		after = 0
	}
	ents, done, err := d.n.m.fsys.ReadDir(opCtx(ctx), d.n.ino(), after, dirPageEntries)
	if err != nil {
		return d.n.errno("readdir", err)
	}
	prev := after
	for _, e := range ents {
		if e.Cookie <= prev || e.Cookie > cookieMax {
			err := fmt.Errorf("readdir after %d: entry %q has cookie %d after %d", after, e.Name, e.Cookie, prev)
			return d.n.errno("readdir", err)
		}
		prev = e.Cookie
	}
	d.page, d.done = ents, done || len(ents) == 0
	return 0
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) (en syscall.Errno) {
	defer d.n.m.stats.done("fsyncdir", time.Now(), &en)
	return d.n.errno("fsyncdir", d.n.m.fsys.Fsync(opCtx(ctx), d.n.ino(), flags&fsyncDataOnly != 0))
}

func (d *dirHandle) Releasedir(context.Context, uint32) {}
