package fuse

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plumeria-fs/plumeria/frontend/fuse/memfs"
)

var _ FileSystem = (*memfs.FS)(nil)

// mountMem mounts a fresh in-memory file system on a temporary directory;
// the mount goes away when the test ends.
func mountMem(t *testing.T, opts Options) (*memfs.FS, *Server, string) {
	t.Helper()
	fsys := memfs.New()
	m, dir := mountFS(t, fsys, opts)
	return fsys, m, dir
}

// mountFS mounts fsys on a temporary directory; the mount goes away when
// the test ends.
func mountFS(t *testing.T, fsys FileSystem, opts Options) (*Server, string) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	dir := t.TempDir()
	opts.Volume = "test"
	m, err := Mount(dir, fsys, opts)
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		waitGone(t, m, dir, st.Dev)
	})
	return m, dir
}

// waitGone waits for the kernel to let go of a mount. If a file of the
// mount is still open in this process, that never happens, and the process
// could not even exit (its last close would wait for a server that died
// with it), so after a while the connection is aborted.
func waitGone(t *testing.T, m *Server, dir string, dev uint64) {
	done := make(chan struct{})
	go func() { m.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(10 * time.Second):
	}
	t.Errorf("%s: still in use 10 s after Unmount (a file left open?); aborting the FUSE connection", dir)
	ctl, err := os.MkdirTemp("", "fusectl-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(ctl)
	if err := unix.Mount("none", ctl, "fusectl", 0, ""); err != nil {
		t.Fatalf("mount fusectl: %v", err)
	}
	defer unix.Unmount(ctl, 0)
	abort := filepath.Join(ctl, fmt.Sprint(unix.Minor(dev)), "abort")
	if err := os.WriteFile(abort, []byte("1"), 0); err != nil {
		t.Fatalf("abort: %v", err)
	}
	<-done
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: got %v, want %v", what, err, want)
	}
}

func inoOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func TestCreateReadWriteRenameUnlink(t *testing.T) {
	_, _, dir := mountMem(t, Options{})
	p := filepath.Join(dir, "a")
	data := bytes.Repeat([]byte("plumeria"), 300_000) // 2.4 MB: several 1 MiB writes
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil || st.Size() != int64(len(data)) || st.Mode() != 0o644 {
		t.Fatalf("stat: %v %v", st, err)
	}
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %d bytes, %v", len(got), err)
	}
	if err := os.Rename(p, filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	_, err = os.Stat(p)
	wantErrno(t, "stat renamed-away name", err, syscall.ENOENT)
	if err := os.Remove(filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	_, err = os.Stat(filepath.Join(dir, "b"))
	wantErrno(t, "stat unlinked", err, syscall.ENOENT)

	// O_TRUNC on an existing file.
	if err := os.WriteFile(p, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if st, _ := os.Stat(p); st.Size() != 0 {
		t.Errorf("size after O_TRUNC: %d", st.Size())
	}
	// truncate(2) and fallocate(2).
	if err := os.Truncate(p, 1000); err != nil {
		t.Fatal(err)
	}
	f, err = os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, 1<<20); err != nil {
		t.Fatalf("fallocate: %v", err)
	}
	if st, _ := f.Stat(); st.Size() != 1<<20 {
		t.Errorf("size after fallocate: %d", st.Size())
	}
	err = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 4096)
	wantErrno(t, "punch hole (unsupported by the fake)", err, syscall.EOPNOTSUPP)
	if err := f.Sync(); err != nil {
		t.Errorf("fsync: %v", err)
	}
}

// readDirents lists dir with getdents64, returning names and the offset
// after each entry.
func readDirents(t *testing.T, fd int) (names []string, offs []int64) {
	t.Helper()
	buf := make([]byte, 4096)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatalf("getdents: %v", err)
		}
		if n == 0 {
			return names, offs
		}
		for b := buf[:n]; len(b) > 0; {
			// struct linux_dirent64: ino 8, off 8, reclen 2, type 1, name.
			off := int64(binary.LittleEndian.Uint64(b[8:]))
			reclen := binary.LittleEndian.Uint16(b[16:])
			name := b[19:reclen]
			names = append(names, string(name[:bytes.IndexByte(name, 0)]))
			offs = append(offs, off)
			b = b[reclen:]
		}
	}
}

func TestReaddirLarge(t *testing.T) {
	_, _, dir := mountMem(t, Options{})
	const n = 2000
	for i := range n {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("file-with-a-longish-name-%04d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	names, offs := readDirents(t, fd)
	seen := map[string]int{}
	for _, name := range names {
		seen[name]++
	}
	if len(names) != n+2 || seen["."] != 1 || seen[".."] != 1 {
		t.Errorf("got %d names (. %d times, .. %d times), want %d", len(names), seen["."], seen[".."], n+2)
	}
	for i := range n {
		if name := fmt.Sprintf("file-with-a-longish-name-%04d", i); seen[name] != 1 {
			t.Errorf("%s listed %d times", name, seen[name])
		}
	}

	// seekdir(telldir()): resume after entry k, at offsets both before and
	// after ".." and in the middle of a page.
	for _, k := range []int{0, 1, 2, 700, len(names) - 2} {
		if _, err := unix.Seek(fd, offs[k], 0); err != nil {
			t.Fatalf("seek to %d: %v", offs[k], err)
		}
		rest, _ := readDirents(t, fd)
		if len(rest) != len(names)-k-1 || (len(rest) > 0 && rest[0] != names[k+1]) {
			t.Errorf("after seek past entry %d (%q): %d names starting %q, want %d starting %q",
				k, names[k], len(rest), rest, len(names)-k-1, names[k+1])
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != n {
		t.Errorf("os.ReadDir: %d entries, %v", len(ents), err)
	}
}

func TestErrnos(t *testing.T) {
	_, _, dir := mountMem(t, Options{})
	_, err := os.Stat(filepath.Join(dir, "missing"))
	wantErrno(t, "stat missing", err, syscall.ENOENT)

	d := filepath.Join(dir, "d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "mkdir existing", os.Mkdir(d, 0o755), syscall.EEXIST)
	_, err = os.OpenFile(d, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	wantErrno(t, "O_EXCL create existing", err, syscall.EEXIST)

	if err := os.WriteFile(filepath.Join(d, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "rmdir non-empty", unix.Rmdir(d), syscall.ENOTEMPTY)
	wantErrno(t, "unlink dir", unix.Unlink(d), syscall.EISDIR)
	wantErrno(t, "rmdir file", unix.Rmdir(filepath.Join(d, "f")), syscall.ENOTDIR)

	long := filepath.Join(dir, strings.Repeat("x", 300))
	_, err = os.Create(long)
	wantErrno(t, "create 300-byte name", err, syscall.ENAMETOOLONG)
	_, err = os.Stat(long)
	wantErrno(t, "stat 300-byte name", err, syscall.ENAMETOOLONG)
}

func TestAppend(t *testing.T) {
	fsys, _, dir := mountMem(t, Options{})
	p := filepath.Join(dir, "log")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString("one\n")
	// Another node appends behind the kernel's back; our next append must
	// land after it, whatever size the kernel believes.
	a, err := fsys.Lookup(t.Context(), 1, "log")
	if err != nil {
		t.Fatal(err)
	}
	fsys.Write(t.Context(), a.Ino, 0, []byte("other\n"), 0, true)
	f.WriteString("two\n")
	// A plain fd writing at offset 0 must not be treated as appending.
	g, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	g.WriteString("ONE\n")
	g.Close()
	got, _ := os.ReadFile(p)
	if string(got) != "ONE\nother\ntwo\n" {
		t.Errorf("content %q", got)
	}
}

func TestXattrs(t *testing.T) {
	_, _, dir := mountMem(t, Options{})
	p := filepath.Join(dir, "x")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte("v"), 100)
	if err := unix.Setxattr(p, "user.a", val, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(p, "user.bb", []byte("2"), 0); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "XATTR_CREATE existing", unix.Setxattr(p, "user.a", nil, unix.XATTR_CREATE), syscall.EEXIST)
	wantErrno(t, "XATTR_REPLACE missing", unix.Setxattr(p, "user.c", nil, unix.XATTR_REPLACE), syscall.ENODATA)

	sz, err := unix.Getxattr(p, "user.a", nil) // size probe
	if err != nil || sz != len(val) {
		t.Errorf("size probe: %d %v", sz, err)
	}
	_, err = unix.Getxattr(p, "user.a", make([]byte, 10))
	wantErrno(t, "getxattr small buffer", err, syscall.ERANGE)
	buf := make([]byte, 200)
	sz, err = unix.Getxattr(p, "user.a", buf)
	if err != nil || !bytes.Equal(buf[:sz], val) {
		t.Errorf("getxattr: %q %v", buf[:sz], err)
	}
	_, err = unix.Getxattr(p, "user.missing", buf)
	wantErrno(t, "getxattr missing", err, syscall.ENODATA)

	sz, err = unix.Listxattr(p, nil)
	if err != nil || sz != len("user.a\x00user.bb\x00") {
		t.Errorf("listxattr probe: %d %v", sz, err)
	}
	_, err = unix.Listxattr(p, make([]byte, 3))
	wantErrno(t, "listxattr small buffer", err, syscall.ERANGE)
	sz, err = unix.Listxattr(p, buf)
	if err != nil || string(buf[:sz]) != "user.a\x00user.bb\x00" {
		t.Errorf("listxattr: %q %v", buf[:sz], err)
	}
	if err := unix.Removexattr(p, "user.a"); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "removexattr again", unix.Removexattr(p, "user.a"), syscall.ENODATA)
}

func TestStatfs(t *testing.T) {
	_, _, dir := mountMem(t, Options{})
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Bsize != 4096 || st.Blocks != 1<<20 || st.Bfree != 1<<19 || st.Bavail != 1<<18 || st.Namelen != 255 || st.Files != 1<<16 {
		t.Errorf("statfs: %+v", st)
	}
	mounts, _ := os.ReadFile("/proc/self/mounts")
	if !strings.Contains(string(mounts), "plumeria:test "+dir+" fuse.plumeria ") {
		t.Errorf("no plumeria:test on %s in /proc/self/mounts", dir)
	}
}

func TestSymlinkHardLinkMknod(t *testing.T) {
	_, _, dir := mountMem(t, Options{})
	l := filepath.Join(dir, "l")
	if err := os.Symlink("some/where", l); err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(l); err != nil || got != "some/where" {
		t.Errorf("readlink: %q %v", got, err)
	}
	if st, err := os.Lstat(l); err != nil || st.Mode()&os.ModeSymlink == 0 || st.Size() != 10 {
		t.Errorf("lstat symlink: %v %v", st, err)
	}

	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "sub", "b")
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	if err := os.WriteFile(a, []byte("shared"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(a, b); err != nil {
		t.Fatal(err)
	}
	if inoOf(t, a) != inoOf(t, b) {
		t.Errorf("hard links have inodes %d and %d", inoOf(t, a), inoOf(t, b))
	}
	var st unix.Stat_t
	unix.Stat(b, &st)
	if st.Nlink != 2 {
		t.Errorf("nlink %d, want 2", st.Nlink)
	}
	// A write through one name is read through the other.
	os.WriteFile(b, []byte("changed"), 0o644)
	if got, _ := os.ReadFile(a); string(got) != "changed" {
		t.Errorf("through the other link: %q", got)
	}
	os.Remove(a)
	if got, _ := os.ReadFile(b); string(got) != "changed" {
		t.Errorf("after unlinking the first name: %q", got)
	}

	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lstat(fifo, &st); err != nil || st.Mode != unix.S_IFIFO|0o600 {
		t.Errorf("fifo mode %o, %v", st.Mode, err)
	}
}

func TestRenameFlags(t *testing.T) {
	_, _, dir := mountMem(t, Options{})
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte("A"), 0o644)
	os.WriteFile(b, []byte("B"), 0o644)
	err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_NOREPLACE)
	wantErrno(t, "RENAME_NOREPLACE", err, syscall.EEXIST)
	if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
		t.Fatalf("RENAME_EXCHANGE: %v", err)
	}
	ga, _ := os.ReadFile(a)
	gb, _ := os.ReadFile(b)
	if string(ga) != "B" || string(gb) != "A" {
		t.Errorf("after exchange a=%q b=%q", ga, gb)
	}
	// Replacing rename.
	if err := os.Rename(a, b); err != nil {
		t.Fatal(err)
	}
	if gb, _ := os.ReadFile(b); string(gb) != "B" {
		t.Errorf("after replacing rename b=%q", gb)
	}
}

func TestLocks(t *testing.T) {
	fsys, _, dir := mountMem(t, Options{})
	p := filepath.Join(dir, "lk")
	os.WriteFile(p, []byte("data"), 0o644)
	ino := inoOf(t, p)
	f1, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f2, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()

	// flock: two open files are two owners.
	if err := unix.Flock(int(f1.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("flock f1: %v", err)
	}
	wantErrno(t, "flock f2 while f1 holds it", unix.Flock(int(f2.Fd()), unix.LOCK_EX|unix.LOCK_NB), syscall.EWOULDBLOCK)
	if err := unix.Flock(int(f2.Fd()), unix.LOCK_SH|unix.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Errorf("shared flock against exclusive: %v", err)
	}
	f1.Close() // the last close drops f1's flock, with the RELEASE the kernel sends after close(2) returns
	waitFor(t, "flock f2 after f1 closed", func() bool { return unix.Flock(int(f2.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil })
	if err := unix.Flock(int(f2.Fd()), unix.LOCK_UN); err != nil {
		t.Errorf("unlock: %v", err)
	}

	// OFD record locks: per open file, so two opens conflict.
	f3, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f3.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 10}
	if err := unix.FcntlFlock(f3.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		t.Fatalf("OFD lock f3: %v", err)
	}
	lk2 := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 5, Len: 1}
	wantErrno(t, "conflicting OFD lock", unix.FcntlFlock(f2.Fd(), unix.F_OFD_SETLK, &lk2), syscall.EAGAIN)
	if err := unix.FcntlFlock(f2.Fd(), unix.F_OFD_GETLK, &lk2); err != nil || lk2.Type != unix.F_WRLCK || lk2.Start != 0 || lk2.Len != 10 {
		t.Errorf("OFD getlk: %+v %v", lk2, err)
	}
	lk2 = unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 10, Len: 0} // to EOF, no overlap
	if err := unix.FcntlFlock(f2.Fd(), unix.F_OFD_SETLK, &lk2); err != nil {
		t.Errorf("non-overlapping OFD lock: %v", err)
	}
	lk.Type, lk2.Type = unix.F_UNLCK, unix.F_UNLCK
	unix.FcntlFlock(f3.Fd(), unix.F_OFD_SETLK, &lk)
	unix.FcntlFlock(f2.Fd(), unix.F_OFD_SETLK, &lk2)

	// Process-owned POSIX locks end with any close(2) of the file.
	lk = unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	if err := unix.FcntlFlock(f3.Fd(), unix.F_SETLKW, &lk); err != nil {
		t.Fatalf("POSIX lock: %v", err)
	}
	if got := fsys.Locks(ino); len(got) != 1 || got[0].Flock || got[0].End != ^uint64(0) {
		t.Fatalf("locks after F_SETLKW: %+v", got)
	}
	f4, _ := os.Open(p)
	f4.Close()
	if got := fsys.Locks(ino); len(got) != 0 {
		t.Errorf("locks after close: %+v", got)
	}
}

// waitFor polls cond for up to 5 s: invalidations are sent asynchronously.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("timed out waiting for %s", what)
			return
		}
	}
}

func TestInvalidate(t *testing.T) {
	// Long timeouts and KEEP_CACHE: without invalidation the kernel would
	// answer from its caches for an hour.
	hour := time.Hour
	fsys, _, dir := mountMem(t, Options{EntryTimeout: hour, AttrTimeout: hour, KeepCache: true})
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("old content"), 0o644)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 100)
	if n, _ := f.ReadAt(buf, 0); string(buf[:n]) != "old content" {
		t.Fatalf("first read %q", buf[:n])
	}
	a, _ := fsys.Lookup(t.Context(), 1, "f")
	ino := a.Ino

	// Another node rewrites the file (same size and mtime, so only an
	// invalidation can tell the kernel) and changes its mode.
	fsys.Change(func(s *memfs.State) {
		s.WriteAt(ino, []byte("new content"), 0)
		s.Attr(ino).Mode = syscall.S_IFREG | 0o600
	})
	if n, _ := f.ReadAt(buf, 0); string(buf[:n]) != "old content" {
		t.Logf("kernel did not cache the page (read %q); the test proves less", buf[:n])
	}
	fsys.Invalidate(ino, false, "")
	waitFor(t, "new content", func() bool {
		n, _ := f.ReadAt(buf, 0)
		return string(buf[:n]) == "new content"
	})
	waitFor(t, "new mode", func() bool {
		st, err := os.Stat(p)
		return err == nil && st.Mode() == 0o600
	})

	// Another node renames f to g: the kernel's cached dentry must go.
	var rerr error
	fsys.Change(func(s *memfs.State) { rerr = s.Rename(1, "f", 1, "g") })
	if rerr != nil {
		t.Fatalf("rename behind the kernel's back: %v", rerr)
	}
	if _, err := os.Stat(p); err != nil {
		t.Logf("kernel did not cache the dentry (%v); the test proves less", err)
	}
	fsys.Invalidate(1, true, "f")
	waitFor(t, "f to disappear", func() bool {
		_, err := os.Stat(p)
		return errors.Is(err, syscall.ENOENT)
	})
	if _, err := os.Stat(filepath.Join(dir, "g")); err != nil {
		t.Errorf("stat g: %v", err)
	}
}

func isMounted(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

func TestUnmountBusy(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	dir := t.TempDir()
	fsys := memfs.New()
	m, err := Mount(dir, fsys, Options{Volume: "busy"})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "open")
	if err := os.WriteFile(p, []byte("still here"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		m.Unmount()
		t.Fatal(err)
	}
	if err := m.Unmount(); err != nil {
		f.Close()
		t.Fatalf("unmount with an open file: %v", err)
	}
	if isMounted(t, dir) {
		t.Errorf("%s still mounted after Unmount", dir)
	}
	buf := make([]byte, 20)
	if n, err := f.ReadAt(buf, 0); string(buf[:n]) != "still here" {
		t.Errorf("read through the detached mount: %q %v", buf[:n], err)
	}
	f.Close()
	done := make(chan struct{})
	go func() { m.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after the last file was closed")
	}
	if err := m.Unmount(); err != nil {
		t.Errorf("second Unmount: %v", err)
	}
}
