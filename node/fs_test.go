package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/volume"
)

// newFSCluster starts a coordinator, three bricks and a lock server, and
// formats volume "fs".
func newFSCluster(t *testing.T) *testCluster {
	tc := newTestCluster(t, 3)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	l, err := Start(context.Background(), Config{Name: "l1", Listen: "127.0.0.1:0", DataDir: filepath.Join(tc.dir, "l1"),
		Lock: true, Coord: []string{tc.coord.Addr()}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Stop)
	tc.createVolume("fs", 2)
	ctx := context.Background()
	vol, err := volume.Open(ctx, tc.cl, "fs", volume.Options{Writer: "format"})
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Close()
	if _, err := filesys.Format(ctx, NewFSDevice(vol), false, time.Now()); err != nil {
		t.Fatal(err)
	}
	return tc
}

func (tc *testCluster) mountFS(id string) *FSNode {
	tc.t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	n, err := MountFS(context.Background(), tc.cl, "fs", id, FSNodeOptions{Logger: log})
	if err != nil {
		tc.t.Fatal(err)
	}
	return n
}

// TestFSCoherenceTwoNodes: what one node does is seen by the other at
// once, through the lock service (revoke → write back → read).
func TestFSCoherenceTwoNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	tc := newFSCluster(t)
	ctx := context.Background()
	a, b := tc.mountFS("a"), tc.mountFS("b")
	defer b.Close(ctx)
	defer a.Close(ctx)
	c := filesys.Caller{}
	f, err := a.FS.Create(ctx, filesys.RootIno, "hello", 0o644, c, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.FS.Write(ctx, f.Ino, 0, []byte("from a"), 0, false); err != nil {
		t.Fatal(err)
	}
	got, err := b.FS.Lookup(ctx, filesys.RootIno, "hello")
	if err != nil || got.Size != 6 {
		t.Fatalf("b sees %+v %v", got, err)
	}
	buf := make([]byte, 10)
	if n, err := b.FS.Read(ctx, f.Ino, 0, buf, 0); err != nil || string(buf[:n]) != "from a" {
		t.Fatalf("b reads %q %v", buf[:n], err)
	}
	if err := b.FS.Rename(ctx, filesys.RootIno, "hello", filesys.RootIno, "renamed", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := a.FS.Lookup(ctx, filesys.RootIno, "hello"); !errors.Is(err, filesys.ErrNotFound) {
		t.Fatalf("a still sees the old name: %v", err)
	}
	big := bytes.Repeat([]byte("xyz"), 100000)
	if _, err := b.FS.Write(ctx, f.Ino, 0, big, 0, false); err != nil {
		t.Fatal(err)
	}
	buf = make([]byte, len(big))
	if n, err := a.FS.Read(ctx, f.Ino, 0, buf, 0); err != nil || !bytes.Equal(buf[:n], big) {
		t.Fatalf("a reads %d bytes %v", n, err)
	}
	// Both nodes create in one directory, alternating.
	for i := 0; i < 40; i++ {
		n := a
		if i%2 == 1 {
			n = b
		}
		if _, err := n.FS.Create(ctx, filesys.RootIno, fmt.Sprintf("f%d", i), 0o644, c, true); err != nil {
			t.Fatal(err)
		}
	}
	ents, _, err := a.FS.ReadDir(ctx, filesys.RootIno, 0, 1000)
	if err != nil || len(ents) != 41 {
		t.Fatalf("a lists %d entries %v", len(ents), err)
	}
}

// TestFSCrashRecovery: a node crashes after fsync; the lock service has the
// other node replay its log once the lease ends; everything fsync'd is there.
func TestFSCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	tc := newFSCluster(t)
	ctx := context.Background()
	a, b := tc.mountFS("a"), tc.mountFS("b")
	defer b.Close(ctx)
	d, err := a.FS.Mkdir(ctx, filesys.RootIno, "d", 0o755, filesys.Caller{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		f, err := a.FS.Create(ctx, d.Ino, fmt.Sprintf("f%d", i), 0o644, filesys.Caller{}, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.FS.Write(ctx, f.Ino, 0, []byte(fmt.Sprintf("content %d", i)), 0, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.FS.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	recovered := gathered(t, "plumeria_fs_recoveries_total", "volume", "fs")
	recorded := gathered(t, "plumeria_coord_recoveries_recorded_total", "coordinator", "c1")
	a.Crash()
	start := time.Now()
	ents, _, err := b.FS.ReadDir(ctx, d.Ino, 0, 1000)
	if err != nil || len(ents) != 100 {
		t.Fatalf("after recovery b lists %d entries: %v", len(ents), err)
	}
	t.Logf("b saw a's directory %v after the crash", time.Since(start))
	for i := 0; i < 100; i += 7 {
		at, err := b.FS.Lookup(ctx, d.Ino, fmt.Sprintf("f%d", i))
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		n, err := b.FS.Read(ctx, at.Ino, 0, buf, 0)
		if err != nil || string(buf[:n]) != fmt.Sprintf("content %d", i) {
			t.Fatalf("f%d: %q %v", i, buf[:n], err)
		}
	}
	// b ran the recovery (metric of its file system) and the coordinator
	// recorded it (a moment later, through the lock server).
	if got := gathered(t, "plumeria_fs_recoveries_total", "volume", "fs"); got < recovered+1 {
		t.Errorf("plumeria_fs_recoveries_total went from %v to %v, want one more", recovered, got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for gathered(t, "plumeria_coord_recoveries_recorded_total", "coordinator", "c1") < recorded+1 {
		if time.Now().After(deadline) {
			t.Fatalf("plumeria_coord_recoveries_recorded_total stayed at %v, want %v", recorded, recorded+1)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFSRemountAfterCleanClose: a node that unmounted cleanly mounts again
// under the same name without waiting for a lease: its log is empty and
// its session closed, so there is nothing to recover.
func TestFSRemountAfterCleanClose(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	tc := newFSCluster(t)
	ctx := context.Background()
	a := tc.mountFS("a")
	if _, err := a.FS.Mkdir(ctx, filesys.RootIno, "d", 0o755, filesys.Caller{}); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a = tc.mountFS("a")
	defer a.Close(ctx)
	took := time.Since(start)
	if _, err := a.FS.Lookup(ctx, filesys.RootIno, "d"); err != nil {
		t.Fatal(err)
	}
	t.Logf("remount took %v", took)
	if took > 5*time.Second {
		t.Fatalf("remount after a clean close took %v: it waited for a lease", took)
	}
}
