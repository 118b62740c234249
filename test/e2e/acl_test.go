package e2e

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	nfsc "github.com/willscott/go-nfs-client/nfs"
	"golang.org/x/sys/unix"
)

// TestFSACL is the acceptance test of POSIX ACLs (docs/acls.md) on two
// FUSE mounts of one volume, with setfacl/getfacl and processes running
// as other users: a user an ACL names may read and write, one it does not
// name may not; default ACLs are inherited by new files and directories
// (and the umask is not applied under them); an ACL or mode change on one
// mount is seen by the other mount's very next call (the invalidation on
// the lock's revoke drops the kernel's cached lists: no timeouts, no
// retries); all of it again after an unmount and remount; an ACL that
// makes no sense is refused and loses nothing.
func TestFSACL(t *testing.T) {
	for _, tool := range []string{"setfacl", "getfacl", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (make deps installs acl and util-linux)", tool)
		}
	}
	c := newFSCluster(t)
	a, b := c.mountNode("n1"), c.mountNode("n2")
	const named, stranger = 1001, 1002

	// The mount points sit under a 0700 directory: users reach files by a
	// working directory inside the mount, set while still root.
	mustRun(t, "", "mkdir", "-m", "0755", filepath.Join(a, "s"))
	sa, sb := filepath.Join(a, "s"), filepath.Join(b, "s")
	if err := os.WriteFile(filepath.Join(sa, "f"), []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// B's kernel first caches f's attributes and (absent) ACL.
	denied(t, sb, named, "cat", "f")
	mustRun(t, sa, "setfacl", "-m", fmt.Sprintf("u:%d:rw", named), "f")
	// B's next call: the named user reads and writes, a stranger not.
	allowed(t, sb, named, "cat", "f")
	allowed(t, sb, named, "sh", "-c", "echo more >> f")
	denied(t, sb, stranger, "cat", "f")
	if got := facl(t, sb, "f"); !strings.Contains(got, fmt.Sprintf("user:%d:rw-", named)) || !strings.Contains(got, "mask::rw-") {
		t.Fatalf("getfacl through B:\n%s", got)
	}
	if st := stat(t, filepath.Join(sb, "f")); st.Mode&0o777 != 0o660 {
		t.Fatalf("mode after setfacl u:%d:rw on a 0600 file: %o, want 660 (group bits = mask)", named, st.Mode&0o777)
	}

	// An ACL-only change (mode unchanged): B's kernel must drop the list
	// it cached, not only the attributes.
	denied(t, sb, stranger, "cat", "f")
	mustRun(t, sa, "setfacl", "-m", fmt.Sprintf("u:%d:r", stranger), "f")
	allowed(t, sb, stranger, "cat", "f")
	denied(t, sb, stranger, "sh", "-c", "echo x >> f")
	// ... and back, the other way round: B removes, A's next call is refused.
	allowed(t, sa, stranger, "cat", "f")
	mustRun(t, sb, "setfacl", "-x", fmt.Sprintf("u:%d", stranger), "f")
	denied(t, sa, stranger, "cat", "f")

	// chmod on B rewrites the mask; A sees it at once.
	allowed(t, sa, named, "sh", "-c", "echo even more >> f")
	mustRun(t, sb, "chmod", "0640", "f")
	denied(t, sa, named, "sh", "-c", "echo no >> f")
	allowed(t, sa, named, "cat", "f")
	if got := facl(t, sa, "f"); !strings.Contains(got, "mask::r--") {
		t.Fatalf("getfacl after chmod 0640 on the other mount:\n%s", got)
	}

	// Default ACLs: inherited by files and directories, the umask not
	// applied under them; it is applied where there is none.
	mustRun(t, sa, "mkdir", "-m", "0755", "d", "plain")
	mustRun(t, sa, "setfacl", "-d", "-m", fmt.Sprintf("u:%d:rwx", named), "d")
	mustRun(t, sb, "sh", "-c", "umask 077 && echo new > d/new && mkdir d/sub && echo deep > d/sub/deep && echo p > plain/p")
	for _, tc := range []struct {
		path string
		mode uint32
	}{{"d/new", 0o664}, {"d/sub", 0o775}, {"d/sub/deep", 0o664}, {"plain/p", 0o600}} {
		if st := stat(t, filepath.Join(sa, tc.path)); st.Mode&0o777 != tc.mode {
			t.Errorf("%s: mode %o, want %o", tc.path, st.Mode&0o777, tc.mode)
		}
	}
	allowed(t, sa, named, "sh", "-c", "echo w >> d/new && echo w >> d/sub/deep && touch d/sub/byuser")
	denied(t, sa, stranger, "sh", "-c", "echo w >> d/new")
	denied(t, sa, stranger, "touch", "d/sub/bystranger")
	denied(t, sa, named, "sh", "-c", "echo w >> plain/p")
	if got := facl(t, sa, "d/sub"); !strings.Contains(got, fmt.Sprintf("default:user:%d:rwx", named)) {
		t.Fatalf("d/sub did not inherit the default ACL:\n%s", got)
	}

	// setgid: the owner outside the file's group setting an access ACL
	// loses it (the kernel says so: FUSE_SETXATTR_ACL_KILL_SGID); root
	// keeps it.
	mustRun(t, sa, "sh", "-c", fmt.Sprintf("touch sg sgroot && chown %d:5000 sg && chmod 2770 sg sgroot", named))
	allowed(t, sa, named, "setfacl", "-m", fmt.Sprintf("u:%d:r", stranger), "sg")
	mustRun(t, sa, "setfacl", "-m", fmt.Sprintf("u:%d:r", stranger), "sgroot")
	if st := stat(t, filepath.Join(sb, "sg")); st.Mode&0o7777 != 0o770 {
		t.Fatalf("sg: mode %o after its owner, outside group 5000, set an ACL; want 770 (setgid cleared)", st.Mode&0o7777)
	}
	if st := stat(t, filepath.Join(sb, "sgroot")); st.Mode&0o7777 != 0o2770 {
		t.Fatalf("sgroot: mode %o after root set an ACL; want 2770", st.Mode&0o7777)
	}

	// Refusals: clear errors, nothing lost.
	before := facl(t, sa, "f")
	out, err := run(sa, "setfacl", "-d", "-m", fmt.Sprintf("u:%d:r", named), "f")
	if err == nil {
		t.Fatalf("a default ACL on a file was accepted: %s", out)
	}
	// Named entry without a mask: the kernel checks it before we do, we
	// check it again (filesys TestACLRefusals); either way EINVAL.
	bad := []byte{2, 0, 0, 0, 1, 0, 6, 0, 0xff, 0xff, 0xff, 0xff, 2, 0, 6, 0, 0xe9, 3, 0, 0,
		4, 0, 4, 0, 0xff, 0xff, 0xff, 0xff, 0x20, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}
	if err := unix.Setxattr(filepath.Join(sa, "f"), "system.posix_acl_access", bad, 0); err != unix.EINVAL {
		t.Fatalf("an ACL with a named user and no mask: %v, want EINVAL", err)
	}
	if after := facl(t, sb, "f"); after != before {
		t.Fatalf("refused ACLs changed f:\n%s\nwas:\n%s", after, before)
	}

	// After an unmount and a remount, everything holds.
	c.stop("n1")
	a = c.mountNode("n1")
	sa = filepath.Join(a, "s")
	if after := facl(t, sa, "f"); after != before {
		t.Fatalf("after remount:\n%s\nwas:\n%s", after, before)
	}
	allowed(t, sa, named, "cat", "f")
	denied(t, sa, named, "sh", "-c", "echo no >> f")
	denied(t, sa, stranger, "cat", "f")
	allowed(t, sa, named, "sh", "-c", "echo w >> d/sub/deep")
	denied(t, sa, stranger, "sh", "-c", "echo w >> d/sub/deep")
	mustRun(t, sa, "sh", "-c", "umask 077 && echo again > d/sub/again")
	if st := stat(t, filepath.Join(sb, "d/sub/again")); st.Mode&0o777 != 0o664 {
		t.Fatalf("after remount, a file under the default ACL: mode %o, want 664", st.Mode&0o777)
	}

	// Removal: setfacl -b (extended entries) and -k (the default ACL);
	// the other mount's next call sees both.
	mustRun(t, sb, "setfacl", "-b", "f")
	mustRun(t, sb, "setfacl", "-k", "d/sub")
	denied(t, sa, named, "cat", "f")
	if got := facl(t, sa, "f"); got != "user::rw-\ngroup::---\nother::---\n\n" {
		t.Fatalf("after setfacl -b f, getfacl on the other mount:\n%s", got)
	}
	if got := facl(t, sa, "d/sub"); strings.Contains(got, "default:") || !strings.Contains(got, fmt.Sprintf("user:%d:rwx", named)) {
		t.Fatalf("after setfacl -k d/sub (its access ACL stays), getfacl on the other mount:\n%s", got)
	}
	mustRun(t, sa, "sh", "-c", "umask 077 && echo plain > d/sub/plain")
	if st := stat(t, filepath.Join(sa, "d/sub/plain")); st.Mode&0o777 != 0o600 {
		t.Fatalf("after setfacl -k, a new file: mode %o, want 600 (the umask again)", st.Mode&0o777)
	}
}

// run runs args as root in dir.
func run(dir string, args ...string) (string, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustRun(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := run(dir, args...)
	if err != nil {
		t.Fatalf("%s in %s: %v: %s", strings.Join(args, " "), dir, err, out)
	}
	return out
}

// asUser runs args in dir as uid (and gid uid, no other groups).
func asUser(dir string, uid int, args ...string) (string, error) {
	return run(dir, append([]string{"setpriv", fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", uid), "--clear-groups", "--"}, args...)...)
}

func allowed(t *testing.T, dir string, uid int, args ...string) {
	t.Helper()
	if out, err := asUser(dir, uid, args...); err != nil {
		t.Fatalf("uid %d: %s in %s: %v: %s", uid, strings.Join(args, " "), dir, err, out)
	}
}

func denied(t *testing.T, dir string, uid int, args ...string) {
	t.Helper()
	out, err := asUser(dir, uid, args...)
	if err == nil {
		t.Fatalf("uid %d was allowed: %s in %s", uid, strings.Join(args, " "), dir)
	}
	if !strings.Contains(out, "Permission denied") {
		t.Fatalf("uid %d: %s in %s failed, but not for want of permission: %v: %s", uid, strings.Join(args, " "), dir, err, out)
	}
}

// facl is getfacl's output (numeric ids, no header comments).
func facl(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return mustRun(t, dir, append([]string{"getfacl", "-n", "--omit-header"}, args...)...)
}

func stat(t *testing.T, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestNFSACL: the NFS gateway (another fs node) enforces the POSIX ACLs
// set through a FUSE mount, and the mount's changes at its very next
// call: a user the ACL names reads, one it does not name is refused;
// removing the entry on the mount refuses the named user at once.
func TestNFSACL(t *testing.T) {
	if _, err := exec.LookPath("setfacl"); err != nil {
		t.Skip("setfacl not installed (make deps installs acl)")
	}
	c := startFSCluster(t, nil)
	mnt := c.mountNode("n1")
	gw := c.startGateway("gw", "fs", "--allow", "127.0.0.1/32")
	c.waitGateway(gw)
	const named, stranger = 1001, 1002
	mustRun(t, "", "mkdir", "-m", "0755", filepath.Join(mnt, "s"))
	if err := os.WriteFile(filepath.Join(mnt, "s", "f"), []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tn, err := mountNFS(t, gw.addr, "/fs", named, named)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := mountNFS(t, gw.addr, "/fs", stranger, stranger)
	if err != nil {
		t.Fatal(err)
	}
	read := func(tg *nfsc.Target) error {
		f, err := tg.Open("s/f")
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err = f.Read(make([]byte, 16)); errors.Is(err, io.EOF) {
			return nil // the last data comes with io.EOF
		}
		return err
	}
	if err := read(tn); err == nil {
		t.Fatal("uid 1001 read a 0600 file of root's before any ACL")
	}
	mustRun(t, filepath.Join(mnt, "s"), "setfacl", "-m", fmt.Sprintf("u:%d:r", named), "f")
	if err := read(tn); err != nil {
		t.Fatalf("uid %d, named in the ACL, over NFS: %v", named, err)
	}
	if err := read(ts); err == nil || !strings.Contains(err.Error(), "ACCES") {
		t.Fatalf("uid %d, not named, over NFS: %v (want NFS3ERR_ACCES)", stranger, err)
	}
	mustRun(t, filepath.Join(mnt, "s"), "setfacl", "-x", fmt.Sprintf("u:%d", named), "f")
	if err := read(tn); err == nil || !strings.Contains(err.Error(), "ACCES") {
		t.Fatalf("uid %d after its entry was removed on the mount: %v (want NFS3ERR_ACCES)", named, err)
	}
}
