package posixtest

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

func caseMkdir(e *env) {
	d := e.p("d")
	e.ok("mkdir(0750)", d, unix.Mkdir(d, 0o750))
	st := e.stat(d)
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&0o7777 != 0o750&^e.umask {
		e.Errorf("stat %s: mode: expected directory %#o, got %#o", d, 0o750&^e.umask, st.Mode)
	}
	if st.Nlink != 2 {
		e.Errorf("stat %s: nlink of a new directory: expected 2, got %d", d, st.Nlink)
	}
	e.wantErr("mkdir of an existing directory", d, unix.Mkdir(d, 0o755), unix.EEXIST)
	f := e.p("f")
	e.create(f, nil)
	e.wantErr("mkdir of an existing file", f, unix.Mkdir(f, 0o755), unix.EEXIST)
	l := e.p("dangling")
	e.symlink("nowhere", l)
	e.wantErr("mkdir of a dangling symlink", l, unix.Mkdir(l, 0o755), unix.EEXIST)
	e.wantErr("mkdir in a missing directory", e.p("missing", "x"), unix.Mkdir(e.p("missing", "x"), 0o755), unix.ENOENT)
	e.wantErr("mkdir under a file", f+"/x", unix.Mkdir(f+"/x", 0o755), unix.ENOTDIR)
	e.ok("mkdir with a trailing slash", e.p("t")+"/", unix.Mkdir(e.p("t")+"/", 0o755))
	e.ok("mkdir nested", e.p("d", "e"), unix.Mkdir(e.p("d", "e"), 0o755))
	if st := e.stat(d); st.Nlink != 3 {
		e.Errorf("stat %s: nlink after mkdir of a subdirectory: expected 3, got %d", d, st.Nlink)
	}
	// ".." of the new directory is its parent.
	if a, b := e.stat(e.p("d", "e", "..")), e.stat(d); a.Ino != b.Ino {
		e.Errorf("stat %s/e/..: expected inode %d of %s, got %d", d, b.Ino, d, a.Ino)
	}
}

func caseRmdir(e *env) {
	d := e.p("d")
	e.mkdir(d)
	e.create(e.p("d", "f"), nil)
	e.wantErr("rmdir of a non-empty directory", d, unix.Rmdir(d), unix.ENOTEMPTY)
	e.wantErr("rmdir of a file", e.p("d", "f"), unix.Rmdir(e.p("d", "f")), unix.ENOTDIR)
	e.wantErr(`rmdir of "."`, d+"/.", unix.Rmdir(d+"/."), unix.EINVAL)
	e.wantErr(`rmdir of ".."`, d+"/..", unix.Rmdir(d+"/.."), unix.ENOTEMPTY)
	e.wantErr("rmdir of a missing directory", e.p("missing"), unix.Rmdir(e.p("missing")), unix.ENOENT)
	e.symlink("d", e.p("ld"))
	e.wantErr("rmdir of a symlink to a directory", e.p("ld"), unix.Rmdir(e.p("ld")), unix.ENOTDIR)
	e.ok("unlink", e.p("d", "f"), unix.Unlink(e.p("d", "f")))
	before := e.stat(e.dir).Nlink
	e.ok("rmdir of an empty directory", d, unix.Rmdir(d))
	e.wantGone(d)
	if after := e.stat(e.dir).Nlink; after != before-1 {
		e.Errorf("stat %s: nlink after rmdir of a subdirectory: expected %d, got %d", e.dir, before-1, after)
	}
	e.mkdir(d)
	e.ok("rmdir with a trailing slash", d+"/", unix.Rmdir(d+"/"))
}

func caseUnlink(e *env) {
	d, f := e.p("d"), e.p("f")
	e.mkdir(d)
	e.create(f, []byte("x"))
	e.wantErr("unlink of a directory", d, unix.Unlink(d), unix.EISDIR)
	e.wantErr("unlink of a missing file", e.p("missing"), unix.Unlink(e.p("missing")), unix.ENOENT)
	e.wantErr("unlink with a trailing slash", f+"/", unix.Unlink(f+"/"), unix.ENOTDIR)
	e.wantErr("unlink under a file", f+"/x", unix.Unlink(f+"/x"), unix.ENOTDIR)
	l := e.p("l")
	e.symlink("f", l)
	e.ok("unlink of a symlink", l, unix.Unlink(l))
	e.wantGone(l)
	e.wantData("read symlink target after unlink of the symlink", f, e.readFile(f), []byte("x"))
	e.ok("unlink", f, unix.Unlink(f))
	e.wantGone(f)
	e.wantErr("unlink twice", f, unix.Unlink(f), unix.ENOENT)
}

func caseRenameReplaceFile(e *env) {
	a, b := e.p("a"), e.p("b")
	e.create(a, []byte("AAA"))
	e.create(b, []byte("BBBBBB"))
	ino := e.stat(a).Ino
	e.ok("rename "+a, b, unix.Rename(a, b))
	e.wantGone(a)
	e.wantData("read rename target", b, e.readFile(b), []byte("AAA"))
	if st := e.stat(b); st.Ino != ino || st.Nlink != 1 {
		e.Errorf("stat %s after rename: expected inode %d nlink 1, got inode %d nlink %d", b, ino, st.Ino, st.Nlink)
	}
	e.wantErr("rename of a missing file", a, unix.Rename(a, b), unix.ENOENT)
	// A symlink is renamed, not its target.
	e.symlink("b", e.p("l"))
	e.ok("rename "+e.p("l"), e.p("m"), unix.Rename(e.p("l"), e.p("m")))
	if st := e.lstat(e.p("m")); st.Mode&unix.S_IFMT != unix.S_IFLNK {
		e.Errorf("lstat %s after renaming a symlink: expected a symlink, got mode %#o", e.p("m"), st.Mode)
	}
	e.wantData("read through renamed symlink", e.p("m"), e.readFile(e.p("m")), []byte("AAA"))
}

func caseRenameReplaceEmptyDir(e *env) {
	x, y := e.p("x"), e.p("y")
	e.mkdir(x)
	e.create(e.p("x", "f"), []byte("in x"))
	e.mkdir(y)
	ino := e.stat(x).Ino
	e.ok("rename "+x, y, unix.Rename(x, y))
	e.wantGone(x)
	if st := e.stat(y); st.Ino != ino {
		e.Errorf("stat %s after rename: expected inode %d, got %d", y, ino, st.Ino)
	}
	e.wantData("read after directory rename", e.p("y", "f"), e.readFile(e.p("y", "f")), []byte("in x"))
	if st := e.stat(e.dir); st.Nlink != 3 {
		e.Errorf("stat %s: nlink after replacing a directory: expected 3, got %d", e.dir, st.Nlink)
	}
}

func caseRenameNonEmptyTarget(e *env) {
	x, y := e.p("x"), e.p("y")
	e.mkdir(x)
	e.mkdir(y)
	e.create(e.p("y", "f"), nil)
	e.wantErr("rename onto a non-empty directory "+y, x, unix.Rename(x, y), unix.ENOTEMPTY)
	e.stat(x)
	e.stat(e.p("y", "f"))
}

func caseRenameFileOntoDir(e *env) {
	f, d := e.p("f"), e.p("d")
	e.create(f, []byte("f"))
	e.mkdir(d)
	e.wantErr("rename of a file onto a directory "+d, f, unix.Rename(f, d), unix.EISDIR)
	e.wantErr("rename of a file onto a non-empty directory "+e.dir, f, unix.Rename(f, e.dir), unix.EISDIR, unix.ENOTEMPTY, unix.EBUSY)
	e.wantData("read after failed rename", f, e.readFile(f), []byte("f"))
}

func caseRenameDirOntoFile(e *env) {
	f, d := e.p("f"), e.p("d")
	e.create(f, []byte("f"))
	e.mkdir(d)
	e.wantErr("rename of a directory onto a file "+f, d, unix.Rename(d, f), unix.ENOTDIR)
	e.wantErr("rename with a trailing slash onto a file "+f, d+"/", unix.Rename(d+"/", f), unix.ENOTDIR)
	e.wantErr("rename of a file with a trailing slash", f+"/", unix.Rename(f+"/", e.p("g")), unix.ENOTDIR)
	e.stat(d)
	e.wantData("read after failed rename", f, e.readFile(f), []byte("f"))
}

func caseRenameIntoOwnSubdir(e *env) {
	x := e.p("x")
	e.mkdir(x)
	e.mkdir(e.p("x", "sub"))
	e.wantErr("rename of a directory into itself "+e.p("x", "y"), x, unix.Rename(x, e.p("x", "y")), unix.EINVAL)
	e.wantErr("rename of a directory into its subdirectory "+e.p("x", "sub", "y"), x, unix.Rename(x, e.p("x", "sub", "y")), unix.EINVAL)
	e.wantErr("rename of a directory onto its subdirectory "+e.p("x", "sub"), x, unix.Rename(x, e.p("x", "sub")), unix.EINVAL, unix.ENOTEMPTY)
	e.wantErr("rename of a directory onto its parent "+e.dir, e.p("x", "sub"), unix.Rename(e.p("x", "sub"), e.dir), unix.ENOTEMPTY, unix.EBUSY, unix.EINVAL)
	e.wantErr(`rename of "." `, x+"/.", unix.Rename(x+"/.", e.p("z")), unix.EINVAL, unix.EBUSY)
	e.stat(e.p("x", "sub"))
}

func caseRenameAcrossDirs(e *env) {
	p, q := e.p("p"), e.p("q")
	e.mkdir(p)
	e.mkdir(q)
	e.create(e.p("p", "f"), []byte("file"))
	e.ok("rename "+e.p("p", "f"), e.p("q", "g"), unix.Rename(e.p("p", "f"), e.p("q", "g")))
	e.wantGone(e.p("p", "f"))
	e.wantData("read after rename across directories", e.p("q", "g"), e.readFile(e.p("q", "g")), []byte("file"))

	e.mkdir(e.p("p", "dd"))
	e.create(e.p("p", "dd", "child"), []byte("child"))
	e.ok("rename "+e.p("p", "dd"), e.p("q", "dd"), unix.Rename(e.p("p", "dd"), e.p("q", "dd")))
	e.wantGone(e.p("p", "dd"))
	e.wantData("read child of moved directory", e.p("q", "dd", "child"), e.readFile(e.p("q", "dd", "child")), []byte("child"))
	if a, b := e.stat(e.p("q", "dd", "..")), e.stat(q); a.Ino != b.Ino {
		e.Errorf("stat %s/dd/.. after move: expected inode %d of new parent, got %d", q, b.Ino, a.Ino)
	}
	if st := e.stat(p); st.Nlink != 2 {
		e.Errorf("stat %s: nlink after moving its subdirectory away: expected 2, got %d", p, st.Nlink)
	}
	if st := e.stat(q); st.Nlink != 3 {
		e.Errorf("stat %s: nlink after receiving a subdirectory: expected 3, got %d", q, st.Nlink)
	}
	// Replace a file in another directory.
	e.create(e.p("p", "h"), []byte("new"))
	e.ok("rename "+e.p("p", "h"), e.p("q", "g"), unix.Rename(e.p("p", "h"), e.p("q", "g")))
	e.wantData("read replaced file", e.p("q", "g"), e.readFile(e.p("q", "g")), []byte("new"))
	e.wantErr("rename into a missing directory", e.p("q", "g"), unix.Rename(e.p("q", "g"), e.p("missing", "g")), unix.ENOENT)
}

func caseRenameOntoItself(e *env) {
	a := e.p("a")
	e.create(a, []byte("same"))
	e.ok("rename onto itself", a, unix.Rename(a, a))
	e.wantData("read after rename onto itself", a, e.readFile(a), []byte("same"))
	// Two hard links to one file: rename is a no-op, both names stay.
	b := e.p("b")
	e.ok("link "+a, b, unix.Link(a, b))
	e.ok("rename onto a hard link of itself "+b, a, unix.Rename(a, b))
	e.stat(a)
	if st := e.stat(b); st.Nlink != 2 {
		e.Errorf("stat %s after rename between hard links: expected nlink 2, got %d", b, st.Nlink)
	}
	d := e.p("d")
	e.mkdir(d)
	e.ok("rename of a directory onto itself", d, unix.Rename(d, d))
	e.stat(d)
}

func caseRenameAtomic(e *env) {
	// The target never disappears while it is being replaced, and each read
	// sees one whole version.
	target := e.p("target")
	const size = 10000
	version := func(i int) []byte { return []byte(strings.Repeat(string(rune('a'+i%26)), size)) }
	e.create(target, version(0))
	var stop atomic.Bool
	var wg sync.WaitGroup
	var bad atomic.Value
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				b, err := os.ReadFile(target)
				if err != nil {
					bad.CompareAndSwap(nil, fmt.Sprintf("read %s during renames: %s", target, errnoString(err)))
					return
				}
				if len(b) != size || strings.Count(string(b), string(b[0])) != size {
					bad.CompareAndSwap(nil, fmt.Sprintf("read %s during renames: torn content (%d bytes)", target, len(b)))
					return
				}
			}
		}()
	}
	for i := 1; i <= 200 && bad.Load() == nil; i++ {
		tmp := e.p(fmt.Sprintf("tmp%d", i))
		e.create(tmp, version(i))
		if !e.check("rename "+tmp, target, unix.Rename(tmp, target)) {
			break
		}
		var st unix.Stat_t
		if err := unix.Lstat(tmp, &st); errnoOf(err) != unix.ENOENT {
			e.Errorf("lstat %s right after rename: expected ENOENT, got %s", tmp, errnoString(err))
		}
	}
	stop.Store(true)
	wg.Wait()
	if m := bad.Load(); m != nil {
		e.Error(m)
	}
}

func caseRenameFlags(e *env) {
	a, b := e.p("a"), e.p("b")
	e.create(a, []byte("A"))
	e.create(b, []byte("B"))
	err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_NOREPLACE)
	if en := errnoOf(err); en == unix.EINVAL || en == unix.ENOSYS || en == unix.EOPNOTSUPP {
		e.Skipf("renameat2(RENAME_NOREPLACE) %s: not supported (%s)", a, errnoString(err))
	}
	e.wantErr("renameat2(RENAME_NOREPLACE) onto "+b, a, err, unix.EEXIST)
	e.ok("renameat2(RENAME_NOREPLACE) to "+e.p("c"), a, unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, e.p("c"), unix.RENAME_NOREPLACE))
	e.wantGone(a)
	err = unix.Renameat2(unix.AT_FDCWD, e.p("c"), unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
	if en := errnoOf(err); en == unix.EINVAL || en == unix.EOPNOTSUPP {
		e.Logf("renameat2(RENAME_EXCHANGE): not supported (%s), not checked", errnoString(err))
		return
	}
	e.ok("renameat2(RENAME_EXCHANGE) with "+b, e.p("c"), err)
	e.wantData("read after exchange", b, e.readFile(b), []byte("A"))
	e.wantData("read after exchange", e.p("c"), e.readFile(e.p("c")), []byte("B"))
	e.wantErr("renameat2(RENAME_EXCHANGE) with a missing name", b, unix.Renameat2(unix.AT_FDCWD, b, unix.AT_FDCWD, e.p("missing"), unix.RENAME_EXCHANGE), unix.ENOENT)
}

func caseLink(e *env) {
	f, g := e.p("f"), e.p("g")
	e.create(f, []byte("shared"))
	e.ok("link "+f, g, unix.Link(f, g))
	sf, sg := e.stat(f), e.stat(g)
	if sf.Ino != sg.Ino || sf.Nlink != 2 || sg.Nlink != 2 {
		e.Errorf("stat after link: expected one inode with nlink 2, got %s ino %d nlink %d, %s ino %d nlink %d", f, sf.Ino, sf.Nlink, g, sg.Ino, sg.Nlink)
	}
	fd := e.open(g, unix.O_WRONLY, 0)
	e.pwriteAll(fd, g, []byte("SH"), 0)
	unix.Close(fd)
	e.wantData("read through the other link", f, e.readFile(f), []byte("SHared"))
	e.mkdir(e.p("sub"))
	h := e.p("sub", "h")
	e.ok("link "+f, h, unix.Link(f, h))
	if st := e.stat(f); st.Nlink != 3 {
		e.Errorf("stat %s: nlink after second link: expected 3, got %d", f, st.Nlink)
	}
	e.ok("unlink", f, unix.Unlink(f))
	if st := e.stat(g); st.Nlink != 2 {
		e.Errorf("stat %s: nlink after unlink of another link: expected 2, got %d", g, st.Nlink)
	}
	e.wantData("read after unlink of another link", h, e.readFile(h), []byte("SHared"))

	d := e.p("d")
	e.mkdir(d)
	e.wantErr("link of a directory to "+e.p("d2"), d, unix.Link(d, e.p("d2")), unix.EPERM)
	e.wantErr("link onto an existing name "+h, g, unix.Link(g, h), unix.EEXIST)
	e.wantErr("link of a missing file", f, unix.Link(f, e.p("x")), unix.ENOENT)
	e.wantErr("link into a missing directory", g, unix.Link(g, e.p("missing", "x")), unix.ENOENT)
}

func caseSymlink(e *env) {
	f, l := e.p("f"), e.p("l")
	e.create(f, []byte("target data"))
	e.symlink("f", l)
	buf := make([]byte, 8192)
	n, err := unix.Readlink(l, buf)
	e.ok("readlink", l, err)
	if string(buf[:n]) != "f" {
		e.Errorf("readlink %s: expected %q, got %q", l, "f", buf[:n])
	}
	if st := e.lstat(l); st.Mode&unix.S_IFMT != unix.S_IFLNK || st.Size != 1 {
		e.Errorf("lstat %s: expected a symlink of size 1, got mode %#o size %d", l, st.Mode, st.Size)
	}
	if st := e.stat(l); st.Mode&unix.S_IFMT != unix.S_IFREG || st.Ino != e.stat(f).Ino {
		e.Errorf("stat %s: expected to follow to %s", l, f)
	}
	e.wantData("read through symlink", l, e.readFile(l), []byte("target data"))
	_, err = unix.Open(l, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	e.wantErr("open(O_RDONLY|O_NOFOLLOW) of a symlink", l, err, unix.ELOOP)
	_, err = unix.Readlink(f, buf)
	e.wantErr("readlink of a regular file", f, err, unix.EINVAL)
	_, err = unix.Readlink(e.p("missing"), buf)
	e.wantErr("readlink of a missing name", e.p("missing"), err, unix.ENOENT)
	e.wantErr("symlink onto an existing name", l, unix.Symlink("x", l), unix.EEXIST)
	e.wantErr("symlink with an empty target", e.p("empty"), unix.Symlink("", e.p("empty")), unix.ENOENT)

	// Dangling: lstat works, stat and open say ENOENT, O_CREAT creates the target.
	dl := e.p("dangling")
	e.symlink("nowhere", dl)
	e.lstat(dl)
	var st unix.Stat_t
	e.wantErr("stat of a dangling symlink", dl, unix.Stat(dl, &st), unix.ENOENT)
	_, err = unix.Open(dl, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	e.wantErr("open(O_RDONLY) of a dangling symlink", dl, err, unix.ENOENT)
	fd := e.open(dl, unix.O_WRONLY|unix.O_CREAT, 0o644)
	unix.Close(fd)
	e.stat(e.p("nowhere"))

	// Relative targets resolve from the link's directory; links to directories traverse.
	e.mkdir(e.p("d"))
	e.create(e.p("d", "inner"), []byte("inner"))
	e.symlink("../f", e.p("d", "up"))
	e.wantData("read through relative symlink", e.p("d", "up"), e.readFile(e.p("d", "up")), []byte("target data"))
	e.symlink("d", e.p("ld"))
	e.wantData("read through symlinked directory", e.p("ld", "inner"), e.readFile(e.p("ld", "inner")), []byte("inner"))
	abs := e.p("abs")
	e.symlink(e.p("d", "inner"), abs)
	e.wantData("read through absolute symlink", abs, e.readFile(abs), []byte("inner"))

	// Long target, read back exactly.
	full := strings.Repeat("0123456789/", 372) + "end" // 4095 bytes
	long := full
	if m := e.opts.SymlinkMax; m > 0 && m < len(long) {
		long = long[len(long)-m:]
	}
	ll := e.p("long")
	e.ok(fmt.Sprintf("symlink with a %d-byte target", len(long)), ll, unix.Symlink(long, ll))
	n, err = unix.Readlink(ll, buf)
	e.ok("readlink", ll, err)
	if string(buf[:n]) != long {
		e.Errorf("readlink %s: expected the %d-byte target, got %d bytes", ll, len(long), n)
	}
	if st := e.lstat(ll); st.Size != int64(len(long)) {
		e.Errorf("lstat %s: size: expected %d, got %d", ll, len(long), st.Size)
	}
	e.wantErr("symlink with a 4096-byte target", e.p("toolong"), unix.Symlink(full+"x", e.p("toolong")), unix.ENAMETOOLONG)
}

func caseSymlinkLoop(e *env) {
	a, b, s := e.p("a"), e.p("b"), e.p("self")
	e.symlink("b", a)
	e.symlink("a", b)
	e.symlink("self", s)
	var st unix.Stat_t
	for _, p := range []string{a, s} {
		e.wantErr("stat of a symlink loop", p, unix.Stat(p, &st), unix.ELOOP)
		_, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		e.wantErr("open(O_RDONLY) of a symlink loop", p, err, unix.ELOOP)
		_, err = unix.Open(p, unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
		e.wantErr("open(O_WRONLY|O_CREAT) of a symlink loop", p, err, unix.ELOOP)
		e.wantErr("stat through a symlink loop", p+"/x", unix.Stat(p+"/x", &st), unix.ELOOP)
		e.lstat(p)
	}
	// A chain longer than the kernel's limit of 40 links.
	prev := "end"
	e.create(e.p("end"), []byte("end"))
	for i := range 41 {
		name := fmt.Sprintf("c%02d", i)
		e.symlink(prev, e.p(name))
		prev = name
	}
	e.wantData("read through a chain of 40 symlinks", e.p("c39"), e.readFile(e.p("c39")), []byte("end"))
	e.wantErr("stat through a chain of 41 symlinks", e.p("c40"), unix.Stat(e.p("c40"), &st), unix.ELOOP)
}

func caseStat(e *env) {
	f := e.p("f")
	data := pattern(12345, 5)
	e.create(f, data)
	st := e.stat(f)
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != int64(len(data)) || st.Nlink != 1 {
		e.Errorf("stat %s: expected regular file, size %d, nlink 1; got mode %#o size %d nlink %d", f, len(data), st.Mode, st.Size, st.Nlink)
	}
	if st.Uid != uint32(os.Geteuid()) {
		e.Errorf("stat %s: uid: expected %d (creator), got %d", f, os.Geteuid(), st.Uid)
	}
	if st.Blksize <= 0 || st.Ino == 0 {
		e.Errorf("stat %s: expected blksize > 0 and ino != 0, got %d and %d", f, st.Blksize, st.Ino)
	}
	fd := e.open(f, unix.O_RDONLY, 0)
	fst := e.fstat(fd, f)
	unix.Close(fd)
	if fst.Ino != st.Ino || fst.Size != st.Size || fst.Mode != st.Mode || fst.Dev != st.Dev {
		e.Errorf("fstat %s differs from stat: ino %d/%d size %d/%d mode %#o/%#o", f, fst.Ino, st.Ino, fst.Size, st.Size, fst.Mode, st.Mode)
	}
	g := e.p("g")
	e.create(g, nil)
	if sg := e.stat(g); sg.Ino == st.Ino || sg.Dev != st.Dev || sg.Size != 0 {
		e.Errorf("stat %s: expected a distinct inode on the same device, size 0; got ino %d (other %d) dev %d/%d size %d", g, sg.Ino, st.Ino, sg.Dev, st.Dev, sg.Size)
	}
	d := e.stat(e.dir)
	if d.Mode&unix.S_IFMT != unix.S_IFDIR {
		e.Errorf("stat %s: expected a directory, got mode %#o", e.dir, d.Mode)
	}
	e.symlink("f", e.p("l"))
	if sl := e.lstat(e.p("l")); sl.Mode&unix.S_IFMT != unix.S_IFLNK || sl.Mode&0o777 != 0o777 {
		e.Errorf("lstat %s: expected symlink with mode 0777, got %#o", e.p("l"), sl.Mode)
	}
	var s unix.Stat_t
	e.wantErr("stat of a missing name", e.p("missing"), unix.Stat(e.p("missing"), &s), unix.ENOENT)
	e.wantErr("stat under a file", f+"/x", unix.Stat(f+"/x", &s), unix.ENOTDIR)
}

func caseDirNlink(e *env) {
	want := func(n uint64) {
		e.Helper()
		if st := e.stat(e.dir); st.Nlink != n {
			e.Errorf("stat %s: nlink: expected %d (2 + subdirectories), got %d", e.dir, n, st.Nlink)
		}
	}
	want(2)
	for i := range 5 {
		e.create(e.p(fmt.Sprintf("f%d", i)), nil)
	}
	e.symlink("f0", e.p("l"))
	want(2)
	for i := range 3 {
		e.mkdir(e.p(fmt.Sprintf("d%d", i)))
	}
	want(5)
	e.mkdir(e.p("d0", "nested"))
	want(5)
	e.ok("rmdir", e.p("d2"), unix.Rmdir(e.p("d2")))
	want(4)
	e.ok("rename", e.p("d1"), unix.Rename(e.p("d1"), e.p("d0", "d1")))
	want(3)
	if st := e.stat(e.p("d0")); st.Nlink != 4 {
		e.Errorf("stat %s: nlink: expected 4, got %d", e.p("d0"), st.Nlink)
	}
}

func caseMkfifo(e *env) {
	p := e.p("fifo")
	e.ok("mkfifo", p, unix.Mkfifo(p, 0o640))
	st := e.lstat(p)
	if st.Mode&unix.S_IFMT != unix.S_IFIFO || st.Mode&0o777 != 0o640&^e.umask {
		e.Errorf("lstat %s: expected fifo %#o, got mode %#o", p, 0o640&^e.umask, st.Mode)
	}
	fd := e.open(p, unix.O_RDWR, 0)
	defer unix.Close(fd)
	_, err := unix.Write(fd, []byte("through the pipe"))
	e.ok("write to fifo", p, err)
	buf := make([]byte, 100)
	n, err := unix.Read(fd, buf)
	e.ok("read from fifo", p, err)
	e.wantData("read from fifo", p, buf[:n], []byte("through the pipe"))
	e.wantErr("mkfifo of an existing name", p, unix.Mkfifo(p, 0o644), unix.EEXIST)
	e.ok("unlink fifo", p, unix.Unlink(p))
}

// dirent is one getdents64 record.
type dirent struct {
	name string
	typ  uint8
	ino  uint64
}

// readDirents reads a whole directory with getdents64 and a small buffer,
// so the listing takes many calls and resumes from offsets.
func readDirents(fd int, bufSize int, each func(batch []dirent)) error {
	buf := make([]byte, bufSize)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		var batch []dirent
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return fmt.Errorf("bad dirent record length %d", reclen)
			}
			name := b[19:reclen]
			if i := strings.IndexByte(string(name), 0); i >= 0 {
				name = name[:i]
			}
			batch = append(batch, dirent{name: string(name), typ: b[18], ino: binary.NativeEndian.Uint64(b[0:8])})
			b = b[reclen:]
		}
		each(batch)
	}
}

func caseReaddir1000(e *env) {
	want := map[string]uint8{}
	for i := range 1000 {
		name := fmt.Sprintf("entry-%04d-%s", i, strings.Repeat("n", i%40))
		switch {
		case i%100 == 7:
			e.mkdir(e.p(name))
			want[name] = unix.DT_DIR
		case i%100 == 8:
			e.symlink("target", e.p(name))
			want[name] = unix.DT_LNK
		default:
			e.create(e.p(name), nil)
			want[name] = unix.DT_REG
		}
	}
	want["."], want[".."] = unix.DT_DIR, unix.DT_DIR
	for _, bufSize := range []int{512, 32 << 10} {
		fd := e.open(e.dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		seen := map[string]int{}
		err := readDirents(fd, bufSize, func(batch []dirent) {
			for _, d := range batch {
				seen[d.name]++
				if w, ok := want[d.name]; ok && d.typ != unix.DT_UNKNOWN && d.typ != w {
					e.Errorf("getdents %s: %s: d_type: expected %d, got %d", e.dir, d.name, w, d.typ)
				}
			}
		})
		unix.Close(fd)
		e.ok(fmt.Sprintf("getdents(buf=%d)", bufSize), e.dir, err)
		for name := range want {
			if seen[name] != 1 {
				e.Errorf("getdents(buf=%d) %s: entry %q seen %d times, expected once", bufSize, e.dir, name, seen[name])
			}
		}
		for _, name := range sortedKeys(seen) {
			if _, ok := want[name]; !ok {
				e.Errorf("getdents(buf=%d) %s: unexpected entry %q", bufSize, e.dir, name)
			}
		}
	}
	// Readdirnames in small chunks (what most programs do).
	f, err := os.Open(e.dir)
	e.ok("open", e.dir, err)
	defer f.Close()
	count := map[string]int{}
	for {
		names, err := f.Readdirnames(7)
		for _, n := range names {
			count[n]++
		}
		if err != nil {
			break
		}
	}
	if len(count) != 1000 {
		e.Errorf("readdir %s: expected 1000 distinct names, got %d", e.dir, len(count))
	}
	for n, c := range count {
		if c != 1 {
			e.Errorf("readdir %s: %q seen %d times", e.dir, n, c)
		}
	}
}

func caseReaddirConcurrent(e *env) {
	const orig = 600
	for i := range orig {
		e.create(e.p(fmt.Sprintf("orig-%04d", i)), nil)
	}
	// Pass 1: add entries while listing. Every original appears exactly
	// once; nothing appears twice.
	fd := e.open(e.dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	defer unix.Close(fd)
	seen := map[string]int{}
	added := 0
	err := readDirents(fd, 512, func(batch []dirent) {
		for _, d := range batch {
			seen[d.name]++
		}
		for range 5 {
			e.create(e.p(fmt.Sprintf("new-%04d", added)), nil)
			added++
		}
	})
	e.ok("getdents while creating entries", e.dir, err)
	for i := range orig {
		if n := seen[fmt.Sprintf("orig-%04d", i)]; n != 1 {
			e.Errorf("getdents while creating entries %s: orig-%04d seen %d times, expected once", e.dir, i, n)
		}
	}
	for _, name := range sortedKeys(seen) {
		if seen[name] > 1 {
			e.Errorf("getdents while creating entries %s: %q seen %d times", e.dir, name, seen[name])
		}
	}
	// Pass 2 (rewind): removing entries during the listing; the ones not
	// removed appear exactly once.
	_, err = unix.Seek(fd, 0, 0)
	e.ok("lseek(0) on directory", e.dir, err)
	seen = map[string]int{}
	removed := map[string]bool{}
	next := orig - 1
	err = readDirents(fd, 512, func(batch []dirent) {
		for _, d := range batch {
			seen[d.name]++
		}
		for range 3 {
			if next < 0 {
				return
			}
			name := fmt.Sprintf("orig-%04d", next)
			next -= 2
			if seen[name] == 0 {
				removed[name] = true
				e.check("unlink during getdents", e.p(name), unix.Unlink(e.p(name)))
			}
		}
	})
	e.ok("getdents while removing entries", e.dir, err)
	for i := range orig {
		name := fmt.Sprintf("orig-%04d", i)
		if !removed[name] && seen[name] != 1 {
			e.Errorf("getdents while removing entries %s: %s seen %d times, expected once", e.dir, name, seen[name])
		}
	}
	for i := range added {
		if name := fmt.Sprintf("new-%04d", i); seen[name] != 1 {
			e.Errorf("getdents after rewind %s: %s seen %d times, expected once", e.dir, name, seen[name])
		}
	}
}

func caseNameTooLong(e *env) {
	n255 := strings.Repeat("a", 255)
	n256 := strings.Repeat("b", 256)
	ok := e.p(n255)
	e.create(ok, []byte("255"))
	e.wantData("read of a 255-byte name", ok, e.readFile(ok), []byte("255"))
	other := e.p(strings.Repeat("c", 255))
	e.ok("rename to a 255-byte name", ok, unix.Rename(ok, other))
	e.ok("mkdir of a 255-byte name", ok, unix.Mkdir(ok, 0o755))

	long := e.p(n256)
	var st unix.Stat_t
	_, err := unix.Open(long, unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	e.wantErr("open(O_CREAT) of a 256-byte name", long, err, unix.ENAMETOOLONG)
	e.wantErr("mkdir of a 256-byte name", long, unix.Mkdir(long, 0o755), unix.ENAMETOOLONG)
	e.wantErr("lstat of a 256-byte name", long, unix.Lstat(long, &st), unix.ENAMETOOLONG)
	e.wantErr("unlink of a 256-byte name", long, unix.Unlink(long), unix.ENAMETOOLONG)
	e.wantErr("rename to a 256-byte name "+long, other, unix.Rename(other, long), unix.ENAMETOOLONG)
	e.wantErr("link to a 256-byte name "+long, other, unix.Link(other, long), unix.ENAMETOOLONG)
	e.wantErr("symlink to a 256-byte name", long, unix.Symlink("x", long), unix.ENAMETOOLONG)
	e.wantErr("mkfifo of a 256-byte name", long, unix.Mkfifo(long, 0o644), unix.ENAMETOOLONG)
	e.wantErr("lstat under a 256-byte name", long+"/x", unix.Lstat(long+"/x", &st), unix.ENAMETOOLONG)
	e.stat(other)
}

func caseLongPath(e *env) {
	// Nest 200-byte components up to ~3900 bytes of absolute path.
	comp := strings.Repeat("p", 200)
	p := e.dir
	for len(p)+len(comp)+1+10 < 3900 {
		p = filepath.Join(p, comp)
		e.mkdir(p)
	}
	f := filepath.Join(p, "file")
	e.create(f, []byte("deep"))
	e.wantData(fmt.Sprintf("read of a %d-byte path", len(f)), f, e.readFile(f), []byte("deep"))
	tooLong := e.dir + "/" + strings.Repeat("q/", 2100)
	var st unix.Stat_t
	e.wantErr(fmt.Sprintf("lstat of a %d-byte path", len(tooLong)), e.dir+"/q/q/...", unix.Lstat(tooLong, &st), unix.ENAMETOOLONG)

	// Deeper than PATH_MAX with *at calls relative to a directory descriptor.
	dfd := e.open(e.dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	comp = strings.Repeat("d", 200)
	depth := 0
	for range 30 {
		if !e.check("mkdirat", fmt.Sprintf("%s/%s x%d", e.dir, comp, depth+1), unix.Mkdirat(dfd, comp, 0o755)) {
			break
		}
		nfd, err := unix.Openat(dfd, comp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(dfd)
		if !e.check("openat", fmt.Sprintf("%s/%s x%d", e.dir, comp, depth+1), err) {
			return
		}
		dfd = nfd
		depth++
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, "bottom", unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	e.ok("openat(O_CREAT)", fmt.Sprintf("bottom of a %d-byte path", len(e.dir)+depth*201), err)
	e.pwriteAll(fd, "bottom", []byte("bottom"), 0)
	e.wantData("pread at the bottom of a deep tree", "bottom", e.preadFull(fd, "bottom", 10, 0), []byte("bottom"))
	unix.Close(fd)
}
