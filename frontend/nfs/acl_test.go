package nfs

import (
	"context"
	"testing"

	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/filesys/acl"
)

// TestACL: the gateway enforces POSIX ACLs (NFSv3 carries none: a client
// sees the mode, the gateway decides with the list): a user the file's
// ACL names reads and writes, ACCESS says so; a user it does not name
// gets NFS3ERR_ACCES, and ACCESS grants it nothing; a member of a named
// group is let in by the group's entry, within the mask.
func TestACL(t *testing.T) {
	ctx := context.Background()
	fsys := testFS(t)
	s, addr := serve(t, fsys, Options{})
	f, err := fsys.Create(ctx, filesys.RootIno, "f", 0o600, filesys.Caller{Uid: 100, Gid: 100}, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Write(ctx, f.Ino, f.Gen, []byte("hello"), 0, false); err != nil {
		t.Fatal(err)
	}
	list := acl.ACL{
		{Tag: acl.TagUserObj, Perm: 6, ID: acl.UndefinedID},
		{Tag: acl.TagUser, Perm: 6, ID: 1001},
		{Tag: acl.TagGroupObj, Perm: 0, ID: acl.UndefinedID},
		{Tag: acl.TagGroup, Perm: 7, ID: 3000},
		{Tag: acl.TagMask, Perm: 6, ID: acl.UndefinedID}, // rw-; r-- after the chmod below
		{Tag: acl.TagOther, Perm: 0, ID: acl.UndefinedID},
	}
	if err := fsys.Setxattr(ctx, f.Ino, acl.XattrAccess, list.Encode(), 0); err != nil {
		t.Fatal(err)
	}
	fh := s.h.make(f.Ino, f.Gen)
	as := func(uid, gid uint32) *rawClient {
		rc := dialRaw(t, addr)
		rc.uid, rc.gid = uid, gid
		return rc
	}
	accessOf := func(rc *rawClient) uint32 {
		d := rc.call(progNFS, 4, func(e *encoder) { e.opaque(fh); e.u32(0x3f) })
		if st := d.u32(); st != nfsOK {
			t.Fatalf("ACCESS: status %d", st)
		}
		skipPostOp(d)
		return d.u32()
	}

	named, stranger, member := as(1001, 1001), as(1002, 1002), as(1003, 3000)
	if st, b, _ := named.read(fh, 0, 100); st != nfsOK || string(b) != "hello" {
		t.Fatalf("named user READ: status %d, %q", st, b)
	}
	if st, _, _ := named.write(fh, 5, []byte(" world"), 2); st != nfsOK {
		t.Fatalf("named user WRITE: status %d", st)
	}
	if got := accessOf(named); got != accessRead|accessModify|accessExtend {
		t.Fatalf("named user ACCESS = %#x, want read|modify|extend", got)
	}
	if st, _, _ := stranger.read(fh, 0, 100); st != nfsErrAcces {
		t.Fatalf("stranger READ: status %d, want NFS3ERR_ACCES", st)
	}
	if st, _, _ := stranger.write(fh, 0, []byte("x"), 2); st != nfsErrAcces {
		t.Fatalf("stranger WRITE: status %d, want NFS3ERR_ACCES", st)
	}
	if got := accessOf(stranger); got != 0 {
		t.Fatalf("stranger ACCESS = %#x, want 0", got)
	}
	// The named group's rwx within the mask (rw-).
	if got := accessOf(member); got != accessRead|accessModify|accessExtend {
		t.Fatalf("named group member ACCESS = %#x, want read|modify|extend (rwx within mask rw-)", got)
	}

	// A chmod rewrites the mask (g=r): the named user may no longer write.
	mode := uint32(0o640)
	if _, err := fsys.Setattr(ctx, f.Ino, filesys.SetAttr{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := named.write(fh, 0, []byte("x"), 2); st != nfsErrAcces {
		t.Fatalf("named user WRITE after chmod 640: status %d, want NFS3ERR_ACCES", st)
	}
	if got := accessOf(named); got != accessRead {
		t.Fatalf("named user ACCESS after chmod 640 = %#x, want read", got)
	}
	if st, b, _ := named.read(fh, 0, 100); st != nfsOK || string(b) != "hello world" {
		t.Fatalf("named user READ after chmod: status %d, %q", st, b)
	}
}
