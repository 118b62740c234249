package filesys

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/plumeria-fs/plumeria/filesys/acl"
)

func aclOf(es ...acl.Entry) acl.ACL { return acl.ACL(es) }

var (
	userObj  = func(p uint16) acl.Entry { return acl.Entry{Tag: acl.TagUserObj, Perm: p, ID: acl.UndefinedID} }
	user     = func(id uint32, p uint16) acl.Entry { return acl.Entry{Tag: acl.TagUser, Perm: p, ID: id} }
	groupObj = func(p uint16) acl.Entry { return acl.Entry{Tag: acl.TagGroupObj, Perm: p, ID: acl.UndefinedID} }
	mask     = func(p uint16) acl.Entry { return acl.Entry{Tag: acl.TagMask, Perm: p, ID: acl.UndefinedID} }
	other    = func(p uint16) acl.Entry { return acl.Entry{Tag: acl.TagOther, Perm: p, ID: acl.UndefinedID} }
)

func getACL(t *testing.T, fs *FS, ino uint64, name string) acl.ACL {
	t.Helper()
	v, err := fs.Getxattr(context.Background(), ino, name)
	if errors.Is(err, ErrNoAttr) {
		return nil
	}
	if err != nil {
		t.Fatalf("getxattr %s of %d: %v", name, ino, err)
	}
	a, err := acl.Decode(v)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestACLSetGetChmod(t *testing.T) {
	ctx := context.Background()
	dev := formatted(t)
	fs := openSolo(t, dev, "a")
	owner := Caller{Uid: 100, Gid: 100}
	f, err := fs.Create(ctx, RootIno, "f", 0o640, owner, true)
	if err != nil {
		t.Fatal(err)
	}
	// A named user with rw, mask rw: the mode's group bits become the mask.
	a := aclOf(userObj(6), user(1001, 6), groupObj(4), mask(6), other(0))
	if err := fs.Setxattr(ctx, f.Ino, acl.XattrAccess, a.Encode(), 0); err != nil {
		t.Fatal(err)
	}
	got, err := fs.Getattr(ctx, f.Ino)
	if err != nil {
		t.Fatal(err)
	}
	if got.Mode&0o7777 != 0o660 || !slices.Equal(got.ACL, a) {
		t.Fatalf("after setfacl: mode %o ACL %s; want 660 and %s", got.Mode&0o7777, got.ACL, a)
	}
	if g := getACL(t, fs, f.Ino, acl.XattrAccess); !slices.Equal(g, a) {
		t.Fatalf("getxattr = %s", g)
	}
	names, _ := fs.Listxattr(ctx, f.Ino)
	if !slices.Contains(names, acl.XattrAccess) {
		t.Fatalf("listxattr = %v", names)
	}

	// The gateway's check: the named user may read and write, another may not.
	named, stranger := Caller{Uid: 1001, Gid: 1001}, Caller{Uid: 1002, Gid: 1002}
	if !named.Permits(got, MayRead|MayWrite) || named.Permits(got, MayExec) {
		t.Fatal("named user: want rw, not x")
	}
	if stranger.Permits(got, MayRead) {
		t.Fatal("a user the ACL does not name may read")
	}
	if !(Caller{Uid: 5, Gid: 100}).Permits(got, MayRead) || (Caller{Uid: 5, Gid: 100}).Permits(got, MayWrite) {
		t.Fatal("file's group: want r only (group:: r--)")
	}

	// chmod rewrites the ACL (posix_acl_chmod): the mask follows the group bits.
	mode := uint32(0o604)
	if _, err := fs.Setattr(ctx, f.Ino, SetAttr{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	want := aclOf(userObj(6), user(1001, 6), groupObj(4), mask(0), other(4))
	if g := getACL(t, fs, f.Ino, acl.XattrAccess); !slices.Equal(g, want) {
		t.Fatalf("after chmod 604: %s, want %s", g, want)
	}
	got, _ = fs.Getattr(ctx, f.Ino)
	// With no group bits (mask::---) Linux skips the ACL
	// (acl_permission_check): the named user is "other" (r--) again.
	if !named.Permits(got, MayRead) || named.Permits(got, MayWrite) {
		t.Fatal("after chmod 604 the named user should get other's r-- only")
	}

	// Kept across a remount.
	if err := fs.Close(ctx); err != nil {
		t.Fatal(err)
	}
	fs = openSolo(t, dev, "a")
	defer fs.Close(ctx)
	if g := getACL(t, fs, f.Ino, acl.XattrAccess); !slices.Equal(g, want) {
		t.Fatalf("after remount: %s, want %s", g, want)
	}

	// An ACL equivalent to a mode is stored as the mode alone.
	if err := fs.Setxattr(ctx, f.Ino, acl.XattrAccess, aclOf(userObj(7), groupObj(5), other(1)).Encode(), 0); err != nil {
		t.Fatal(err)
	}
	got, _ = fs.Getattr(ctx, f.Ino)
	if got.Mode&0o7777 != 0o751 || got.ACL != nil || getACL(t, fs, f.Ino, acl.XattrAccess) != nil {
		t.Fatalf("equivalent ACL: mode %o, ACL %s (want 751, none stored)", got.Mode&0o7777, got.ACL)
	}
	names, _ = fs.Listxattr(ctx, f.Ino)
	if slices.Contains(names, acl.XattrAccess) {
		t.Fatalf("listxattr after an equivalent ACL = %v", names)
	}

	// removexattr leaves the mode.
	if err := fs.Setxattr(ctx, f.Ino, acl.XattrAccess, a.Encode(), 0); err != nil {
		t.Fatal(err)
	}
	if err := fs.Removexattr(ctx, f.Ino, acl.XattrAccess); err != nil {
		t.Fatal(err)
	}
	got, _ = fs.Getattr(ctx, f.Ino)
	if got.ACL != nil || got.Mode&0o777 != 0o660 {
		t.Fatalf("after removexattr: mode %o ACL %s", got.Mode&0o777, got.ACL)
	}
	if err := fs.Removexattr(ctx, f.Ino, acl.XattrAccess); !errors.Is(err, ErrNoAttr) {
		t.Fatalf("second removexattr: %v", err)
	}
}

func TestACLRefusals(t *testing.T) {
	ctx := context.Background()
	fs := openSolo(t, formatted(t), "a")
	defer fs.Close(ctx)
	f, err := fs.Create(ctx, RootIno, "f", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := fs.Getattr(ctx, f.Ino)
	for name, v := range map[string][]byte{
		"named without mask": aclOf(userObj(6), user(1001, 6), groupObj(4), other(0)).Encode(),
		"duplicate user":     aclOf(userObj(6), user(1001, 6), user(1001, 4), groupObj(4), mask(6), other(0)).Encode(),
		"perm 8":             aclOf(userObj(8), groupObj(4), other(0)).Encode(),
		"version 1":          append([]byte{1, 0, 0, 0}, aclOf(userObj(6), groupObj(4), other(0)).Encode()[4:]...),
		"truncated":          aclOf(userObj(6), groupObj(4), other(0)).Encode()[:10],
	} {
		err := fs.Setxattr(ctx, f.Ino, acl.XattrAccess, v, 0)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), acl.XattrAccess) {
			t.Errorf("%s: %v, want ErrInvalid naming the attribute", name, err)
		}
	}
	// Nothing was lost or changed by the refusals.
	after, _ := fs.Getattr(ctx, f.Ino)
	if after.Mode != before.Mode || after.ACL != nil {
		t.Fatalf("refused ACLs changed the file: mode %o→%o, ACL %s", before.Mode, after.Mode, after.ACL)
	}
	// A default ACL only on a directory (EACCES, as Linux).
	err = fs.Setxattr(ctx, f.Ino, acl.XattrDefault, aclOf(userObj(7), groupObj(5), other(5)).Encode(), 0)
	if !errors.Is(err, ErrAccess) || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("default ACL on a file: %v", err)
	}
	// Other system.* names stay unsupported.
	if err := fs.Setxattr(ctx, f.Ino, "system.nfs4_acl", []byte{1}, 0); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("system.nfs4_acl: %v", err)
	}
	// XattrCreate / XattrReplace.
	a := aclOf(userObj(6), user(7, 6), groupObj(4), mask(6), other(0)).Encode()
	if err := fs.Setxattr(ctx, f.Ino, acl.XattrAccess, a, XattrReplace); !errors.Is(err, ErrNoAttr) {
		t.Fatalf("replace of no ACL: %v", err)
	}
	if err := fs.Setxattr(ctx, f.Ino, acl.XattrAccess, a, XattrCreate); err != nil {
		t.Fatal(err)
	}
	if err := fs.Setxattr(ctx, f.Ino, acl.XattrAccess, a, XattrCreate); !errors.Is(err, ErrExists) {
		t.Fatalf("create over an ACL: %v", err)
	}
	// A header alone removes the list, as the kernel treats it.
	if err := fs.Setxattr(ctx, f.Ino, acl.XattrAccess, []byte{2, 0, 0, 0}, 0); err != nil {
		t.Fatal(err)
	}
	if g := getACL(t, fs, f.Ino, acl.XattrAccess); g != nil {
		t.Fatalf("after an empty list: %s", g)
	}
}

func TestACLInheritAndUmask(t *testing.T) {
	ctx := context.Background()
	fs := openSolo(t, formatted(t), "a")
	defer fs.Close(ctx)
	c := Caller{Uid: 100, Gid: 100, Umask: 0o077}

	// Without a default ACL the umask applies.
	plain, err := fs.Mkdir(ctx, RootIno, "plain", 0o777, c)
	if err != nil {
		t.Fatal(err)
	}
	if plain.Mode&0o777 != 0o700 {
		t.Fatalf("mkdir 777 with umask 077: %o", plain.Mode&0o777)
	}
	pf, _ := fs.Create(ctx, plain.Ino, "f", 0o666, c, true)
	if pf.Mode&0o777 != 0o600 || pf.ACL != nil {
		t.Fatalf("create 666 with umask 077: %o %s", pf.Mode&0o777, pf.ACL)
	}
	s, _ := fs.Symlink(ctx, plain.Ino, "l", "f", c)
	if s.Mode&0o777 != 0o777 {
		t.Fatalf("symlink mode %o", s.Mode&0o777)
	}

	// With one, it replaces the umask (posix_acl_create).
	def := aclOf(userObj(7), user(1001, 7), groupObj(5), mask(7), other(5))
	if err := fs.Setxattr(ctx, plain.Ino, acl.XattrDefault, def.Encode(), 0); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create(ctx, plain.Ino, "g", 0o666, c, true)
	if err != nil {
		t.Fatal(err)
	}
	wantF := aclOf(userObj(6), user(1001, 7), groupObj(5), mask(6), other(4))
	if f.Mode&0o777 != 0o664 || !slices.Equal(f.ACL, wantF) || !slices.Equal(getACL(t, fs, f.Ino, acl.XattrAccess), wantF) {
		t.Fatalf("file in a dir with a default ACL: mode %o ACL %s, want 664 %s", f.Mode&0o777, f.ACL, wantF)
	}
	if getACL(t, fs, f.Ino, acl.XattrDefault) != nil {
		t.Fatal("a file inherited a default ACL")
	}
	if !(Caller{Uid: 1001}).Permits(f, MayRead|MayWrite) || (Caller{Uid: 1002}).Permits(f, MayWrite) {
		t.Fatal("inherited ACL: named user must read and write, another must not write")
	}
	d, err := fs.Mkdir(ctx, plain.Ino, "sub", 0o777, c)
	if err != nil {
		t.Fatal(err)
	}
	if d.Mode&0o777 != 0o775 || !slices.Equal(getACL(t, fs, d.Ino, acl.XattrDefault), def) || !slices.Equal(d.ACL, def) {
		t.Fatalf("dir in a dir with a default ACL: mode %o ACL %s default %s", d.Mode&0o777, d.ACL, getACL(t, fs, d.Ino, acl.XattrDefault))
	}
	// ... and further down: a grandchild inherits too.
	gf, _ := fs.Create(ctx, d.Ino, "deep", 0o600, c, true)
	if !slices.Equal(gf.ACL, aclOf(userObj(6), user(1001, 7), groupObj(5), mask(0), other(0))) || gf.Mode&0o777 != 0o600 {
		t.Fatalf("grandchild: mode %o ACL %s", gf.Mode&0o777, gf.ACL)
	}
	// The subdirectory still works as a directory with its lists in its block.
	for i := 0; i < 50; i++ {
		if _, err := fs.Create(ctx, d.Ino, strings.Repeat("n", 40)+string(rune('a'+i%26))+string(rune('a'+i/26)), 0o644, c, true); err != nil {
			t.Fatal(err)
		}
	}
	if ents, _, err := fs.ReadDir(ctx, d.Ino, 0, 100); err != nil || len(ents) != 51 {
		t.Fatalf("readdir of a dir with ACLs: %d entries, %v", len(ents), err)
	}
	// A minimal default ACL makes no access ACL: the mode says it.
	if err := fs.Setxattr(ctx, d.Ino, acl.XattrDefault, aclOf(userObj(7), groupObj(5), other(0)).Encode(), 0); err != nil {
		t.Fatal(err)
	}
	m, _ := fs.Mknod(ctx, d.Ino, "fifo", 0o010666, 0, c)
	if m.Mode&0o777 != 0o640 || m.ACL != nil {
		t.Fatalf("mknod under a minimal default: mode %o ACL %s", m.Mode&0o777, m.ACL)
	}
	if err := fs.Removexattr(ctx, d.Ino, acl.XattrDefault); err != nil {
		t.Fatal(err)
	}
	if n, _ := fs.Create(ctx, d.Ino, "after", 0o666, c, true); n.Mode&0o777 != 0o600 {
		t.Fatalf("after removing the default, the umask applies again: %o", n.Mode&0o777)
	}
}

// TestACLKillSGID: setting an access ACL with XattrACLKillSGID (the
// kernel's FUSE_SETXATTR_ACL_KILL_SGID) clears setgid; without it, or
// for a default ACL, setgid stays.
func TestACLKillSGID(t *testing.T) {
	ctx := context.Background()
	fs := openSolo(t, formatted(t), "a")
	defer fs.Close(ctx)
	a := aclOf(userObj(7), user(1001, 5), groupObj(5), mask(5), other(0)).Encode()
	for _, tc := range []struct {
		name  string
		flags uint32
		sgid  bool
	}{{"kill", XattrACLKillSGID, false}, {"keep", 0, true}} {
		f, err := fs.Create(ctx, RootIno, tc.name, 0o2750, Caller{Uid: 5, Gid: 5}, true)
		if err != nil {
			t.Fatal(err)
		}
		if f.Mode&0o2000 == 0 {
			t.Fatalf("created without setgid: %o", f.Mode)
		}
		if err := fs.Setxattr(ctx, f.Ino, acl.XattrAccess, a, tc.flags); err != nil {
			t.Fatal(err)
		}
		got, _ := fs.Getattr(ctx, f.Ino)
		if (got.Mode&0o2000 != 0) != tc.sgid || got.Mode&0o777 != 0o750 {
			t.Fatalf("%s: mode %o after setfacl, want setgid %v and 750", tc.name, got.Mode&0o7777, tc.sgid)
		}
	}
	d, _ := fs.Mkdir(ctx, RootIno, "d", 0o2755, Caller{})
	if err := fs.Setxattr(ctx, d.Ino, acl.XattrDefault, a, XattrACLKillSGID); err != nil {
		t.Fatal(err)
	}
	if got, _ := fs.Getattr(ctx, d.Ino); got.Mode&0o2000 == 0 {
		t.Fatal("a default ACL cleared setgid")
	}
}
