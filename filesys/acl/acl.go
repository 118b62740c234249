// Package acl is POSIX access control lists as Linux keeps them
// (fs/posix_acl.c): their extended-attribute encoding, a decoder that
// refuses lists that make no sense, and the algebra between a list and a
// file's mode (permission, equivalence, creation, chmod).
//
// It is pure: no I/O, no locks, no errno. The file system stores the
// encoded lists (filesys/xattr.go); the kernel over FUSE and the NFS
// gateway (filesys/access.go) decide permissions with them.
//
// Guarantee: every ACL Decode returns is Valid, and Encode(Decode(b))
// decodes to the same list.
package acl

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/plumeria-fs/plumeria/internal/limits"
)

// Names of the two attributes, as the kernel and setfacl(1) use them.
const (
	XattrAccess  = "system.posix_acl_access"
	XattrDefault = "system.posix_acl_default"
)

// Wire format of both attributes (include/uapi/linux/posix_acl_xattr.h),
// little-endian:
//
//	| version u32 = 2 | entry 0 | entry 1 | ... |
//	entry: | tag u16 | perm u16 | id u32 |
//
// id is a uid (TagUser) or gid (TagGroup), UndefinedID for the other
// tags. Part of the Linux ABI: never edit.
const (
	Version      = 2
	headerBytes  = 4
	entryBytes   = 8
	UndefinedID  = 0xFFFFFFFF
	EntriesMax   = limits.ACLEntriesMax // ext4 fits about 500 in a block; we share ours
	EncodedMax   = headerBytes + EntriesMax*entryBytes
	permMask     = 7
	modePermMask = 0o777
)

// Tags of entries, in the order a valid list has them.
const (
	TagUserObj  = 0x01 // the file's owner
	TagUser     = 0x02 // a named user
	TagGroupObj = 0x04 // the file's group
	TagGroup    = 0x08 // a named group
	TagMask     = 0x10 // the most any named entry or the group may get
	TagOther    = 0x20 // everyone else
)

// Permission bits of an entry, as MAY_READ, MAY_WRITE, MAY_EXEC.
const (
	Read  = 4
	Write = 2
	Exec  = 1
)

// ErrInvalid is returned for a list that makes no sense; the error says why.
var ErrInvalid = errors.New("acl: invalid ACL")

// Entry is one line of a list: who (Tag, ID) gets what (Perm, rwx bits).
type Entry struct {
	Tag  uint16
	Perm uint16
	ID   uint32 // TagUser: uid, TagGroup: gid, else UndefinedID
}

// ACL is a list of entries in canonical order (Valid).
type ACL []Entry

// Decode reads an attribute value. A value with no entries decodes as
// an empty, non-nil list: the kernel treats it as removing the ACL.
// Errors wrap ErrInvalid and say which entry is wrong.
func Decode(b []byte) (ACL, error) {
	switch {
	case len(b) < headerBytes:
		return nil, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrInvalid, len(b), headerBytes)
	case len(b) > EncodedMax:
		return nil, fmt.Errorf("%w: %d bytes: more than %d entries", ErrInvalid, len(b), EntriesMax)
	case (len(b)-headerBytes)%entryBytes != 0:
		return nil, fmt.Errorf("%w: %d bytes is not a header and whole %d-byte entries", ErrInvalid, len(b), entryBytes)
	}
	le := binary.LittleEndian
	if v := le.Uint32(b); v != Version {
		return nil, fmt.Errorf("%w: version %d (want %d)", ErrInvalid, v, Version)
	}
	a := make(ACL, 0, (len(b)-headerBytes)/entryBytes)
	for p := b[headerBytes:]; len(p) > 0; p = p[entryBytes:] {
		e := Entry{Tag: le.Uint16(p), Perm: le.Uint16(p[2:]), ID: le.Uint32(p[4:])}
		if e.Tag != TagUser && e.Tag != TagGroup {
			e.ID = UndefinedID // the kernel ignores it too
		}
		a = append(a, e)
	}
	if len(a) == 0 {
		return a, nil
	}
	if err := a.Valid(); err != nil {
		return nil, err
	}
	return a, nil
}

// Encode returns the attribute value of a.
func (a ACL) Encode() []byte {
	b := make([]byte, headerBytes, headerBytes+len(a)*entryBytes)
	le := binary.LittleEndian
	le.PutUint32(b, Version)
	for _, e := range a {
		b = le.AppendUint16(b, e.Tag)
		b = le.AppendUint16(b, e.Perm)
		b = le.AppendUint32(b, e.ID)
	}
	return b
}

// Valid checks what posix_acl_valid checks, and that named entries are
// sorted by id without duplicates (as setfacl writes them, and as
// Permits assumes nothing about): exactly one TagUserObj, TagGroupObj
// and TagOther, named users and groups between them, a TagMask if any
// named entry is present, perms within rwx, at most EntriesMax entries.
func (a ACL) Valid() error {
	if len(a) > EntriesMax {
		return fmt.Errorf("%w: %d entries (at most %d)", ErrInvalid, len(a), EntriesMax)
	}
	// state is the next tag class allowed: as in posix_acl_valid.
	state, named := TagUserObj, false
	var prevTag uint16
	var prevID uint32
	for i, e := range a {
		if e.Perm&^permMask != 0 {
			return fmt.Errorf("%w: entry %d (%s) has permission bits %#o beyond rwx", ErrInvalid, i, e, e.Perm)
		}
		ok := false
		switch e.Tag {
		case TagUserObj:
			ok, state = state == TagUserObj, TagUser
		case TagUser:
			ok, named = state == TagUser, true
		case TagGroupObj:
			ok, state = state == TagUser, TagGroup
		case TagGroup:
			ok, named = state == TagGroup, true
		case TagMask:
			ok, state = state == TagGroup, TagMask
		case TagOther:
			ok, state = state == TagMask || (state == TagGroup && !named), 0
		default:
			return fmt.Errorf("%w: entry %d has unknown tag %#x", ErrInvalid, i, e.Tag)
		}
		if !ok {
			return fmt.Errorf("%w: entry %d (%s) is out of place (order: user::, user:ID, group::, group:ID, mask::, other::, one each but named ones; a mask is required with named entries)", ErrInvalid, i, e)
		}
		if (e.Tag == TagUser || e.Tag == TagGroup) && e.Tag == prevTag && e.ID <= prevID {
			if e.ID == prevID {
				return fmt.Errorf("%w: entry %d (%s) names id %d twice", ErrInvalid, i, e, e.ID)
			}
			return fmt.Errorf("%w: entry %d (%s) is not sorted by id", ErrInvalid, i, e)
		}
		prevTag, prevID = e.Tag, e.ID
	}
	if state != 0 {
		if len(a) == 0 {
			return fmt.Errorf("%w: no entries", ErrInvalid)
		}
		return fmt.Errorf("%w: missing entries (a list needs user::, group:: and other::, and mask:: with named entries)", ErrInvalid)
	}
	return nil
}

// String is the entry as getfacl(1) shows it: "user:1001:rw-".
func (e Entry) String() string {
	var who string
	switch e.Tag {
	case TagUserObj:
		who = "user:"
	case TagUser:
		who = fmt.Sprintf("user:%d", e.ID)
	case TagGroupObj:
		who = "group:"
	case TagGroup:
		who = fmt.Sprintf("group:%d", e.ID)
	case TagMask:
		who = "mask:"
	case TagOther:
		who = "other:"
	default:
		who = fmt.Sprintf("tag%#x:%d", e.Tag, e.ID)
	}
	return who + ":" + PermString(e.Perm)
}

// String is the list in getfacl's short form, entries separated by ",".
func (a ACL) String() string {
	s := ""
	for i, e := range a {
		if i > 0 {
			s += ","
		}
		s += e.String()
	}
	return s
}

// PermString is p as the three letters rwx ('-' where a bit is off), as
// getfacl and ls show permissions; bits beyond them are added in octal.
func PermString(p uint16) string {
	b := []byte("---")
	if p&Read != 0 {
		b[0] = 'r'
	}
	if p&Write != 0 {
		b[1] = 'w'
	}
	if p&Exec != 0 {
		b[2] = 'x'
	}
	if p&^permMask != 0 {
		return string(b) + fmt.Sprintf("+%#o", p&^permMask)
	}
	return string(b)
}
