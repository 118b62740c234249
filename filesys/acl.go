package filesys

// POSIX ACLs (docs/acls.md). An inode's two lists are kept as its
// attributes system.posix_acl_access and system.posix_acl_default, in
// the encoding the kernel sends (filesys/acl), inside the inode block
// like every attribute: so they change under the inode's lock, in the
// transaction that changes the mode with them, and another node's next
// call sees both (its invalidation drops the kernel's cached lists with
// the attributes: docs/caching.md). Invariants kept here:
//   - the access list is stored only when the mode cannot say it
//     (posix_acl_equiv_mode), and the mode's group bits are its mask;
//   - a default list is stored only on a directory;
//   - every stored list is Valid (decoded before it is stored).

import (
	"fmt"
	"slices"

	"github.com/plumeria-fs/plumeria/filesys/acl"
	"github.com/plumeria-fs/plumeria/filesys/dir"
	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// Both lists at their largest (with their xattr headers) fit in an
// inode block beside the smallest root a directory may have: a compile
// error otherwise.
const _ = uint(layout.InlineBytes - 2 - 2*(3+len(acl.XattrDefault)+acl.EncodedMax) - dir.InlineBytesMin)

func isACLName(name string) bool { return name == acl.XattrAccess || name == acl.XattrDefault }

// xattrOf returns in's attribute name, if it has it.
func xattrOf(in *layout.Inode, name string) ([]byte, bool) {
	for _, x := range in.Xattrs {
		if x.Name == name {
			return x.Value, true
		}
	}
	return nil, false
}

// setXattr sets (value non-nil) or removes attribute name of in.
func setXattr(in *layout.Inode, name string, value []byte) {
	i := slices.IndexFunc(in.Xattrs, func(x layout.Xattr) bool { return x.Name == name })
	switch {
	case value == nil && i >= 0:
		in.Xattrs = slices.Delete(slices.Clone(in.Xattrs), i, i+1)
	case value == nil:
	case i >= 0:
		in.Xattrs = slices.Clone(in.Xattrs)
		in.Xattrs[i].Value = value
	default:
		in.Xattrs = append(slices.Clone(in.Xattrs), layout.Xattr{Name: name, Value: value})
	}
}

// storedACL decodes in's list name; nil if it has none. A list that does
// not decode (a damaged block) is ErrIO.
func storedACL(ino uint64, in *layout.Inode, name string) (acl.ACL, error) {
	v, ok := xattrOf(in, name)
	if !ok {
		return nil, nil
	}
	a, err := acl.Decode(v)
	if err != nil || len(a) == 0 {
		return nil, fmt.Errorf("%w: inode %d: stored %s: %v", ErrIO, ino, name, err)
	}
	return a, nil
}

// accessACLOf is in's access list for Attr: nil without one, an empty
// list (which grants nothing, Caller.Permits) if it does not decode.
func accessACLOf(in *layout.Inode) acl.ACL {
	v, ok := xattrOf(in, acl.XattrAccess)
	if !ok {
		return nil
	}
	a, err := acl.Decode(v)
	if err != nil || len(a) == 0 {
		return acl.ACL{}
	}
	return a
}

// parseACL decodes a list a caller sets: an empty one (header only)
// removes the list, as the kernel does; a list that makes no sense is
// ErrInvalid saying why.
func parseACL(name string, value []byte) (acl.ACL, error) {
	a, err := acl.Decode(value)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, name, err)
	}
	return a, nil
}

// applyACL sets list name of inode ino (in, changed in place) to a (nil
// or empty: remove it), as set_posix_acl with posix_acl_update_mode: an
// access list sets the mode's permission bits and is stored only when
// the mode cannot say it; a default list needs a directory.
func applyACL(ino uint64, in *layout.Inode, name string, a acl.ACL) error {
	if len(a) == 0 {
		setXattr(in, name, nil)
		return nil
	}
	if name == acl.XattrDefault {
		if !isDir(in) {
			// EACCES, as Linux's set_posix_acl.
			return fmt.Errorf("%w: a default ACL on inode %d, which is not a directory (mode %o)", ErrAccess, ino, in.Mode)
		}
		setXattr(in, name, a.Encode())
		return nil
	}
	mode, equiv := a.EquivMode(in.Mode)
	in.Mode = mode
	if equiv {
		setXattr(in, name, nil)
	} else {
		setXattr(in, name, a.Encode())
	}
	return nil
}

// chmodACL keeps in's access list in step with a new mode
// (posix_acl_chmod): called after in.Mode changed.
func chmodACL(ino uint64, in *layout.Inode) error {
	a, err := storedACL(ino, in, acl.XattrAccess)
	if err != nil || a == nil {
		return err
	}
	setXattr(in, acl.XattrAccess, a.Chmod(in.Mode).Encode())
	return nil
}

// inheritACL sets up new inode in (its mode as asked) made in directory
// pin by c: with a default list on pin, posix_acl_create (the umask is
// not applied); without, the umask. Symlinks take neither.
func inheritACL(pino uint64, pin, in *layout.Inode, c Caller) error {
	if in.Mode&typeMask == typeLnk {
		return nil
	}
	def, err := storedACL(pino, pin, acl.XattrDefault)
	if err != nil {
		return err
	}
	if def == nil {
		in.Mode &^= c.Umask & 0o777
		return nil
	}
	mode, access, inherited := acl.Create(def, in.Mode)
	in.Mode = mode
	if access != nil {
		setXattr(in, acl.XattrAccess, access.Encode())
	}
	if inherited != nil {
		setXattr(in, acl.XattrDefault, inherited.Encode())
	}
	return nil
}
