package node

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/filesys/fsck"
	"github.com/plumeria-fs/plumeria/volume"
)

// TestFSCrashFreesOrphans: files a node unlinked (or renamed over) while
// they were open are freed after it crashes: its orphan table survives in
// its log, recovery marks its slot recovered, and the surviving node's
// janitor frees them. fsck then finds a clean volume.
func TestFSCrashFreesOrphans(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	tc := newFSCluster(t)
	ctx := context.Background()
	a, b := tc.mountFS("a"), tc.mountFS("b")
	var inos []filesys.Attr
	for i := range 6 {
		f, err := a.FS.Create(ctx, filesys.RootIno, fmt.Sprintf("f%d", i), 0o644, filesys.Caller{}, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.FS.Write(ctx, f.Ino, 0, []byte("data of an orphan"), 0, false); err != nil {
			t.Fatal(err)
		}
		if err := a.FS.Open(ctx, f.Ino, f.Gen); err != nil {
			t.Fatal(err)
		}
		inos = append(inos, f)
	}
	for i := range 3 {
		if err := a.FS.Unlink(ctx, filesys.RootIno, fmt.Sprintf("f%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// f4 replaces f3: f3 becomes an orphan too.
	if err := a.FS.Rename(ctx, filesys.RootIno, "f4", filesys.RootIno, "f3", 0); err != nil {
		t.Fatal(err)
	}
	// f0 is closed: freed at once, its entry cleared.
	a.FS.Release(ctx, inos[0].Ino)
	if err := a.FS.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	freed := gathered(t, "plumeria_fs_orphans_freed_total", "volume", "fs")
	a.Crash()
	if _, _, err := b.FS.ReadDir(ctx, filesys.RootIno, 0, 100); err != nil {
		t.Fatal(err)
	}
	// b's janitor frees f1, f2 and f3 once a's locks are released.
	deadline := time.Now().Add(60 * time.Second)
	for gathered(t, "plumeria_fs_orphans_freed_total", "volume", "fs") < freed+3 {
		if time.Now().After(deadline) {
			t.Fatalf("orphans freed: %v, want %v", gathered(t, "plumeria_fs_orphans_freed_total", "volume", "fs"), freed+3)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, f := range inos[1:4] {
		if err := b.FS.Open(ctx, f.Ino, f.Gen); err == nil {
			t.Fatalf("orphan %d still opens", f.Ino)
		}
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	tc.fsckClean("after the crash")
}

// fsckClean checks volume "fs" (no node mounted) and fails on any problem.
func (tc *testCluster) fsckClean(when string) {
	tc.t.Helper()
	ctx := context.Background()
	vol, err := volume.Open(ctx, tc.cl, "fs", volume.Options{Writer: "fsck"})
	if err != nil {
		tc.t.Fatal(err)
	}
	defer vol.Close()
	rep, err := fsck.Check(ctx, NewFSDevice(vol), fsck.Options{})
	if err != nil {
		tc.t.Fatal(err)
	}
	if !rep.Clean() {
		tc.t.Fatalf("fsck %s: %v", when, rep.Problems)
	}
}

// TestFSOpenOnOtherNodeKept: a file open on one node and unlinked (or
// renamed over) on another keeps its inode: the open node reads its old
// contents, its number is not reused, and it is freed when the open node
// closes it or crashes (iopen locks, filesys/iopen.go).
func TestFSOpenOnOtherNodeKept(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	tc := newFSCluster(t)
	ctx := context.Background()
	a, b := tc.mountFS("a"), tc.mountFS("b")
	create := func(name, data string) filesys.Attr {
		t.Helper()
		f, err := a.FS.Create(ctx, filesys.RootIno, name, 0o644, filesys.Caller{}, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.FS.Write(ctx, f.Ino, f.Gen, []byte(data), 0, false); err != nil {
			t.Fatal(err)
		}
		a.FS.Release(ctx, f.Ino) // Create opened it
		return f
	}
	read := func(f filesys.Attr) (string, error) {
		p := make([]byte, 64)
		n, err := b.FS.Read(ctx, f.Ino, f.Gen, p, 0)
		return string(p[:n]), err
	}
	gone := func(f filesys.Attr) bool {
		g, err := a.FS.Getattr(ctx, f.Ino)
		return errors.Is(err, filesys.ErrNotFound) || (err == nil && g.Gen != f.Gen)
	}
	f := create("f", "old contents of f")
	create("g", "new f")
	h := create("h", "contents of h")
	for _, x := range []filesys.Attr{f, h} {
		if err := b.FS.Open(ctx, x.Ino, x.Gen); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.FS.Rename(ctx, filesys.RootIno, "g", filesys.RootIno, "f", 0); err != nil {
		t.Fatal(err)
	}
	if err := a.FS.Unlink(ctx, filesys.RootIno, "h"); err != nil {
		t.Fatal(err)
	}
	for _, x := range []filesys.Attr{f, h} {
		if got, err := read(x); err != nil || gone(x) {
			t.Fatalf("inode %d, open on b, removed on a: read %q, %v; freed: %v", x.Ino, got, err, gone(x))
		}
	}
	if got, _ := read(f); got != "old contents of f" {
		t.Fatalf("b reads %q from the file a renamed over, want its old contents", got)
	}
	for i := range 20 {
		n, err := a.FS.Create(ctx, filesys.RootIno, fmt.Sprintf("n%d", i), 0o644, filesys.Caller{}, true)
		if err != nil {
			t.Fatal(err)
		}
		a.FS.Release(ctx, n.Ino)
		if n.Ino == f.Ino || n.Ino == h.Ino {
			t.Fatalf("new file n%d took inode %d, which b has open", i, n.Ino)
		}
	}
	// b closes f: a's reaper frees it.
	b.FS.Release(ctx, f.Ino)
	waitUntil(t, 30*time.Second, "a frees the file b closed", func() bool { return gone(f) })
	if gone(h) {
		t.Fatal("h freed while b has it open")
	}
	// b crashes with h open: h is freed once b's log was replayed.
	b.Crash()
	waitUntil(t, 60*time.Second, "a frees the file b had open when it crashed", func() bool { return gone(h) })
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	tc.fsckClean("after the last close and the crash")
}
