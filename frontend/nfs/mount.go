package nfs

import (
	"strings"

	"github.com/plumeria-fs/plumeria/filesys"
)

// MOUNT v3 (RFC 1813 appendix I) and the portmapper's GETPORT (RFC 1833,
// version 2), both on the NFS port: a client that asks the portmapper or
// is told mountport=PORT finds everything on one port.

// MOUNT status codes (mountstat3).
const (
	mntOK          = 0
	mntErrPerm     = 1
	mntErrNoEnt    = 2
	mntErrIO       = 5
	mntErrAcces    = 13
	mntErrNotDir   = 20
	mntErrInval    = 22
	mntErrNameLong = 63
	mntErrNotSupp  = 10004
	mntErrServer   = 10006
)

const maxMountPath = 1024 // MNTPATHLEN

var mountProcs = map[uint32]proc{
	0: {"mount_null", func(*request, *encoder) uint32 { return nfsOK }},
	1: {"mount_mnt", mnt},
	2: {"mount_dump", func(_ *request, e *encoder) uint32 { e.boolean(false); return nfsOK }},
	3: {"mount_umnt", func(r *request, _ *encoder) uint32 {
		if r.args().str(maxMountPath); r.args().err != nil {
			return statusGarbage
		}
		return nfsOK
	}},
	4: {"mount_umntall", func(*request, *encoder) uint32 { return nfsOK }},
	5: {"mount_export", export},
}

// mnt returns the handle of the export's root, or of a directory below
// it ("/NAME/dir/sub"), so that clients may mount a subtree.
func mnt(r *request, e *encoder) uint32 {
	path := r.args().str(maxMountPath)
	if r.args().err != nil {
		return statusGarbage
	}
	a, st := r.mountPoint(path)
	e.u32(st)
	if st == mntOK {
		e.opaque(r.s.h.make(a.Ino, a.Gen))
		e.u32(1) // auth flavors: AUTH_SYS
		e.u32(flavorSys)
	} else {
		r.s.log.Warn("nfs: refused a mount", "client", r.peer.String(), "path", path, "status", st)
	}
	return st
}

func (r *request) mountPoint(path string) (filesys.Attr, uint32) {
	root := "/" + r.s.opts.Export
	rest, ok := strings.CutPrefix(strings.TrimRight(path, "/"), root)
	if !ok || rest != "" && rest[0] != '/' {
		return filesys.Attr{}, mntErrNoEnt
	}
	a, err := r.fs.Getattr(r.ctx(), filesys.RootIno)
	for _, name := range strings.Split(rest, "/") {
		if err != nil {
			break
		}
		switch {
		case name == "" || name == ".":
			continue
		case name == "..":
			return a, mntErrInval
		}
		if !isDir(a) {
			return a, mntErrNotDir
		}
		if cerr := r.c.CheckAccess(a, filesys.MayExec); cerr != nil {
			return a, mntErrAcces
		}
		a, err = r.fs.Lookup(r.ctx(), a.Ino, name)
	}
	if err != nil {
		switch toStatus(r.s.log, "mount", err) {
		case nfsErrNoEnt, nfsErrStale:
			return a, mntErrNoEnt
		case nfsErrNameTooLng:
			return a, mntErrNameLong
		}
		return a, mntErrIO
	}
	if !isDir(a) {
		return a, mntErrNotDir
	}
	return a, mntOK
}

// export lists the one export and the networks it is open to.
func export(r *request, e *encoder) uint32 {
	e.boolean(true)
	e.str("/" + r.s.opts.Export)
	for _, p := range r.s.opts.Allow {
		e.boolean(true)
		e.str(p.String())
	}
	e.boolean(false)
	e.boolean(false)
	return nfsOK
}

// Portmapper (program 100000, version 2).
const ipprotoTCP = 6

var portmapProcs = map[uint32]proc{
	0: {"portmap_null", func(*request, *encoder) uint32 { return nfsOK }},
	3: {"portmap_getport", getport},
	4: {"portmap_dump", func(r *request, e *encoder) uint32 {
		for _, p := range [][2]uint32{{progNFS, 3}, {progMount, 3}} {
			e.boolean(true)
			e.u32(p[0])
			e.u32(p[1])
			e.u32(ipprotoTCP)
			e.u32(r.s.port.Load())
		}
		e.boolean(false)
		return nfsOK
	}},
}

func getport(r *request, e *encoder) uint32 {
	d := r.args()
	prog, vers, prot := d.u32(), d.u32(), d.u32()
	d.u32()
	if d.err != nil {
		return statusGarbage
	}
	if (prog == progNFS || prog == progMount) && vers == 3 && prot == ipprotoTCP {
		e.u32(r.s.port.Load())
	} else {
		e.u32(0)
	}
	return nfsOK
}
