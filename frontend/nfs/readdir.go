package nfs

import (
	"encoding/binary"
	"sync"

	"github.com/plumeria-fs/plumeria/filesys"
)

// Listings start with "." and ".."; their cookies have the top bit set,
// which no file system cookie has ([1, 2^63-3]), and the file system's
// own cookies follow. The cookie verifier is the directory's generation:
// cookies stay valid across changes to the directory (the file system's
// are stable), and die with the directory.
const (
	cookieDot    = 1<<63 | 1
	cookieDotDot = 1<<63 | 2
)

// Sizes of a listing's reply parts, in bytes, to keep it under the
// client's count.
const (
	readdirHead    = 4 + 4 + 84 + 8 + 4 + 4 // status, post_op_attr, cookieverf, no-more-entries, eof
	entryBytes     = 4 + 8 + 4 + 8          // value follows, fileid, name length, cookie (+ name, padded)
	entryPlusBytes = entryBytes + 4 + 84 + 4 + 4 + handleBytes
	attrWorkers    = 8 // READDIRPLUS attribute reads in parallel
)

func readdir(r *request, e *encoder) uint32 { return list(r, e, false) }
func readdirplus(r *request, e *encoder) uint32 {
	return list(r, e, true)
}

// list serves READDIR and READDIRPLUS.
func list(r *request, e *encoder, plus bool) uint32 {
	d := r.args()
	fh, cookie, verf := d.opaque(fhMax), d.u64(), d.fixed(8)
	count := d.u32() // READDIR: the reply's size; READDIRPLUS: dircount
	if plus {
		count = d.u32() // maxcount bounds the reply
	}
	if d.err != nil {
		return statusGarbage
	}
	count = min(count, maxIO)
	dir, st := r.dir(fh, filesys.MayRead)
	myVerf := make([]byte, 8)
	binary.BigEndian.PutUint64(myVerf, dir.Gen)
	if st == nfsOK && cookie != 0 && binary.BigEndian.Uint64(verf) != 0 && string(verf) != string(myVerf) {
		st = nfsErrBadCookie
	}
	var ents []filesys.DirEntry
	eof := false
	if st == nfsOK {
		ents, eof, st = r.entries(dir, cookie, count, plus)
	}
	e.u32(st)
	r.postOp(e, dir, dir.Ino != 0)
	if st != nfsOK {
		return st
	}
	e.fixed(myVerf)
	var attrs []entryAttr
	if plus {
		attrs = r.entryAttrs(ents)
	}
	for i, ent := range ents {
		e.boolean(true)
		e.u64(ent.Ino)
		e.str(ent.Name)
		e.u64(ent.Cookie)
		if plus {
			a := attrs[i]
			r.postOp(e, a.a, a.ok)
			e.boolean(a.ok)
			if a.ok {
				e.opaque(r.s.h.make(a.a.Ino, a.a.Gen))
			}
		}
	}
	e.boolean(false)
	e.boolean(eof)
	return st
}

// entries returns the entries after cookie that fit in count bytes of
// reply, "." and ".." first, and whether they end the directory.
func (r *request) entries(dir filesys.Attr, cookie uint64, count uint32, plus bool) ([]filesys.DirEntry, bool, uint32) {
	per := entryBytes
	if plus {
		per = entryPlusBytes
	}
	room := int(count) - readdirHead
	var out []filesys.DirEntry
	add := func(ent filesys.DirEntry) bool {
		need := per + (len(ent.Name)+3)&^3
		if room < need {
			return false
		}
		room -= need
		out = append(out, ent)
		return true
	}
	after := cookie
	switch cookie {
	case 0:
		if !add(filesys.DirEntry{Name: ".", Ino: dir.Ino, Cookie: cookieDot}) {
			return nil, false, nfsErrTooSmall
		}
		fallthrough
	case cookieDot:
		parent := dir.Ino
		if p, err := r.fs.Parent(r.ctx(), dir.Ino); err == nil {
			parent = p.Ino
		}
		if !add(filesys.DirEntry{Name: "..", Ino: parent, Cookie: cookieDotDot}) {
			return out, false, okUnlessEmpty(out)
		}
		after = 0
	case cookieDotDot:
		after = 0
	}
	for {
		max := min(room/(per+8)+1, 1024)
		ents, done, err := r.fs.ReadDir(r.ctx(), dir.Ino, after, max)
		if err != nil {
			return nil, false, r.status("readdir", err)
		}
		for _, ent := range ents {
			if !add(ent) {
				return out, false, okUnlessEmpty(out)
			}
			after = ent.Cookie
		}
		if done || len(ents) == 0 {
			return out, true, nfsOK
		}
	}
}

// okUnlessEmpty: a reply too small for even one entry is NFS3ERR_TOOSMALL.
func okUnlessEmpty(out []filesys.DirEntry) uint32 {
	if len(out) == 0 {
		return nfsErrTooSmall
	}
	return nfsOK
}

type entryAttr struct {
	a  filesys.Attr
	ok bool
}

// entryAttrs reads the attributes of ents (an entry removed meanwhile
// has none), several at once: each may wait for its inode's lock.
func (r *request) entryAttrs(ents []filesys.DirEntry) []entryAttr {
	out := make([]entryAttr, len(ents))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(attrWorkers, len(ents)) {
		wg.Go(func() {
			for i := range next {
				a, err := r.fs.Getattr(r.ctx(), ents[i].Ino)
				out[i] = entryAttr{a, err == nil}
			}
		})
	}
	for i := range ents {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}
