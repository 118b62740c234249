package filesys

// Permission decisions for callers no kernel checked.
//
// FS methods check no permissions. Over FUSE the kernel decides them
// (default_permissions) against the attributes we returned; over NFS
// nothing does, so the gateway asks the methods here first. They decide,
// with POSIX ACLs (Attr.ACL), what Linux decides in generic_permission
// (acl_permission_check, posix_acl_permission) and may_delete
// (fs/namei.c) and in setattr_prepare and notify_change (fs/attr.c, with
// the checks utimes and truncate make before them). Uid 0 holds every
// capability those consult (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH,
// CAP_FOWNER, CAP_CHOWN, CAP_FSETID); squashing root is the gateway's.
//
// They are pure: no I/O, no locks. They read the attributes the caller
// got (Getattr, Lookup), so the check is not atomic with the change that
// follows: a chmod on another node between the two goes unseen, the same
// as the kernel's check over FUSE with default_permissions.

import (
	"fmt"
	"syscall"

	"github.com/plumeria-fs/plumeria/filesys/acl"
)

// Access bits a caller wants, as access(2)'s X_OK, W_OK, R_OK and the
// kernel's MAY_EXEC, MAY_WRITE, MAY_READ; combine them with |.
const (
	MayExec  = 1 // execute a file, search a directory
	MayWrite = 2
	MayRead  = 4
)

// InGroup reports whether gid is c's primary group or one of its
// supplementary groups (the kernel's in_group_p).
func (c Caller) InGroup(gid uint32) bool {
	if c.Gid == gid {
		return true
	}
	for _, g := range c.Groups {
		if g == gid {
			return true
		}
	}
	return false
}

// Permits reports whether c may have the access in want (MayRead,
// MayWrite, MayExec or'ed; other bits are ignored) to an inode with
// attributes a, as generic_permission: the owner gets the owner bits;
// with an access ACL (a.ACL) and group bits in the mode, everyone else
// gets what the list grants (posix_acl_permission: a named user its
// entry, a member of matching groups what one of them grants, all within
// the mask; else other); without one, a member of the file's group the
// group bits, else everyone the other bits; one class only, even when a
// later one would allow more. Root may read and write anything and
// search any directory, but execute a non-directory only if one of its
// x bits is set.
func (c Caller) Permits(a Attr, want uint32) bool {
	want &= MayRead | MayWrite | MayExec
	if c.granted(a, want) {
		return true
	}
	if c.Uid != 0 {
		return false
	}
	if a.Mode&typeMask == typeDir {
		return true
	}
	return want&MayExec == 0 || a.Mode&0o111 != 0
}

// granted is acl_permission_check: what the mode, or the ACL, grants c.
func (c Caller) granted(a Attr, want uint32) bool {
	if c.Uid != a.Uid && a.ACL != nil && a.Mode&0o070 != 0 {
		return a.ACL.Permits(c.Uid, c.InGroup, a.Uid, a.Gid, uint16(want))
	}
	return want&^c.classBits(a) == 0
}

// classBits is the rwx bits of a's mode for the class c falls in.
func (c Caller) classBits(a Attr) uint32 {
	switch {
	case c.Uid == a.Uid:
		return a.Mode >> 6 & 7
	case c.InGroup(a.Gid):
		return a.Mode >> 3 & 7
	}
	return a.Mode & 7
}

// CheckAccess is Permits as an error: nil, or ErrAccess saying who wanted
// what of which inode.
func (c Caller) CheckAccess(a Attr, want uint32) error {
	if c.Permits(a, want) {
		return nil
	}
	return c.refuse(ErrAccess, a, "have "+accessVerb(want)+" access to")
}

func accessVerb(want uint32) string {
	return acl.PermString(uint16(want & (MayRead | MayWrite | MayExec)))
}

// MayDelete decides whether c may remove the name of victim from dir, as
// may_delete: it needs write and search permission on dir (else
// ErrAccess), and in a sticky directory (S_ISVTX, /tmp) it must own dir
// or victim or be root (else ErrNotPermitted, Linux's EPERM). It serves
// unlink, rmdir, and rename for the source name and for a target name it
// replaces. Linux's rename asks one more thing of a directory moved to
// another parent: write permission on the directory itself (its "..").
func (c Caller) MayDelete(dir, victim Attr) error {
	if err := c.CheckAccess(dir, MayWrite|MayExec); err != nil {
		return err
	}
	if dir.Mode&syscall.S_ISVTX == 0 || c.Uid == 0 || c.Uid == dir.Uid || c.Uid == victim.Uid {
		return nil
	}
	return fmt.Errorf("%w: uid %d may not remove inode %d (owner %d) from sticky directory %d (owner %d)",
		ErrNotPermitted, c.Uid, victim.Ino, victim.Uid, dir.Ino, dir.Uid)
}

// CheckSetattr decides whether c may make change set to an inode with
// attributes a, and returns the change to apply. In the order knfsd and
// Linux check:
//   - a size needs write permission (truncate(2)): ErrAccess;
//   - Atime or Mtime with TimesNow needs the owner, root or write
//     permission (utimes(NULL)): ErrAccess;
//   - a Uid needs root, or the owner leaving the owner as it is;
//   - a Gid needs root, or the owner naming the file's group or one of
//     its own;
//   - a Mode needs the owner or root;
//   - Atime or Mtime without TimesNow needs the owner or root;
//
// all four ErrNotPermitted. The change returned differs from set in two
// ways, as Linux's: a Mode from a non-root caller outside the file's group
// (the new one, if set changes it) loses S_ISGID; a Uid or Gid on a
// non-directory sets KillPriv, for root too (chown clears setuid and
// setgid since Linux 2.2.13; Setattr applies Mode before it, as knfsd
// does when a chmod and a chown come together). Unlike knfsd, the owner
// gets no write permission the mode denies it (NFSD_MAY_OWNER_OVERRIDE,
// which lets a file created read-only be written and truncated over NFS);
// a gateway that wants that decides it before asking.
func (c Caller) CheckSetattr(a Attr, set SetAttr) (SetAttr, error) {
	owner := c.Uid == 0 || c.Uid == a.Uid // inode_owner_or_capable
	times := set.Atime != nil || set.Mtime != nil
	if set.Size != nil && !c.Permits(a, MayWrite) {
		return SetAttr{}, c.refuse(ErrAccess, a, "change the size of")
	}
	if times && set.TimesNow && !owner && !c.Permits(a, MayWrite) {
		return SetAttr{}, c.refuse(ErrAccess, a, "set to now the times of")
	}
	if set.Uid != nil && !c.mayChown(a, *set.Uid) {
		return SetAttr{}, c.refuse(ErrNotPermitted, a, fmt.Sprintf("change to %d the owner of", *set.Uid))
	}
	if set.Gid != nil && !c.mayChgrp(a, *set.Gid) {
		return SetAttr{}, c.refuse(ErrNotPermitted, a, fmt.Sprintf("change to %d the group of", *set.Gid))
	}
	if set.Mode != nil {
		if !owner {
			return SetAttr{}, c.refuse(ErrNotPermitted, a, "change the mode of")
		}
		gid := a.Gid
		if set.Gid != nil {
			gid = *set.Gid
		}
		if c.Uid != 0 && !c.InGroup(gid) {
			mode := *set.Mode &^ syscall.S_ISGID // a copy: set's Mode is the caller's
			set.Mode = &mode
		}
	}
	if times && !set.TimesNow && !owner {
		return SetAttr{}, c.refuse(ErrNotPermitted, a, "set the times of")
	}
	if (set.Uid != nil || set.Gid != nil) && a.Mode&typeMask != typeDir {
		set.KillPriv = true
	}
	return set, nil
}

// mayChown is the kernel's chown_ok.
func (c Caller) mayChown(a Attr, uid uint32) bool {
	return c.Uid == 0 || (c.Uid == a.Uid && uid == a.Uid)
}

// mayChgrp is the kernel's chgrp_ok.
func (c Caller) mayChgrp(a Attr, gid uint32) bool {
	return c.Uid == 0 || (c.Uid == a.Uid && (gid == a.Gid || c.InGroup(gid)))
}

// refuse says why c gets sentinel err: "uid 5 may not <what> inode 9 (...)".
func (c Caller) refuse(err error, a Attr, what string) error {
	return fmt.Errorf("%w: uid %d may not %s inode %d (mode %o, owner %d:%d)",
		err, c.Uid, what, a.Ino, a.Mode&0o7777, a.Uid, a.Gid)
}
