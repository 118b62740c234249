package layout

import (
	"encoding/binary"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Inode payload (inode n at InodeAddr(n), one block: GFS dinode), after
// the header, little-endian:
//
//	  0        4         8       12      16       20        24          32        40        48
//	| mode u32 | nlink u32 | uid u32 | gid u32 | rdev u32 | flags u32 | size u64 | hwm u64 | gen u64 |
//	 48                 60                 72                 84            86           88           96
//	| atime s i64 ns u32 | mtime s i64 ns u32 | ctime s i64 ns u32 | inline u16 | xattrs u16 | parent u64 |
//	 96         100         108               116
//	| fver u32 | nlog u64 | closed ns i64 | node 12 B |
//	 128
//	| inline bytes | xattr bytes | zero ... | (InlineBytes in all)
//
// mode 0 means the inode is free (its group bit is clear too). hwm is the
// extent's high-water mark: no byte of the extent at or beyond it was ever
// written, so an inode being reused decommits [0, hwm) first. Bytes in
// [size, hwm) may be stale: a truncate only lowers size, and the file
// system clears that range when the file grows over it again, after the
// truncate is durable (filesys/file.go, exposeTail). gen is bumped
// on every reuse of the number. parent is a directory's parent directory
// (its ".."; 0 for other types). The inline area holds, by type: a regular
// file's bytes while they fit (flag FlagInline), a symlink's target, or a
// directory's root (filesys/dir; the entries of a small directory). xattrs
// follow the inline bytes: count u16, then per attribute nameLen u8,
// valueLen u16, name, value.
//
// fver (format version 2; zero in version 1) is the number of the file's
// newest version (layout/history.go): its data is written at file version
// fver+1 until the next version is made. It is kept when the inode is
// freed and reused, so file versions of one extent never decrease (the
// bricks order a block's entries by them). FlagModified marks a regular
// file changed since its newest version. nlog (format 2) is the length in
// bytes of the inode number's name log (layout/namelog.go): a directory's
// history of names; it is kept across reuse too, so the log of an earlier
// directory at the number stays behind the new one's records.
// FlagPending (format 2) says version fver's history record is not
// written yet: the version is the inode itself (FlagModified is clear),
// closed at closed (unix ns) by node (its first 12 bytes); the record is
// written before the file next changes or is freed (filesys/versions.go).
// Format version 3 adds FlagQuota (a directory that roots a quota realm)
// and the realms field in the inode's header (header.go): the numbers of
// the quota realm roots the inode is counted in, innermost first, up to
// RealmsMax, the rest 0 (all 0: none). A quota root's own realms are
// those around it.
// Part of format version 3: never edit; add a version instead.
const (
	inodeFieldsBytes = 128
	InlineBytes      = PayloadBytes - inodeFieldsBytes // 3904

	FlagInline   = 1 << 0 // a regular file's data is in the inline area
	FlagModified = 1 << 1 // changed since its newest version (format 2)
	FlagPending  = 1 << 2 // version fver's record is this inode (format 2)
	FlagQuota    = 1 << 3 // a directory that is a quota realm's root (format 3)

	NodeBytes = 12 // of a node's name kept in the inode

	RealmsMax = 4 // quota realms one inode is counted in (nested quotas)

	XattrNameMax = 255
)

// Inode is a decoded inode block.
type Inode struct {
	Mode, Nlink, Uid, Gid, Rdev, Flags uint32
	Size, HWM, Gen, Parent             uint64
	FVer                               uint32            // newest file version (format 2)
	NLog                               uint64            // name log bytes (format 2)
	Closed                             int64             // FlagPending: when version FVer was made (unix ns)
	Realms                             [RealmsMax]uint64 // quota realm roots, innermost first (format 3)
	Node                               string            // FlagPending: who made it (at most NodeBytes)
	Atime, Mtime, Ctime                Time
	Inline                             []byte // data, symlink target or directory root
	Xattrs                             []Xattr
}

// Time is a timestamp as stored: seconds and nanoseconds since the epoch.
type Time struct {
	Sec  int64
	Nsec uint32
}

// Xattr is one extended attribute.
type Xattr struct {
	Name  string
	Value []byte
}

// Free reports whether the inode is unallocated.
func (in *Inode) Free() bool { return in.Mode == 0 }

// XattrBytes is the encoded size of the inode's xattrs.
func (in *Inode) XattrBytes() int {
	if len(in.Xattrs) == 0 {
		return 0
	}
	n := 2
	for _, x := range in.Xattrs {
		n += 3 + len(x.Name) + len(x.Value)
	}
	return n
}

// Fits reports whether the inline bytes and xattrs fit in the block.
func (in *Inode) Fits() bool { return len(in.Inline)+in.XattrBytes() <= InlineBytes }

// EncodeInode writes in as inode ino's block into b (len BlockBytes).
func EncodeInode(b []byte, ino uint64, version uint64, in *Inode) error {
	if !in.Fits() {
		return fmt.Errorf("layout: inode %d: %d inline bytes and %d of xattrs exceed %d", ino, len(in.Inline), in.XattrBytes(), InlineBytes)
	}
	clear(b)
	PutHeader(b, Header{Kind: KindInode, Version: version, Owner: ino})
	le := binary.LittleEndian
	for i, r := range in.Realms {
		le.PutUint64(b[realmOff+8*i:], r)
	}
	p := b[HeaderBytes:]
	le.PutUint32(p[0:], in.Mode)
	le.PutUint32(p[4:], in.Nlink)
	le.PutUint32(p[8:], in.Uid)
	le.PutUint32(p[12:], in.Gid)
	le.PutUint32(p[16:], in.Rdev)
	le.PutUint32(p[20:], in.Flags)
	le.PutUint64(p[24:], in.Size)
	le.PutUint64(p[32:], in.HWM)
	le.PutUint64(p[40:], in.Gen)
	putTime(p[48:], in.Atime)
	putTime(p[60:], in.Mtime)
	putTime(p[72:], in.Ctime)
	le.PutUint16(p[84:], uint16(len(in.Inline)))
	le.PutUint16(p[86:], uint16(in.XattrBytes()))
	le.PutUint64(p[88:], in.Parent)
	le.PutUint32(p[96:], in.FVer)
	le.PutUint64(p[100:], in.NLog)
	le.PutUint64(p[108:], uint64(in.Closed))
	if len(in.Node) > NodeBytes {
		return fmt.Errorf("layout: inode %d: node name of %d bytes (at most %d)", ino, len(in.Node), NodeBytes)
	}
	copy(p[116:128], in.Node)
	q := p[inodeFieldsBytes:]
	n := copy(q, in.Inline)
	if len(in.Xattrs) > 0 {
		le.PutUint16(q[n:], uint16(len(in.Xattrs)))
		n += 2
		for _, x := range in.Xattrs {
			q[n] = byte(len(x.Name))
			le.PutUint16(q[n+1:], uint16(len(x.Value)))
			n += 3
			n += copy(q[n:], x.Name)
			n += copy(q[n:], x.Value)
		}
	}
	return nil
}

func putTime(b []byte, t Time) {
	binary.LittleEndian.PutUint64(b, uint64(t.Sec))
	binary.LittleEndian.PutUint32(b[8:], t.Nsec)
}

func getTime(b []byte) Time {
	return Time{Sec: int64(binary.LittleEndian.Uint64(b)), Nsec: binary.LittleEndian.Uint32(b[8:])}
}

// DecodeInode reads inode ino's block. A never-written block decodes as a
// free inode (version 0).
func DecodeInode(b []byte, ino uint64) (*Inode, uint64, error) {
	h, err := DecodeHeader(b)
	switch {
	case err != nil:
		return nil, 0, err
	case h.Kind == KindNone:
		return &Inode{}, 0, nil
	case h.Kind != KindInode || h.Owner != ino:
		return nil, 0, fmt.Errorf("%w: a %v block of %d where inode %d belongs", ErrCorrupt, h.Kind, h.Owner, ino)
	}
	p := b[HeaderBytes:]
	le := binary.LittleEndian
	in := &Inode{
		Mode: le.Uint32(p[0:]), Nlink: le.Uint32(p[4:]), Uid: le.Uint32(p[8:]), Gid: le.Uint32(p[12:]),
		Rdev: le.Uint32(p[16:]), Flags: le.Uint32(p[20:]),
		Size: le.Uint64(p[24:]), HWM: le.Uint64(p[32:]), Gen: le.Uint64(p[40:]), Parent: le.Uint64(p[88:]), FVer: le.Uint32(p[96:]), NLog: le.Uint64(p[100:]), Closed: int64(le.Uint64(p[108:])),
		Node:  strings.TrimRight(string(p[116:128]), "\x00"),
		Atime: getTime(p[48:]), Mtime: getTime(p[60:]), Ctime: getTime(p[72:]),
	}
	nIn, nX := int(le.Uint16(p[84:])), int(le.Uint16(p[86:]))
	if nIn+nX > InlineBytes || in.Size > ExtentBytes || in.HWM > ExtentBytes {
		return nil, 0, fmt.Errorf("%w: inode %d sizes (inline %d, xattrs %d, size %d)", ErrCorrupt, ino, nIn, nX, in.Size)
	}
	for i := range in.Realms {
		in.Realms[i] = le.Uint64(b[realmOff+8*i:])
		if in.Realms[i] >= InodesMax || i > 0 && in.Realms[i] != 0 && in.Realms[i-1] == 0 {
			return nil, 0, fmt.Errorf("%w: inode %d quota realms %v", ErrCorrupt, ino, in.Realms)
		}
	}
	q := p[inodeFieldsBytes:]
	if nIn > 0 {
		in.Inline = append([]byte(nil), q[:nIn]...)
	}
	if nX > 0 {
		xs, err := decodeXattrs(q[nIn : nIn+nX])
		if err != nil {
			return nil, 0, fmt.Errorf("%w: inode %d xattrs: %v", ErrCorrupt, ino, err)
		}
		in.Xattrs = xs
	}
	return in, h.Version, nil
}

func decodeXattrs(b []byte) ([]Xattr, error) {
	if len(b) < 2 {
		return nil, fmt.Errorf("short")
	}
	le := binary.LittleEndian
	n := int(le.Uint16(b))
	b = b[2:]
	if n == 0 {
		return nil, fmt.Errorf("empty attribute list stored")
	}
	xs := make([]Xattr, 0, min(n, 64))
	for i := 0; i < n; i++ {
		if len(b) < 3 {
			return nil, fmt.Errorf("attribute %d truncated", i)
		}
		nl, vl := int(b[0]), int(le.Uint16(b[1:]))
		b = b[3:]
		if nl == 0 || len(b) < nl+vl || !utf8.Valid(b[:nl]) {
			return nil, fmt.Errorf("attribute %d truncated or bad name", i)
		}
		xs = append(xs, Xattr{Name: string(b[:nl]), Value: append([]byte{}, b[nl:nl+vl]...)})
		b = b[nl+vl:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%d trailing bytes", len(b))
	}
	return xs, nil
}
