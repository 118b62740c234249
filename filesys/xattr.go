package filesys

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/plumeria-fs/plumeria/filesys/acl"
	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// XattrValueBytesMax bounds one attribute value (all of an inode's
// attributes share its block with inline data).
const XattrValueBytesMax = layout.InlineBytes

func checkXattrName(name string) error {
	switch {
	case len(name) == 0 || len(name) > layout.XattrNameMax:
		return fmt.Errorf("%w: attribute name of %d bytes", ErrRange, len(name))
	case isACLName(name):
	case strings.HasPrefix(name, "system."):
		return fmt.Errorf("%w: %s (of system.*, only %s and %s are)", ErrNotSupported, name, acl.XattrAccess, acl.XattrDefault)
	case !strings.HasPrefix(name, "user.") && !strings.HasPrefix(name, "trusted.") && !strings.HasPrefix(name, "security."):
		return fmt.Errorf("%w: attribute namespace of %q", ErrNotSupported, name)
	}
	return nil
}

// Getxattr returns the value of attribute name of ino.
func (fs *FS) Getxattr(ctx context.Context, ino uint64, name string) ([]byte, error) {
	if strings.HasPrefix(name, "system.") && !isACLName(name) {
		return nil, fmt.Errorf("%w: %s", ErrNoAttr, name)
	}
	if err := checkXattrName(name); err != nil {
		return nil, err
	}
	if name == LayoutXattr {
		return fs.layoutXattr(ctx, ino)
	}
	if v, ok, err := fs.quotaGetxattr(ctx, ino, name); ok {
		return v, err
	}
	h, err := fs.acquire(ctx, r(inodeLock(ino)))
	if err != nil {
		return nil, err
	}
	defer h.release()
	in, err := fs.newTx(ctx).inode(ino)
	if err != nil {
		return nil, err
	}
	for _, x := range in.Xattrs {
		if x.Name == name {
			return x.Value, nil
		}
	}
	return nil, fmt.Errorf("%w: %s", ErrNoAttr, name)
}

// Listxattr returns the names of ino's attributes.
func (fs *FS) Listxattr(ctx context.Context, ino uint64) ([]string, error) {
	h, err := fs.acquire(ctx, r(inodeLock(ino)))
	if err != nil {
		return nil, err
	}
	defer h.release()
	in, err := fs.newTx(ctx).inode(ino)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(in.Xattrs))
	for i, x := range in.Xattrs {
		names[i] = x.Name
	}
	return names, nil
}

// Setxattr sets attribute name of ino (flags XattrCreate, XattrReplace).
func (fs *FS) Setxattr(ctx context.Context, ino uint64, name string, value []byte, flags uint32) (err error) {
	if err := checkXattrName(name); err != nil {
		return err
	}
	if len(value) > XattrValueBytesMax {
		return fmt.Errorf("%w: attribute value of %d bytes", ErrAttrTooBig, len(value))
	}
	if ok, err := fs.quotaSetxattr(ctx, ino, name, value, false); ok {
		return err
	}
	switch name {
	case RetentionXattr:
		if _, err := ParseRetention(string(value)); err != nil {
			return err
		}
	case PolicyXattr:
		p, perr := fs.admitPolicy(ctx, ino, value)
		if perr != nil {
			return perr
		}
		value = []byte(p.String())
		defer func() {
			if err == nil {
				fs.policyChanged(ino)
			}
		}()
	case LayoutXattr:
		return fmt.Errorf("%w: %s is made by the file system", ErrNotPermitted, name)
	case acl.XattrAccess, acl.XattrDefault:
		a, err := parseACL(name, value)
		if err != nil {
			return err
		}
		return fs.changeACL(ctx, ino, name, a, flags)
	}
	return fs.changeXattrs(ctx, ino, func(xs []layout.Xattr) ([]layout.Xattr, error) {
		i := slices.IndexFunc(xs, func(x layout.Xattr) bool { return x.Name == name })
		switch {
		case i >= 0 && flags&XattrCreate != 0:
			return nil, fmt.Errorf("%w: attribute %s", ErrExists, name)
		case i < 0 && flags&XattrReplace != 0:
			return nil, fmt.Errorf("%w: %s", ErrNoAttr, name)
		case i >= 0:
			xs[i].Value = append([]byte{}, value...)
			return xs, nil
		}
		return append(xs, layout.Xattr{Name: name, Value: append([]byte{}, value...)}), nil
	})
}

// Removexattr removes attribute name of ino.
func (fs *FS) Removexattr(ctx context.Context, ino uint64, name string) (err error) {
	if err := checkXattrName(name); err != nil {
		return err
	}
	if ok, err := fs.quotaSetxattr(ctx, ino, name, nil, true); ok {
		return err
	}
	switch name {
	case PolicyXattr:
		defer func() {
			if err == nil {
				fs.policyChanged(ino)
			}
		}()
	case LayoutXattr:
		return fmt.Errorf("%w: %s is made by the file system", ErrNotPermitted, name)
	case acl.XattrAccess, acl.XattrDefault:
		// As removing it with setfacl -b or -k: the mode stays.
		return fs.changeACL(ctx, ino, name, nil, XattrReplace)
	}
	return fs.changeXattrs(ctx, ino, func(xs []layout.Xattr) ([]layout.Xattr, error) {
		i := slices.IndexFunc(xs, func(x layout.Xattr) bool { return x.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("%w: %s", ErrNoAttr, name)
		}
		return slices.Delete(xs, i, i+1), nil
	})
}

func (fs *FS) changeXattrs(ctx context.Context, ino uint64, change func([]layout.Xattr) ([]layout.Xattr, error)) error {
	return fs.changeInode(ctx, ino, func(_ *tx, in *layout.Inode) error {
		xs, err := change(slices.Clone(in.Xattrs))
		if err != nil {
			return err
		}
		in.Xattrs = xs
		return nil
	})
}

// changeACL sets (a non-empty) or removes ACL name of ino, and the mode
// with an access list (acl.go, applyACL), in one transaction under the
// inode's lock. flags are Setxattr's: XattrReplace with no list stored is
// ErrNoAttr, XattrCreate with one is ErrExists (an access list equivalent
// to the mode counts as none stored); XattrACLKillSGID clears setgid.
func (fs *FS) changeACL(ctx context.Context, ino uint64, name string, a acl.ACL, flags uint32) error {
	return fs.changeInode(ctx, ino, func(t *tx, in *layout.Inode) error {
		_, had := xattrOf(in, name)
		switch {
		case had && flags&XattrCreate != 0:
			return fmt.Errorf("%w: inode %d has a %s", ErrExists, ino, name)
		case !had && flags&XattrReplace != 0:
			return fmt.Errorf("%w: inode %d has no %s", ErrNoAttr, ino, name)
		}
		if name == acl.XattrAccess && len(a) > 0 {
			// A pending version's record is this inode: written before
			// the permissions it shows change (as Setattr).
			fs.materialize(t, ino, in)
		}
		if err := applyACL(ino, in, name, a); err != nil {
			return err
		}
		if name == acl.XattrAccess && len(a) > 0 && flags&XattrACLKillSGID != 0 {
			in.Mode &^= syscall.S_ISGID
		}
		return nil
	})
}

// changeInode applies change to inode ino in a transaction holding its
// lock, and stamps its ctime.
func (fs *FS) changeInode(ctx context.Context, ino uint64, change func(*tx, *layout.Inode) error) error {
	h, err := fs.acquire(ctx, r(barrierLock), w(inodeLock(ino)))
	if err != nil {
		return err
	}
	defer h.release()
	t := fs.newTx(ctx)
	in, err := t.inode(ino)
	if err != nil {
		return err
	}
	if err := change(t, in); err != nil {
		return err
	}
	if !in.Fits() {
		return fmt.Errorf("%w: attributes of inode %d exceed its %d bytes", ErrNoSpace, ino, layout.InlineBytes)
	}
	in.Ctime = fs.now()
	if err := t.putInode(ino, in); err != nil {
		return err
	}
	return t.commit()
}

// statfsCache keeps the inode count for a few seconds.
type statfsCache struct {
	at         time.Time
	usedInodes uint64
}

// Statfs reports capacity (from the cluster) and inode counts (from the
// resource groups, read without locks: approximate while nodes allocate).
func (fs *FS) Statfs(ctx context.Context) (Statfs, error) {
	st := Statfs{Bsize: layout.BlockBytes, NameLen: NameBytesMax, Files: layout.InodesMax - 1}
	if fs.cfg.Capacity != nil {
		total, free, err := fs.cfg.Capacity(ctx)
		if err != nil {
			return Statfs{}, fmt.Errorf("%w: capacity: %v", ErrIO, err)
		}
		st.Blocks, st.Bfree, st.Bavail = total/layout.BlockBytes, free/layout.BlockBytes, free/layout.BlockBytes
	}
	used, err := fs.usedInodes(ctx)
	if err != nil {
		return Statfs{}, err
	}
	st.Ffree = st.Files - min(st.Files, used)
	return st, nil
}

func (fs *FS) usedInodes(ctx context.Context) (uint64, error) {
	fs.mu.Lock()
	c := fs.mu.statfs
	fs.mu.Unlock()
	if time.Since(c.at) < 5*time.Second {
		return c.usedInodes, nil
	}
	buf := make([]byte, layout.RGsMax*layout.BlockBytes)
	if err := fs.cfg.Dev.ReadAt(ctx, buf, layout.RGBase); err != nil {
		return 0, fs.ioError("read resource groups", layout.RGBase, err)
	}
	var used uint64
	for g := 0; g < layout.RGsMax; g++ {
		if rg, err := layout.DecodeRG(buf[g*layout.BlockBytes:(g+1)*layout.BlockBytes], g); err == nil {
			used += uint64(rg.Used)
		}
	}
	fs.mu.Lock()
	fs.mu.statfs = statfsCache{at: time.Now(), usedInodes: used}
	fs.mu.Unlock()
	return used, nil
}
