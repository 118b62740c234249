// Package posixtest is a POSIX conformance suite that runs against any
// directory: a Plumeria FUSE mount, or a local directory as a control.
//
// Run checks one directory: open flags, I/O at offsets, sparse files,
// truncate, fallocate, directories, unlink, rename, links, symlinks,
// permissions, times, stat fields, readdir, name and path limits, xattrs,
// statfs, fsync, flock and fcntl locks, and open-but-unlinked files, with
// exact errno values. RunTwoDirs checks coherence between two views of one
// tree (two mounts of the same volume on two nodes; a == b as the control).
//
// Every case runs as its own subtest (t.Run) in a fresh subdirectory, so
// `go test -run 'TestX/rename_'` selects cases and Options.Skip skips them.
// Failure messages name the operation, the path, and the expected and actual
// errno.
//
// The fcntl_lock case needs a second process (POSIX record locks belong to
// processes): it re-executes the running binary, and this package's init
// function runs the helper and exits when POSIXTEST_HELPER is set. Importing
// the package into a test binary is all that is needed.
package posixtest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Options tunes Run.
type Options struct {
	// Skip names cases not to run. Each entry is "name" or "name: reason";
	// name may be a path.Match pattern ("rename_*"). Skipped cases are
	// reported with t.Skip and the reason.
	Skip []string
	// UnprivilegedUID and UnprivilegedGID are the ids the permissions case
	// acts as (it needs root to switch). Zero means 65534 (nobody).
	UnprivilegedUID, UnprivilegedGID int
	// SymlinkMax is the longest symlink target the mount can make (zero:
	// 4095, PATH_MAX - 1); the symlink case makes one this long.
	SymlinkMax int
	// Keep leaves the scratch directory in place even when every case passed
	// (it is always kept after a failure, for inspection).
	Keep bool
}

func (o Options) skipReason(name string) (string, bool) {
	for _, s := range o.Skip {
		pat, reason, _ := strings.Cut(s, ":")
		pat = strings.TrimSpace(pat)
		if m, err := path.Match(pat, name); (err == nil && m) || pat == name {
			reason = strings.TrimSpace(reason)
			if reason == "" {
				reason = "no reason given"
			}
			return reason, true
		}
	}
	return "", false
}

func (o Options) unprivileged() (uid, gid int) {
	uid, gid = o.UnprivilegedUID, o.UnprivilegedGID
	if uid == 0 {
		uid = 65534
	}
	if gid == 0 {
		gid = 65534
	}
	return uid, gid
}

// env is what a case gets: its own empty directory and the run's options.
type env struct {
	*testing.T
	dir   string
	opts  Options
	umask uint32
}

// p joins names under the case directory.
func (e *env) p(names ...string) string {
	return filepath.Join(append([]string{e.dir}, names...)...)
}

type testCase struct {
	name string
	fn   func(e *env)
}

// Cases lists the names of Run's cases in the order they run.
func Cases() []string {
	names := make([]string, len(cases))
	for i, c := range cases {
		names[i] = c.name
	}
	return names
}

// Run runs every case as a subtest of t in a fresh scratch directory under
// dir. dir must exist and be writable.
func Run(t *testing.T, dir string, opts Options) {
	t.Helper()
	root, err := os.MkdirTemp(dir, "posixtest-")
	if err != nil {
		t.Fatalf("mkdtemp %s: %v", dir, err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatalf("chmod %s: %v", root, err)
	}
	umask := readUmask()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if reason, ok := opts.skipReason(c.name); ok {
				t.Skipf("skipped by Options: %s", reason)
			}
			d := filepath.Join(root, c.name)
			if err := unix.Mkdir(d, 0o755); err != nil {
				t.Fatalf("mkdir %s: %v", d, err)
			}
			if err := unix.Chmod(d, 0o755); err != nil {
				t.Fatalf("chmod %s: %v", d, err)
			}
			c.fn(&env{T: t, dir: d, opts: opts, umask: umask})
		})
	}
	if !t.Failed() && !opts.Keep {
		if err := os.RemoveAll(root); err != nil {
			t.Errorf("remove scratch directory %s: %v", root, err)
		}
	} else {
		t.Logf("scratch directory kept: %s", root)
	}
}

// readUmask reads the process umask without changing it (Linux ≥ 4.7).
func readUmask() uint32 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0o022
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Umask:"); ok {
			if n, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
				return uint32(n)
			}
		}
	}
	return 0o022
}

// ---- assertion helpers ----

func errnoOf(err error) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

func errnoString(err error) string {
	if err == nil {
		return "success"
	}
	if e := errnoOf(err); e != 0 {
		return fmt.Sprintf("%s (%v)", unix.ErrnoName(e), err)
	}
	return err.Error()
}

func names(want []unix.Errno) string {
	s := make([]string, len(want))
	for i, w := range want {
		s[i] = unix.ErrnoName(w)
	}
	return strings.Join(s, " or ")
}

// wantErr reports an error unless err carries one of the wanted errnos.
func (e *env) wantErr(op, path string, err error, want ...unix.Errno) {
	e.Helper()
	if err == nil {
		e.Errorf("%s %s: expected %s, got success", op, path, names(want))
		return
	}
	got := errnoOf(err)
	for _, w := range want {
		if got == w {
			return
		}
	}
	e.Errorf("%s %s: expected %s, got %s", op, path, names(want), errnoString(err))
}

// ok stops the case when err is not nil.
func (e *env) ok(op, path string, err error) {
	e.Helper()
	if err != nil {
		e.Fatalf("%s %s: expected success, got %s", op, path, errnoString(err))
	}
}

// check reports an error when err is not nil and lets the case go on.
func (e *env) check(op, path string, err error) bool {
	e.Helper()
	if err != nil {
		e.Errorf("%s %s: expected success, got %s", op, path, errnoString(err))
		return false
	}
	return true
}

// open opens path or stops the case; the caller closes the descriptor.
func (e *env) open(path string, flags int, mode uint32) int {
	e.Helper()
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, mode)
	e.ok(fmt.Sprintf("open(%s)", openFlags(flags)), path, err)
	return fd
}

func (e *env) create(path string, data []byte) {
	e.Helper()
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	e.ok("open(O_WRONLY|O_CREAT|O_TRUNC)", path, err)
	defer unix.Close(fd)
	if len(data) > 0 {
		e.pwriteAll(fd, path, data, 0)
	}
}

func (e *env) mkdir(path string) {
	e.Helper()
	e.ok("mkdir", path, unix.Mkdir(path, 0o755))
}

func (e *env) symlink(target, path string) {
	e.Helper()
	e.ok("symlink "+target, path, unix.Symlink(target, path))
}

func (e *env) pwriteAll(fd int, path string, data []byte, off int64) {
	e.Helper()
	for len(data) > 0 {
		n, err := unix.Pwrite(fd, data, off)
		e.ok(fmt.Sprintf("pwrite(off=%d,len=%d)", off, len(data)), path, err)
		if n == 0 {
			e.Fatalf("pwrite(off=%d) %s: wrote 0 bytes", off, path)
		}
		data, off = data[n:], off+int64(n)
	}
}

// preadFull reads up to n bytes at off, stopping early only at EOF.
func (e *env) preadFull(fd int, path string, n int, off int64) []byte {
	e.Helper()
	buf := make([]byte, n)
	got := 0
	for got < n {
		m, err := unix.Pread(fd, buf[got:], off+int64(got))
		e.ok(fmt.Sprintf("pread(off=%d,len=%d)", off+int64(got), n-got), path, err)
		if m == 0 {
			break
		}
		got += m
	}
	return buf[:got]
}

func (e *env) readFile(path string) []byte {
	e.Helper()
	b, err := os.ReadFile(path)
	e.ok("read", path, err)
	return b
}

func (e *env) stat(path string) unix.Stat_t {
	e.Helper()
	var st unix.Stat_t
	e.ok("stat", path, unix.Stat(path, &st))
	return st
}

func (e *env) lstat(path string) unix.Stat_t {
	e.Helper()
	var st unix.Stat_t
	e.ok("lstat", path, unix.Lstat(path, &st))
	return st
}

func (e *env) fstat(fd int, path string) unix.Stat_t {
	e.Helper()
	var st unix.Stat_t
	e.ok("fstat", path, unix.Fstat(fd, &st))
	return st
}

func (e *env) wantGone(path string) {
	e.Helper()
	var st unix.Stat_t
	e.wantErr("lstat", path, unix.Lstat(path, &st), unix.ENOENT)
}

func (e *env) wantData(op, path string, got, want []byte) {
	e.Helper()
	if string(got) == string(want) {
		return
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	e.Errorf("%s %s: content differs: got %d bytes, want %d; first difference at offset %d (got %s, want %s)",
		op, path, len(got), len(want), i, around(got, i), around(want, i))
}

func (e *env) wantSize(path string, want int64) {
	e.Helper()
	if st := e.stat(path); st.Size != want {
		e.Errorf("stat %s: size: expected %d, got %d", path, want, st.Size)
	}
}

func around(b []byte, i int) string {
	if i >= len(b) {
		return "EOF"
	}
	end := min(i+16, len(b))
	return fmt.Sprintf("% x", b[i:end])
}

func isZero(b []byte) int {
	for i, c := range b {
		if c != 0 {
			return i
		}
	}
	return -1
}

func (e *env) wantZeros(op, path string, b []byte, base int64) {
	e.Helper()
	if i := isZero(b); i >= 0 {
		e.Errorf("%s %s: expected zeros, got byte %#02x at offset %d", op, path, b[i], base+int64(i))
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7+i/251) ^ seed | 1
	}
	return b
}

func openFlags(f int) string {
	var s []string
	switch f & unix.O_ACCMODE {
	case unix.O_RDONLY:
		s = append(s, "O_RDONLY")
	case unix.O_WRONLY:
		s = append(s, "O_WRONLY")
	case unix.O_RDWR:
		s = append(s, "O_RDWR")
	}
	for _, fl := range []struct {
		bit  int
		name string
	}{{unix.O_CREAT, "O_CREAT"}, {unix.O_EXCL, "O_EXCL"}, {unix.O_TRUNC, "O_TRUNC"}, {unix.O_APPEND, "O_APPEND"},
		{unix.O_DIRECTORY, "O_DIRECTORY"}, {unix.O_NOFOLLOW, "O_NOFOLLOW"}} {
		if f&fl.bit != 0 {
			s = append(s, fl.name)
		}
	}
	return strings.Join(s, "|")
}

func tsNano(ts unix.Timespec) int64 { return ts.Sec*1e9 + ts.Nsec }

func nearNow(ts unix.Timespec, before, after time.Time) bool {
	n := tsNano(ts)
	return n >= before.Add(-time.Second).UnixNano() && n <= after.Add(time.Second).UnixNano()
}
