package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestFileVersions: on a volume that keeps file versions, each close of a
// changed file on node A makes a version; node B reads v1 at a time
// between the two closes and v2 now, reads a deleted file and directory
// and a renamed file's old name in the past, and brings them back with
// plumeria restore; plumeria versions lists the closes. Then A is killed
// right after a close that no log write has made durable: after recovery
// the file's versions hold every durable close and nothing never closed.
func TestFileVersions(t *testing.T) {
	c := startFSCluster(t, []string{"--file-versions"})
	a, b := c.mountNode("n1"), c.mountNode("n2")
	write := func(path, data string) { t.Helper(); writeTree(t, path, data) }
	read := func(path string) string { t.Helper(); return readFile(t, path) }
	moment := func() time.Time { // a time strictly between what came before and what comes after
		time.Sleep(5 * time.Millisecond)
		tm := time.Now()
		time.Sleep(5 * time.Millisecond)
		return tm
	}
	at := func(mnt string, tm time.Time, rel string) string {
		return filepath.Join(mnt, ".plumeria", "at", tm.UTC().Format(time.RFC3339Nano), rel)
	}
	big := strings.Repeat("0123456789abcdef", 40000) // 640 KiB: in the extent
	write(filepath.Join(a, "docs", "report.txt"), "v1")
	write(filepath.Join(a, "docs", "big"), big)
	write(filepath.Join(a, "proj", "sub", "main.go"), "package main")
	t1 := moment()
	write(filepath.Join(a, "docs", "report.txt"), "v2, longer")
	f, err := os.OpenFile(filepath.Join(a, "docs", "big"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("CHANGED"), 300000); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t2 := moment()

	if got := read(at(b, t1, "docs/report.txt")); got != "v1" {
		t.Fatalf("B reads %q between the closes, want v1", got)
	}
	if got := read(filepath.Join(b, "docs", "report.txt")); got != "v2, longer" {
		t.Fatalf("B reads %q now, want v2", got)
	}
	if got := read(at(b, t1, "docs/big")); got != big {
		t.Fatalf("B reads %d bytes of big at t1, not the first version", len(got))
	}
	if got := read(at(b, t2, "docs/big")); got != big[:300000]+"CHANGED"+big[300007:] {
		t.Fatalf("B reads %d bytes of big at t2, not the second version", len(got))
	}
	out := string(c.cli("versions", filepath.Join(b, "docs", "report.txt")))
	if lines := regexp.MustCompile(`(?m)^[12] .* n1$`).FindAllString(out, -1); len(lines) != 2 {
		t.Fatalf("versions of report.txt:\n%s", out)
	}

	// A renames, deletes a file and a tree; B reads them in the past.
	if err := os.Rename(filepath.Join(a, "docs", "report.txt"), filepath.Join(a, "docs", "final.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(a, "proj")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(a, "docs", "big")); err != nil {
		t.Fatal(err)
	}
	t3 := moment()
	if got := read(at(b, t2, "docs/report.txt")); got != "v2, longer" {
		t.Fatalf("the old name in the past: %q", got)
	}
	if _, err := os.Stat(at(b, t3, "docs/report.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the old name after the rename: %v", err)
	}
	if got := read(at(b, t2, "proj/sub/main.go")); got != "package main" {
		t.Fatalf("a deleted directory's file in the past: %q", got)
	}
	out = string(c.cli("versions", filepath.Join(b, "docs", "big"), "--at", t2.UTC().Format(time.RFC3339Nano)))
	if !strings.Contains(out, "\n2 ") {
		t.Fatalf("versions of the deleted big:\n%s", out)
	}
	c.cli("restore", filepath.Join(b, "docs", "big"), "--at", t1.UTC().Format(time.RFC3339Nano))
	c.cli("restore", filepath.Join(b, "proj"), "--at", t2.UTC().Format(time.RFC3339Nano))
	if got := read(filepath.Join(a, "docs", "big")); got != big {
		t.Fatalf("A reads %d bytes after restoring the first version of big", len(got))
	}
	if got := read(filepath.Join(a, "proj", "sub", "main.go")); got != "package main" {
		t.Fatalf("A reads %q in the restored tree", got)
	}
	if err := os.WriteFile(at(b, t1, "docs/report.txt"), []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
		t.Fatalf("a write to the past: %v, want EROFS", err)
	}
	if _, err := os.Stat(filepath.Join(b, ".plumeria", "at", "2001-01-01T00:00:00Z")); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("a time before the volume: %v, want EINVAL", err)
	}

	// Retention: docs keeps no old versions; a cleaner pass drops them.
	if n := strings.Count(string(c.cli("versions", filepath.Join(b, "docs", "final.txt"))), " n1\n"); n != 2 {
		t.Fatalf("final.txt has %d versions before the cleaner, want 2", n)
	}
	r := c.run(time.Minute, nil, "retention", "set", filepath.Join(b, "docs"), "--all", "-1h")
	if r.code == 0 || !strings.Contains(string(r.stderr), "positive duration") {
		t.Fatalf("a policy that makes no sense: %v", r)
	}
	c.cli("retention", "set", filepath.Join(b, "docs"), "--none")
	if out := string(c.cli("retention", "show", filepath.Join(a, "docs", "final.txt"))); !strings.Contains(out, "none (from "+filepath.Join(a, "docs")+")") {
		t.Fatalf("retention show: %s", out)
	}
	if out := string(c.cli("retention", "show", filepath.Join(a, "proj"))); !strings.Contains(out, "all=1h0m0s hourly=1d daily=30d (from default)") {
		t.Fatalf("retention show of the default: %s", out)
	}
	out = string(c.cli("retention", "clean", c.coordArg(), "--volume", "fs"))
	if !regexp.MustCompile(`[1-9]\d* dropped`).MatchString(out) {
		t.Fatalf("retention clean: %s", out)
	}
	if n := strings.Count(string(c.cli("versions", filepath.Join(b, "docs", "final.txt"))), " n1\n"); n != 1 {
		t.Fatalf("final.txt has %d versions after the cleaner, want 1 (what it reads now)", n)
	}
	if got := read(filepath.Join(b, "docs", "final.txt")); got != "v2, longer" {
		t.Fatalf("final.txt reads %q after the cleaner", got)
	}

	// Crash: v1 durable (fsync), v2 closed but only in A's log, then a
	// write never closed; SIGKILL A. B recovers A's log.
	crash := filepath.Join(a, "crash.txt")
	write(crash, "durable")
	g, err := os.OpenFile(filepath.Join(a, "sync"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Sync(); err != nil { // the log up to here
		t.Fatal(err)
	}
	write(crash, "closed, maybe not durable")
	h, err := os.OpenFile(crash, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	h.WriteString("never closed")
	c.kill("n1")
	g.Close()
	h.Close()
	unix.Unmount(a, unix.MNT_DETACH)
	var vs []string
	c.waitFor(90*time.Second, "B lists crash.txt's versions after A's recovery", func() (bool, string) {
		r := c.run(30*time.Second, nil, "versions", filepath.Join(b, "crash.txt"))
		vs = regexp.MustCompile(`(?m)^\d+ `).FindAllString(string(r.stdout), -1)
		return r.code == 0, string(r.stderr)
	})
	if len(vs) < 1 || len(vs) > 2 {
		t.Fatalf("crash.txt has %d versions after the crash, want 1 or 2", len(vs))
	}
	out = string(c.cli("versions", filepath.Join(b, "crash.txt")))
	if !strings.Contains(out, "\n1 ") {
		t.Fatalf("versions after the crash lack the durable one:\n%s", out)
	}
	// Every version listed reads as one of the closed contents.
	closed := map[string]bool{"durable": true, "closed, maybe not durable": true}
	for _, m := range regexp.MustCompile(`(?m)^(\d+) +(\S+)`).FindAllStringSubmatch(out, -1) {
		tm, err := time.Parse(time.RFC3339Nano, m[2])
		if err != nil {
			t.Fatal(err)
		}
		if got := read(at(b, tm, "crash.txt")); !closed[got] {
			t.Fatalf("version %s reads %q: never closed", m[1], got)
		}
	}
}
