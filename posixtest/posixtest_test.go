package posixtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRunLocal runs the suite against t.TempDir(): the suite must agree
// with Linux on a local file system.
func TestRunLocal(t *testing.T) {
	Run(t, t.TempDir(), Options{})
}

// TestRunTmpfs runs the suite against tmpfs (/dev/shm) when there is one.
func TestRunTmpfs(t *testing.T) {
	var s unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &s); err != nil || s.Type != unix.TMPFS_MAGIC {
		t.Skip("no tmpfs at /dev/shm")
	}
	dir, err := os.MkdirTemp("/dev/shm", "posixtest-")
	if err != nil {
		t.Skipf("cannot write /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	Run(t, dir, Options{})
}

func TestRunTwoDirsSameDir(t *testing.T) {
	d := t.TempDir()
	RunTwoDirs(t, d, d)
}

// TestRunTwoDirsSymlinkedView uses a second path to the same directory.
func TestRunTwoDirsSymlinkedView(t *testing.T) {
	d := t.TempDir()
	if err := os.Mkdir(filepath.Join(d, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(d, "view")); err != nil {
		t.Fatal(err)
	}
	RunTwoDirs(t, filepath.Join(d, "real"), filepath.Join(d, "view"))
}

func TestSkipOption(t *testing.T) {
	o := Options{Skip: []string{"xattr: not on this mount", "rename_*", "flock"}}
	for name, want := range map[string]string{"xattr": "not on this mount", "rename_atomic": "no reason given", "flock": "no reason given"} {
		if got, ok := o.skipReason(name); !ok || got != want {
			t.Errorf("skipReason(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
	for _, name := range []string{"fcntl_lock", "link", "open_append"} {
		if _, ok := o.skipReason(name); ok {
			t.Errorf("skipReason(%q) skipped", name)
		}
	}
	seen := map[string]bool{}
	for _, n := range Cases() {
		if seen[n] || strings.ContainsAny(n, " /") {
			t.Errorf("bad or duplicate case name %q", n)
		}
		seen[n] = true
	}
}

func TestErrnoOf(t *testing.T) {
	var st unix.Stat_t
	err := unix.Lstat(filepath.Join(t.TempDir(), "missing"), &st)
	if errnoOf(err) != unix.ENOENT {
		t.Fatalf("errnoOf: got %v", err)
	}
	if s := errnoString(err); !strings.HasPrefix(s, "ENOENT") {
		t.Errorf("errnoString = %q", s)
	}
	_, err = os.Open(filepath.Join(t.TempDir(), "missing"))
	if errnoOf(err) != unix.ENOENT {
		t.Errorf("errnoOf(*PathError): got %v", err)
	}
}

// TestRunDir runs the suite on the directory $POSIXTEST_DIR (any mount to
// check by hand, e.g. a `plumeria up` mount); skipped when it is unset.
func TestRunDir(t *testing.T) {
	dir := os.Getenv("POSIXTEST_DIR")
	if dir == "" {
		t.Skip("POSIXTEST_DIR not set")
	}
	Run(t, dir, Options{})
}
