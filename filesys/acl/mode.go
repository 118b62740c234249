package acl

// The algebra between a list and a mode, as fs/posix_acl.c. Modes here
// are st_mode values: only their rwx bits (0o777) are read or changed,
// the file type and setuid, setgid and sticky bits pass through.

// FromMode is the minimal list equivalent to mode's permission bits.
func FromMode(mode uint32) ACL {
	return ACL{
		{Tag: TagUserObj, Perm: uint16(mode >> 6 & 7), ID: UndefinedID},
		{Tag: TagGroupObj, Perm: uint16(mode >> 3 & 7), ID: UndefinedID},
		{Tag: TagOther, Perm: uint16(mode & 7), ID: UndefinedID},
	}
}

// EquivMode is posix_acl_equiv_mode: the mode whose permission bits a
// (Valid) shows, mode's other bits kept, the mask as the group bits when
// there is one; and whether a says no more than that mode (no mask, no
// named entry), so that it need not be stored.
func (a ACL) EquivMode(mode uint32) (uint32, bool) {
	var m uint32
	equiv := true
	for _, e := range a {
		p := uint32(e.Perm & permMask)
		switch e.Tag {
		case TagUserObj:
			m |= p << 6
		case TagGroupObj:
			m |= p << 3
		case TagOther:
			m |= p
		case TagMask:
			m = m&^0o070 | p<<3 // the mask comes after the group: it wins
			equiv = false
		case TagUser, TagGroup:
			equiv = false
		}
	}
	return mode&^modePermMask | m, equiv
}

// Permits is posix_acl_permission: whether a (Valid) grants want (rwx
// bits, Read|Write|Exec) to the caller uid, a member of the groups
// inGroup reports, of a file owned by owner. The owner gets the
// TagUserObj entry; a named user its entry within the mask; else every
// group entry that matches (the file's group, group:gid, for a member)
// is tried, within the mask, and one granting all of want suffices; a
// caller matching some group entry but granted by none is refused;
// anyone else gets TagOther. Capabilities (root) are the caller's to add.
func (a ACL) Permits(uid uint32, inGroup func(gid uint32) bool, owner, group uint32, want uint16) bool {
	want &= permMask
	mask := uint16(permMask)
	for _, e := range a {
		if e.Tag == TagMask {
			mask = e.Perm
		}
	}
	found := false
	for _, e := range a {
		switch e.Tag {
		case TagUserObj:
			if uid == owner {
				return e.Perm&want == want
			}
		case TagUser:
			if e.ID == uid {
				return e.Perm&mask&want == want
			}
		case TagGroupObj, TagGroup:
			gid := e.ID
			if e.Tag == TagGroupObj {
				gid = group
			}
			if inGroup(gid) {
				found = true
				if e.Perm&mask&want == want {
					return true
				}
			}
		case TagOther:
			return !found && e.Perm&want == want
		}
	}
	return false // not Valid: no TagOther
}

// Create is posix_acl_create for a file of mode made in a directory
// whose default list is def (Valid, non-empty): the new file's mode
// (mode's permission bits within what def grants) and access list (nil
// when the mode says it all), and, for a directory, the default list it
// inherits (def itself). The umask is not applied: def replaces it.
func Create(def ACL, mode uint32) (newMode uint32, access, inherited ACL) {
	a := append(ACL(nil), def...)
	m := mode & modePermMask
	var groupObj, maskObj *Entry
	equiv := true
	for i := range a {
		e := &a[i]
		switch e.Tag {
		case TagUserObj:
			e.Perm &= uint16(m >> 6 & 7)
			m &= uint32(e.Perm)<<6 | ^uint32(0o700)
		case TagUser, TagGroup:
			equiv = false
		case TagGroupObj:
			groupObj = e
		case TagOther:
			e.Perm &= uint16(m & 7)
			m &= uint32(e.Perm) | ^uint32(0o007)
		case TagMask:
			maskObj, equiv = e, false
		}
	}
	g := maskObj
	if g == nil {
		g = groupObj
	}
	if g != nil { // always, for a Valid list
		g.Perm &= uint16(m >> 3 & 7)
		m &= uint32(g.Perm)<<3 | ^uint32(0o070)
	}
	newMode = mode&^modePermMask | m
	if !equiv {
		access = a
	}
	if mode&0o170000 == 0o040000 { // S_IFDIR
		inherited = append(ACL(nil), def...)
	}
	return newMode, access, inherited
}

// Chmod is __posix_acl_chmod: a (Valid) after a chmod to mode: the
// owner and other entries take mode's bits, and the mask (or, without
// one, the group entry) the group bits; named entries stay.
func (a ACL) Chmod(mode uint32) ACL {
	b := append(ACL(nil), a...)
	g := -1
	for i := range b {
		switch b[i].Tag {
		case TagUserObj:
			b[i].Perm = uint16(mode >> 6 & 7)
		case TagOther:
			b[i].Perm = uint16(mode & 7)
		case TagGroupObj:
			if g < 0 {
				g = i
			}
		case TagMask:
			g = i
		}
	}
	if g >= 0 {
		b[g].Perm = uint16(mode >> 3 & 7)
	}
	return b
}
