package nfs

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plumeria-fs/plumeria/filesys"
)

// NFSv3 file types (ftype3).
const (
	nf3Reg  = 1
	nf3Dir  = 2
	nf3Blk  = 3
	nf3Chr  = 4
	nf3Lnk  = 5
	nf3Sock = 6
	nf3FIFO = 7
)

func ftype(mode uint32) uint32 {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		return nf3Dir
	case syscall.S_IFBLK:
		return nf3Blk
	case syscall.S_IFCHR:
		return nf3Chr
	case syscall.S_IFLNK:
		return nf3Lnk
	case syscall.S_IFSOCK:
		return nf3Sock
	case syscall.S_IFIFO:
		return nf3FIFO
	}
	return nf3Reg
}

func isDir(a filesys.Attr) bool { return a.Mode&syscall.S_IFMT == syscall.S_IFDIR }
func isReg(a filesys.Attr) bool { return a.Mode&syscall.S_IFMT == syscall.S_IFREG }

// nfstime3 holds seconds in 32 bits: times outside [1970, 2106) are cut.
func (e *encoder) time(t time.Time) {
	s := t.Unix()
	switch {
	case s < 0:
		e.u32(0)
		e.u32(0)
	case s > 1<<32-1:
		e.u32(1<<32 - 1)
		e.u32(999999999)
	default:
		e.u32(uint32(s))
		e.u32(uint32(t.Nanosecond()))
	}
}

func (d *decoder) time() time.Time {
	s, ns := d.u32(), d.u32()
	if ns >= 1e9 && d.err == nil {
		d.err = errGarbage
	}
	return time.Unix(int64(s), int64(ns))
}

// fattr encodes a's fattr3.
func (r *request) fattr(e *encoder, a filesys.Attr) {
	e.u32(ftype(a.Mode))
	e.u32(a.Mode & 0o7777)
	e.u32(a.Nlink)
	e.u32(a.Uid)
	e.u32(a.Gid)
	e.u64(a.Size)
	e.u64(a.Blocks * 512)
	e.u32(unix.Major(uint64(a.Rdev)))
	e.u32(unix.Minor(uint64(a.Rdev)))
	e.u64(r.s.h.export) // fsid
	e.u64(a.Ino)
	e.time(a.Atime)
	e.time(a.Mtime)
	e.time(a.Ctime)
}

// postOp encodes post_op_attr: a if ok.
func (r *request) postOp(e *encoder, a filesys.Attr, ok bool) {
	e.boolean(ok)
	if ok {
		r.fattr(e, a)
	}
}

// postOpOf encodes ino's attributes now, if it can read them.
func (r *request) postOpOf(e *encoder, ino uint64) {
	a, err := r.fs.Getattr(r.ctx(), ino)
	r.postOp(e, a, err == nil)
}

// wcc encodes wcc_data with no pre-operation attributes (they could not
// be read atomically with the change) and ino's attributes after it.
func (r *request) wcc(e *encoder, ino uint64) {
	e.boolean(false)
	if ino == 0 {
		e.boolean(false)
		return
	}
	r.postOpOf(e, ino)
}

// postFH encodes post_op_fh3 for a.
func (r *request) postFH(e *encoder, a filesys.Attr) {
	e.boolean(true)
	e.opaque(r.s.h.make(a.Ino, a.Gen))
}

// Values of time_how in sattr3.
const (
	dontChange      = 0
	setToServerTime = 1
	setToClientTime = 2
)

// sattr is a decoded sattr3 (set.TimesNow when every time it sets is
// the server's now).
type sattr struct{ set filesys.SetAttr }

func (d *decoder) sattr() sattr {
	var s sattr
	if d.boolean() {
		m := d.u32() & 0o7777
		s.set.Mode = &m
	}
	if d.boolean() {
		u := d.u32()
		s.set.Uid = &u
	}
	if d.boolean() {
		g := d.u32()
		s.set.Gid = &g
	}
	if d.boolean() {
		z := d.u64()
		s.set.Size = &z
	}
	now := time.Now()
	nows, clients := 0, 0
	for _, t := range []**time.Time{&s.set.Atime, &s.set.Mtime} {
		switch how := d.u32(); how {
		case dontChange:
		case setToServerTime:
			*t = &now
			nows++
		case setToClientTime:
			v := d.time()
			*t = &v
			clients++
		default:
			if d.err == nil {
				d.err = errGarbage
			}
		}
	}
	s.set.TimesNow = nows > 0 && clients == 0
	return s
}

// mode is the permission bits s sets, or def.
func (s sattr) mode(def uint32) uint32 {
	if s.set.Mode != nil {
		return *s.set.Mode
	}
	return def
}

func unixTime(sec int64) time.Time { return time.Unix(sec, 0) }
