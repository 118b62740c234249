package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestTimeTravel: node A writes v1 of a file, a snapshot is taken, then v2
// and another snapshot; node B reads v1 at a time between them through
// MNT/.plumeria/at/T and v2 now. Deleted files and directories are read
// in the past and restored (plumeria restore), a renamed file's old name
// is read in the past, and `plumeria versions` lists the states. Bad
// times and writes under .plumeria are refused clearly.
func TestTimeTravel(t *testing.T) {
	c := newFSCluster(t)
	a, b := c.mountNode("n1"), c.mountNode("n2")
	write := func(path, data string) { t.Helper(); writeTree(t, path, data) }
	read := func(path string) string { t.Helper(); return readFile(t, path) }
	snapshot := func(name string) time.Time {
		c.cli("snapshot", "create", c.coordArg(), "--volume", "fs", name)
		time.Sleep(1100 * time.Millisecond) // the next second: a time between snapshots
		return time.Now()
	}
	write(filepath.Join(a, "docs", "report.txt"), "v1")
	write(filepath.Join(a, "docs", "draft.txt"), "draft")
	write(filepath.Join(a, "proj", "sub", "main.go"), "package main")
	if err := os.Symlink("sub/main.go", filepath.Join(a, "proj", "link")); err != nil {
		t.Fatal(err)
	}
	t1 := snapshot("s1")
	write(filepath.Join(a, "docs", "report.txt"), "v2, longer")
	if err := os.Rename(filepath.Join(a, "docs", "draft.txt"), filepath.Join(a, "docs", "final.txt")); err != nil {
		t.Fatal(err)
	}
	t2 := snapshot("s2")

	at := func(mnt string, tm time.Time, rel string) string {
		return filepath.Join(mnt, ".plumeria", "at", tm.UTC().Format(time.RFC3339), rel)
	}
	if got := read(at(b, t1, "docs/report.txt")); got != "v1" {
		t.Fatalf("B reads %q at t1, want v1", got)
	}
	if got := read(at(b, t2, "docs/report.txt")); got != "v2, longer" {
		t.Fatalf("B reads %q at t2, want v2", got)
	}
	if got := read(filepath.Join(b, "docs", "report.txt")); got != "v2, longer" {
		t.Fatalf("B reads %q now, want v2", got)
	}
	if got := read(at(b, t1, "docs/draft.txt")); got != "draft" {
		t.Fatalf("the old name in the past: %q", got)
	}
	if _, err := os.Stat(at(b, t2, "docs/draft.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the old name after the rename: %v", err)
	}

	// Deleted on A, read in the past and brought back from B.
	if err := os.Remove(filepath.Join(a, "docs", "report.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(a, "proj")); err != nil {
		t.Fatal(err)
	}
	if got := read(at(b, t1, "proj/sub/main.go")); got != "package main" {
		t.Fatalf("a deleted directory's file in the past: %q", got)
	}
	out := string(c.cli("versions", filepath.Join(b, "docs", "report.txt")))
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || strings.Contains(out, "now") {
		t.Fatalf("versions of a deleted file with two states:\n%s", out)
	}
	c.cli("restore", filepath.Join(b, "docs", "report.txt"), "--at", t1.UTC().Format(time.RFC3339))
	c.cli("restore", filepath.Join(b, "proj"), "--at", t1.UTC().Format(time.RFC3339))
	if got := read(filepath.Join(a, "docs", "report.txt")); got != "v1" {
		t.Fatalf("A reads %q after the restore, want v1", got)
	}
	if got := read(filepath.Join(a, "proj", "link")); got != "package main" {
		t.Fatalf("A reads %q through the restored symlink", got)
	}
	out = string(c.cli("versions", filepath.Join(b, "docs", "report.txt")))
	if !strings.Contains(out, "now") {
		t.Fatalf("versions after the restore:\n%s", out)
	}

	// Bad input.
	if _, err := os.Stat(filepath.Join(b, ".plumeria", "at", "yesterday")); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("a malformed time: %v, want EINVAL", err)
	}
	if _, err := os.Stat(filepath.Join(b, ".plumeria", "at", "2001-01-01T00:00:00Z")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a time before the volume: %v, want ENOENT", err)
	}
	for _, bad := range [][]string{
		{"restore", filepath.Join(b, "docs", "report.txt"), "--at", "yesterday"},
		{"restore", filepath.Join(b, "docs", "report.txt"), "--at", "2001-01-01T00:00:00Z"},
		{"restore", filepath.Join(b, "proj"), "--at", t1.UTC().Format(time.RFC3339)},
		{"restore", filepath.Join(b, "nothere"), "--at", t1.UTC().Format(time.RFC3339)},
	} {
		r := c.run(time.Minute, nil, bad...)
		if r.code == 0 || len(strings.TrimSpace(string(r.stderr))) == 0 {
			t.Fatalf("%v", r)
		}
		t.Logf("refused: %s", strings.TrimSpace(string(r.stderr)))
	}
	if err := os.WriteFile(at(b, t1, "docs/report.txt"), []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
		t.Fatalf("a write to the past: %v, want EROFS", err)
	}
	if got := read(at(b, t1, "docs/report.txt")); got != "v1" {
		t.Fatalf("the past changed: %q", got)
	}
}

// writeTree writes data to path, making its missing parent directories.
func writeTree(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readFile returns path's bytes as a string.
func readFile(t *testing.T, path string) string {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(got)
}
