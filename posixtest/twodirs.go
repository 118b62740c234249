package posixtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// RunTwoDirs checks coherence between a and b, two views of the same tree
// (the same volume mounted on two nodes; a == b for a local control). Every
// check is immediate: no sleeps, no retries. Cases:
//
//   - write_then_read: a file written and closed in a reads the same in b;
//   - overwrite_then_read: b has read a file, a rewrites it, b reads the new bytes;
//   - rename_seen: rename in a: old name ENOENT and new name present in b;
//   - unlink_seen: unlink in b: ENOENT in a;
//   - mkdir_then_create: mkdir in a, create inside it from b, read back in a;
//   - chmod_seen: chmod in a shows in b's stat;
//   - truncate_seen: truncate in a shows in b's stat and reads;
//   - flock_appends_reopen: both sides append distinct lines under flock(LOCK_EX),
//     opening the file for each append; every line is present exactly once;
//   - flock_appends_samefd: the same, each side keeping one O_APPEND descriptor.
func RunTwoDirs(t *testing.T, a, b string) {
	t.Helper()
	ra, err := os.MkdirTemp(a, "posixtest2-")
	if err != nil {
		t.Fatalf("mkdtemp %s: %v", a, err)
	}
	name := filepath.Base(ra)
	rb := filepath.Join(b, name)
	// The scratch directory made in a must be visible in b straight away.
	if fi, err := os.Stat(rb); err != nil || !fi.IsDir() {
		t.Fatalf("stat %s (made as %s): expected a directory, got %v", rb, ra, err)
	}
	type twoCase struct {
		name string
		fn   func(e *env, a, b string)
	}
	for _, c := range []twoCase{
		{"write_then_read", twoWriteThenRead},
		{"overwrite_then_read", twoOverwriteThenRead},
		{"rename_seen", twoRenameSeen},
		{"unlink_seen", twoUnlinkSeen},
		{"unlink_while_open", twoUnlinkWhileOpen},
		{"mkdir_then_create", twoMkdirThenCreate},
		{"chmod_seen", twoChmodSeen},
		{"dir_chmod_seen", twoDirChmodSeen},
		{"truncate_seen", twoTruncateSeen},
		{"flock_appends_reopen", func(e *env, a, b string) { twoFlockAppends(e, a, b, true) }},
		{"flock_appends_samefd", func(e *env, a, b string) { twoFlockAppends(e, a, b, false) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			da := filepath.Join(ra, c.name)
			if err := os.Mkdir(da, 0o755); err != nil {
				t.Fatalf("mkdir %s: %v", da, err)
			}
			c.fn(&env{T: t, dir: da, umask: readUmask()}, da, filepath.Join(rb, c.name))
		})
	}
	if !t.Failed() {
		if err := os.RemoveAll(ra); err != nil {
			t.Errorf("remove scratch directory %s: %v", ra, err)
		}
	} else {
		t.Logf("scratch directory kept: %s (%s)", ra, rb)
	}
}

func twoWriteThenRead(e *env, a, b string) {
	for i, size := range []int{0, 1, 4095, 4096, 65537, 1<<20 + 3} {
		pa, pb := filepath.Join(a, fmt.Sprint(i)), filepath.Join(b, fmt.Sprint(i))
		data := pattern(size, byte(i))
		e.create(pa, data)
		e.wantData("read in b after write and close in a", pb, e.readFile(pb), data)
	}
}

func twoOverwriteThenRead(e *env, a, b string) {
	pa, pb := filepath.Join(a, "f"), filepath.Join(b, "f")
	e.create(pa, pattern(100000, 1))
	e.wantData("read in b", pb, e.readFile(pb), pattern(100000, 1))
	// Same size, new bytes, through an open-for-write without O_TRUNC.
	fd := e.open(pa, unix.O_WRONLY, 0)
	e.pwriteAll(fd, pa, pattern(100000, 2), 0)
	unix.Close(fd)
	e.wantData("read in b after overwrite in a", pb, e.readFile(pb), pattern(100000, 2))
	// b keeps a descriptor open across a's rewrite; a new open in b sees it.
	fdb := e.open(pb, unix.O_RDONLY, 0)
	defer unix.Close(fdb)
	e.create(pa, pattern(5000, 3))
	e.wantData("read in b after rewrite in a", pb, e.readFile(pb), pattern(5000, 3))
	// And in the other direction.
	e.create(pb, []byte("from b"))
	e.wantData("read in a after write in b", pa, e.readFile(pa), []byte("from b"))
}

func twoRenameSeen(e *env, a, b string) {
	e.create(filepath.Join(a, "old"), []byte("x"))
	e.readFile(filepath.Join(b, "old")) // b has it cached
	e.ok("rename in a", filepath.Join(a, "old"), unix.Rename(filepath.Join(a, "old"), filepath.Join(a, "new")))
	e.wantGone(filepath.Join(b, "old"))
	e.wantData("read in b after rename in a", filepath.Join(b, "new"), e.readFile(filepath.Join(b, "new")), []byte("x"))
	// Rename over an existing name that b has looked at.
	e.create(filepath.Join(a, "other"), []byte("other"))
	e.readFile(filepath.Join(b, "new"))
	e.ok("rename in a", filepath.Join(a, "other"), unix.Rename(filepath.Join(a, "other"), filepath.Join(a, "new")))
	e.wantData("read in b after rename over it in a", filepath.Join(b, "new"), e.readFile(filepath.Join(b, "new")), []byte("other"))
	e.wantGone(filepath.Join(b, "other"))
	// A directory moved in a.
	e.mkdir(filepath.Join(a, "d1"))
	e.create(filepath.Join(a, "d1", "f"), []byte("in d"))
	e.stat(filepath.Join(b, "d1", "f"))
	e.ok("rename in a", filepath.Join(a, "d1"), unix.Rename(filepath.Join(a, "d1"), filepath.Join(a, "d2")))
	e.wantGone(filepath.Join(b, "d1", "f"))
	e.wantData("read in b after directory rename in a", filepath.Join(b, "d2", "f"), e.readFile(filepath.Join(b, "d2", "f")), []byte("in d"))
}

func twoUnlinkSeen(e *env, a, b string) {
	e.create(filepath.Join(a, "f"), []byte("x"))
	e.stat(filepath.Join(a, "f"))
	e.stat(filepath.Join(b, "f"))
	e.ok("unlink in b", filepath.Join(b, "f"), unix.Unlink(filepath.Join(b, "f")))
	e.wantGone(filepath.Join(a, "f"))
	_, err := unix.Open(filepath.Join(a, "f"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	e.wantErr("open in a after unlink in b", filepath.Join(a, "f"), err, unix.ENOENT)
	// A new file under the same name from a is a new file in b.
	e.create(filepath.Join(a, "f"), []byte("again"))
	e.wantData("read in b after re-create in a", filepath.Join(b, "f"), e.readFile(filepath.Join(b, "f")), []byte("again"))
	e.mkdir(filepath.Join(b, "d"))
	e.stat(filepath.Join(a, "d"))
	e.ok("rmdir in b", filepath.Join(b, "d"), unix.Rmdir(filepath.Join(b, "d")))
	e.wantGone(filepath.Join(a, "d"))
}

// twoUnlinkWhileOpen: a file open in a and renamed over, or unlinked, in
// b stays readable and writable through a's descriptor until it closes.
func twoUnlinkWhileOpen(e *env, a, b string) {
	for _, how := range []string{"rename over", "unlink"} {
		f := filepath.Join(a, "f")
		e.create(f, []byte("old contents"))
		fd, err := unix.Open(f, unix.O_RDWR|unix.O_CLOEXEC, 0)
		e.ok("open in a", f, err)
		if err != nil {
			return
		}
		if how == "unlink" {
			e.ok("unlink in b", filepath.Join(b, "f"), unix.Unlink(filepath.Join(b, "f")))
		} else {
			e.create(filepath.Join(b, "g"), []byte("new"))
			e.ok("rename over in b", filepath.Join(b, "f"), unix.Rename(filepath.Join(b, "g"), filepath.Join(b, "f")))
		}
		buf := make([]byte, 64)
		n, err := unix.Pread(fd, buf, 0)
		e.ok("read in a after "+how+" in b", f, err)
		e.wantData("read in a after "+how+" in b", f, buf[:max(n, 0)], []byte("old contents"))
		_, err = unix.Pwrite(fd, []byte("OLD"), 0)
		e.ok("write in a after "+how+" in b", f, err)
		n, err = unix.Pread(fd, buf, 0)
		e.ok("read back in a", f, err)
		e.wantData("read back in a after "+how+" in b", f, buf[:max(n, 0)], []byte("OLD contents"))
		var st unix.Stat_t
		e.ok("fstat in a", f, unix.Fstat(fd, &st))
		if st.Nlink != 0 || st.Size != int64(len("old contents")) {
			e.Errorf("fstat %s after %s in b: nlink %d size %d, expected 0 and %d", f, how, st.Nlink, st.Size, len("old contents"))
		}
		e.ok("close in a", f, unix.Close(fd))
		if how == "unlink" {
			e.wantGone(f)
		} else {
			e.wantData("read in a of the new file", f, e.readFile(f), []byte("new"))
			e.ok("unlink in a", f, unix.Unlink(f))
		}
	}
}

func twoMkdirThenCreate(e *env, a, b string) {
	e.mkdir(filepath.Join(a, "d"))
	e.create(filepath.Join(b, "d", "f"), []byte("from b"))
	e.wantData("read in a of a file created in b", filepath.Join(a, "d", "f"), e.readFile(filepath.Join(a, "d", "f")), []byte("from b"))
	names, err := os.ReadDir(filepath.Join(a, "d"))
	e.ok("readdir in a", filepath.Join(a, "d"), err)
	if len(names) != 1 || names[0].Name() != "f" {
		e.Errorf("readdir in a %s: expected [f], got %v", filepath.Join(a, "d"), names)
	}
	if st := e.stat(filepath.Join(a, "d")); st.Nlink != 2 {
		e.Errorf("stat %s: nlink: expected 2, got %d", filepath.Join(a, "d"), st.Nlink)
	}
	e.mkdir(filepath.Join(b, "d", "sub"))
	if st := e.stat(filepath.Join(a, "d")); st.Nlink != 3 {
		e.Errorf("stat in a %s after mkdir in b: nlink: expected 3, got %d", filepath.Join(a, "d"), st.Nlink)
	}
}

func twoChmodSeen(e *env, a, b string) {
	e.create(filepath.Join(a, "f"), nil)
	e.stat(filepath.Join(b, "f"))
	for _, m := range []uint32{0o600, 0o751, 0o644} {
		e.ok(fmt.Sprintf("chmod(%#o) in a", m), filepath.Join(a, "f"), unix.Chmod(filepath.Join(a, "f"), m))
		if st := e.stat(filepath.Join(b, "f")); st.Mode&0o7777 != m {
			e.Errorf("stat in b %s after chmod(%#o) in a: got mode %#o", filepath.Join(b, "f"), m, st.Mode&0o7777)
		}
	}
}

// twoDirChmodSeen: a directory's new mode (which the kernel may cache for
// permission checks) is seen on the other side at once, again and again.
func twoDirChmodSeen(e *env, a, b string) {
	e.mkdir(filepath.Join(a, "d"))
	e.create(filepath.Join(a, "d", "f"), nil)
	e.stat(filepath.Join(b, "d", "f"))
	for _, m := range []uint32{0o700, 0o751, 0o755, 0o711} {
		e.ok(fmt.Sprintf("chmod(%#o) in a", m), filepath.Join(a, "d"), unix.Chmod(filepath.Join(a, "d"), m))
		if st := e.stat(filepath.Join(b, "d")); st.Mode&0o7777 != m {
			e.Errorf("stat in b %s after chmod(%#o) in a: got mode %#o", filepath.Join(b, "d"), m, st.Mode&0o7777)
		}
		e.stat(filepath.Join(b, "d", "f")) // a walk through d, with its mode cached
	}
}

func twoTruncateSeen(e *env, a, b string) {
	pa, pb := filepath.Join(a, "f"), filepath.Join(b, "f")
	e.create(pa, pattern(10000, 4))
	e.wantData("read in b", pb, e.readFile(pb), pattern(10000, 4))
	e.ok("truncate(100) in a", pa, unix.Truncate(pa, 100))
	e.wantSize(pb, 100)
	e.wantData("read in b after truncate in a", pb, e.readFile(pb), pattern(10000, 4)[:100])
	e.ok("truncate(5000) in a", pa, unix.Truncate(pa, 5000))
	got := e.readFile(pb)
	want := append(pattern(10000, 4)[:100], make([]byte, 4900)...)
	e.wantData("read in b after truncate up in a", pb, got, want)
}

// twoFlockAppends has each side append lines under flock(LOCK_EX).
func twoFlockAppends(e *env, a, b string, reopen bool) {
	const perSide = 200
	pa, pb := filepath.Join(a, "log"), filepath.Join(b, "log")
	e.create(pa, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for side, p := range map[string]string{"a": pa, "b": pb} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := appendLines(p, side, perSide, reopen); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.Error(err)
	}
	for _, p := range []string{pa, pb} {
		data := e.readFile(p)
		count := map[string]int{}
		for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
			count[line]++
		}
		for _, side := range []string{"a", "b"} {
			for i := range perSide {
				if l := appendLine(side, i); count[l] != 1 {
					e.Errorf("read %s after flock-ed appends: line %q present %d times, expected once", p, l, count[l])
				}
				delete(count, appendLine(side, i))
			}
		}
		for l, n := range count {
			e.Errorf("read %s after flock-ed appends: unexpected line %q (%d times)", p, l, n)
		}
		if want := 2 * perSide * len(appendLine("a", 0)+"\n"); len(data) != want {
			e.Errorf("read %s after flock-ed appends: size: expected %d, got %d", p, want, len(data))
		}
	}
}

func appendLine(side string, i int) string {
	return fmt.Sprintf("%s-%05d-%s", side, i, strings.Repeat(side, 20))
}

func appendLines(path, side string, n int, reopen bool) error {
	fd := -1
	open := func() error {
		var err error
		fd, err = unix.Open(path, unix.O_WRONLY|unix.O_APPEND|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open(O_WRONLY|O_APPEND) %s: %s", path, errnoString(err))
		}
		return nil
	}
	if !reopen {
		if err := open(); err != nil {
			return err
		}
		defer unix.Close(fd)
	}
	for i := range n {
		if reopen {
			if err := open(); err != nil {
				return err
			}
		}
		if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
			return fmt.Errorf("flock(LOCK_EX) %s: %s", path, errnoString(err))
		}
		line := []byte(appendLine(side, i) + "\n")
		if w, err := unix.Write(fd, line); err != nil || w != len(line) {
			return fmt.Errorf("write(O_APPEND) %s under flock: wrote %d of %d bytes, %s", path, w, len(line), errnoString(err))
		}
		if err := unix.Flock(fd, unix.LOCK_UN); err != nil {
			return fmt.Errorf("flock(LOCK_UN) %s: %s", path, errnoString(err))
		}
		if reopen {
			if err := unix.Close(fd); err != nil {
				return fmt.Errorf("close %s: %s", path, errnoString(err))
			}
		}
	}
	return nil
}
