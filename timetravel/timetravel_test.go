package timetravel

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{`/mnt/a\040b`: "/mnt/a b", `/x\011y`: "/x\ty", `/plain`: "/plain", `/bad\09`: `/bad\09`, `/end\04`: `/end\04`} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRestore: a tree of a file, a symlink and a directory is copied with
// its modes and times; a file replaces a file; a directory is not put over
// anything, and a failed restore leaves no temporary behind.
func TestRestore(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "tree", "sub"), 0o750))
	must(os.WriteFile(filepath.Join(src, "tree", "sub", "f"), []byte("old bytes"), 0o640))
	must(os.Symlink("sub/f", filepath.Join(src, "tree", "link")))
	must(os.Chtimes(filepath.Join(src, "tree", "sub", "f"), old, old))

	var last, total int64
	must(Restore(filepath.Join(src, "tree"), filepath.Join(dst, "deep", "tree"), func(d, t int64) { last, total = d, t }))
	got, err := os.ReadFile(filepath.Join(dst, "deep", "tree", "link"))
	if err != nil || string(got) != "old bytes" {
		t.Fatalf("restored tree reads %q through its symlink (%v)", got, err)
	}
	fi, err := os.Stat(filepath.Join(dst, "deep", "tree", "sub", "f"))
	if err != nil || fi.Mode().Perm() != 0o640 || !fi.ModTime().Equal(old) {
		t.Fatalf("restored file: %v %v", fi, err)
	}
	if di, err := os.Stat(filepath.Join(dst, "deep", "tree", "sub")); err != nil || di.Mode().Perm() != 0o750 {
		t.Fatalf("restored directory: %v %v", di, err)
	}
	if last != 9 || total != 9 {
		t.Fatalf("progress %d of %d, want 9 of 9", last, total)
	}

	// A file replaces a file.
	must(os.WriteFile(filepath.Join(dst, "f"), []byte("new"), 0o644))
	must(Restore(filepath.Join(src, "tree", "sub", "f"), filepath.Join(dst, "f"), nil))
	if got, _ := os.ReadFile(filepath.Join(dst, "f")); string(got) != "old bytes" {
		t.Fatalf("a file restored over a file reads %q", got)
	}
	// A directory goes nowhere something is, and nothing replaces one.
	if err := Restore(filepath.Join(src, "tree"), filepath.Join(dst, "deep", "tree"), nil); err == nil {
		t.Fatal("a directory restored over a directory")
	}
	if err := Restore(filepath.Join(src, "tree", "sub", "f"), filepath.Join(dst, "deep"), nil); err == nil {
		t.Fatal("a file restored over a directory")
	}
	ents, _ := os.ReadDir(dst)
	for _, e := range ents {
		if e.Name()[0] == '.' {
			t.Fatalf("a temporary was left: %s", e.Name())
		}
	}
}
