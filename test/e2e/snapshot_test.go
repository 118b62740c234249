package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSnapshotWhileWriting: two fs nodes write and fsync files while
// `plumeria snapshot create` runs. The snapshot, seen under
// .plumeria/snapshots on both mounts and mounted on its own, holds every
// file fsync'd before the command started, no file in a state it never
// had, and nothing written after the command returned; fsck of the
// snapshot is clean while the volume stays mounted. .plumeria is not
// listed in the root and is read-only.
func TestSnapshotWhileWriting(t *testing.T) {
	c := newFSCluster(t)
	a, b := c.mountNode("n1"), c.mountNode("n2")

	type writer struct {
		mnt, dir string
		mu       sync.Mutex
		synced   []string // file names fsync'd, in order
		made     map[string]string
	}
	content := func(dir string, i int) string {
		return strings.Repeat(fmt.Sprintf("%s file %d\n", dir, i), 1+i%300) // at most ~6 KiB: one WRITE
	}
	ws := []*writer{{mnt: a, dir: "wa", made: map[string]string{}}, {mnt: b, dir: "wb", made: map[string]string{}}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, w := range ws {
		if err := os.Mkdir(filepath.Join(w.mnt, w.dir), 0o755); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("f%d", i)
				data := content(w.dir, i)
				w.mu.Lock()
				w.made[name] = data
				w.mu.Unlock()
				f, err := os.Create(filepath.Join(w.mnt, w.dir, name))
				if err != nil {
					t.Errorf("create: %v", err)
					return
				}
				if _, err := f.WriteString(data); err != nil {
					t.Errorf("write: %v", err)
					f.Close()
					return
				}
				if i%2 == 0 {
					if err := f.Sync(); err != nil {
						t.Errorf("fsync: %v", err)
					}
					w.mu.Lock()
					w.synced = append(w.synced, name)
					w.mu.Unlock()
				}
				f.Close()
			}
		}()
	}
	// Not there yet: the kernel must not remember that (a negative entry).
	if _, err := os.Stat(filepath.Join(b, ".plumeria", "snapshots", "s1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a snapshot before it was taken: %v", err)
	}
	time.Sleep(time.Second)
	before := make([]int, len(ws))
	for k, w := range ws {
		w.mu.Lock()
		before[k] = len(w.synced)
		w.mu.Unlock()
	}
	out := c.cli("snapshot", "create", c.coordArg(), "--volume", "fs", "s1")
	t.Logf("%s", bytes.TrimSpace(out))
	after := time.Now()
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	// Written after the snapshot: must not be in it.
	if err := os.WriteFile(filepath.Join(a, "late"), []byte("late"), 0o644); err != nil {
		t.Fatal(err)
	}

	check := func(where, root string) {
		t.Helper()
		for k, w := range ws {
			names, err := os.ReadDir(filepath.Join(root, w.dir))
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			have := map[string]bool{}
			for _, e := range names {
				have[e.Name()] = true
				got, err := os.ReadFile(filepath.Join(root, w.dir, e.Name()))
				if err != nil {
					t.Fatalf("%s: read %s/%s: %v", where, w.dir, e.Name(), err)
				}
				w.mu.Lock()
				want, ok := w.made[e.Name()]
				w.mu.Unlock()
				if !ok || (len(got) != 0 && string(got) != want) {
					t.Fatalf("%s: %s/%s holds %d bytes it never held (want 0 or %d)", where, w.dir, e.Name(), len(got), len(want))
				}
			}
			for _, name := range w.synced[:before[k]] {
				if !have[name] {
					t.Fatalf("%s: %s/%s was fsync'd before the snapshot and is not in it", where, w.dir, name)
				}
				got, _ := os.ReadFile(filepath.Join(root, w.dir, name))
				if string(got) != w.made[name] {
					t.Fatalf("%s: %s/%s was fsync'd before the snapshot and reads %d bytes, want %d", where, w.dir, name, len(got), len(w.made[name]))
				}
			}
			t.Logf("%s: %s holds %d files, %d of them fsync'd before the snapshot", where, w.dir, len(names), before[k])
		}
		if _, err := os.Stat(filepath.Join(root, "late")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: a file written after the snapshot is in it: %v", where, err)
		}
	}
	check("n1 .plumeria", filepath.Join(a, ".plumeria", "snapshots", "s1"))
	check("n2 .plumeria", filepath.Join(b, ".plumeria", "snapshots", "s1"))

	root, err := os.ReadDir(a)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(root, func(e os.DirEntry) bool { return e.Name() == ".plumeria" }) {
		t.Fatal("the root lists .plumeria")
	}
	snaps, err := os.ReadDir(filepath.Join(a, ".plumeria", "snapshots"))
	if err != nil || len(snaps) != 1 || snaps[0].Name() != "s1" {
		t.Fatalf(".plumeria/snapshots lists %v (%v), want s1", snaps, err)
	}
	for _, p := range []string{filepath.Join(a, ".plumeria", "x"), filepath.Join(a, ".plumeria", "snapshots", "s1", "x"), filepath.Join(a, ".plumeria", "snapshots", "s1", ws[0].dir, "f0")} {
		if err := os.WriteFile(p, []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
			t.Fatalf("write %s: %v, want EROFS", p, err)
		}
	}
	if err := os.Remove(filepath.Join(a, ".plumeria", "snapshots", "s1", ws[0].dir, "f0")); !errors.Is(err, unix.EROFS) {
		t.Fatalf("remove in a snapshot: %v, want EROFS", err)
	}

	// On its own: `plumeria mount --snapshot`.
	p := c.newProc("snap")
	mnt := filepath.Join(c.dir, "snap.mnt")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	p.args = []string{"mount", c.coordArg(), "--volume", "fs", "--snapshot", "s1", mnt}
	c.start(p)
	c.waitFor(60*time.Second, "snapshot mounted", func() (bool, string) {
		b, _ := os.ReadFile("/proc/self/mounts")
		return bytes.Contains(b, []byte(" "+mnt+" fuse.plumeria ro,")), "not in /proc/self/mounts"
	})
	check("mount --snapshot", mnt)
	if err := os.WriteFile(filepath.Join(mnt, "x"), []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
		t.Fatalf("write on the snapshot's mount: %v, want EROFS", err)
	}
	c.stop("snap")

	r := c.run(5*time.Minute, nil, "fsck", c.coordArg(), "--volume", "fs", "--snapshot", "s1")
	if r.code != 0 {
		t.Fatalf("fsck of the snapshot: %v\n%s", r, r.stdout)
	}
	if r := c.run(time.Minute, nil, "snapshot", "create", c.coordArg(), "--volume", "fs", "s1"); r.code == 0 || !strings.Contains(string(r.stderr), "already has a snapshot") {
		t.Fatalf("a second snapshot s1: %v", r)
	}
	if r := c.run(time.Minute, nil, "mount", c.coordArg(), "--volume", "fs", "--snapshot", "nope", mnt); r.code == 0 || !strings.Contains(string(r.stderr), "no snapshot") {
		t.Fatalf("mount of a snapshot that is not: %v", r)
	}
	t.Logf("snapshot created %v before the checks ended", time.Since(after).Round(time.Millisecond))

	// A schedule run by the cluster: a snapshot every 5 s, the newest one kept.
	c.cli("snapshot", "schedule", c.coordArg(), "--volume", "fs", "--every", "5s", "--keep", "1")
	autos := func() []string {
		ents, err := os.ReadDir(filepath.Join(b, ".plumeria", "snapshots"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "auto-") {
				names = append(names, e.Name())
			}
		}
		return names
	}
	var first string
	c.waitFor(30*time.Second, "a scheduled snapshot", func() (bool, string) {
		a := autos()
		if len(a) > 0 {
			first = a[0]
		}
		return len(a) > 0, fmt.Sprint(a)
	})
	c.waitFor(30*time.Second, "the next scheduled snapshot, and the first deleted", func() (bool, string) {
		a := autos()
		return len(a) == 1 && a[0] != first, fmt.Sprint(a)
	})
	c.cli("snapshot", "schedule", c.coordArg(), "--volume", "fs", "--off")
	if _, err := os.Stat(filepath.Join(b, ".plumeria", "snapshots", "s1", ws[1].dir)); err != nil {
		t.Fatalf("the schedule touched a snapshot taken by hand: %v", err)
	}
	if r := c.run(time.Minute, nil, "snapshot", "schedule", c.coordArg(), "--volume", "fs", "--every", "1s", "--keep", "3"); r.code == 0 {
		t.Fatalf("a schedule every second was accepted: %v", r)
	}
}

// TestSnapshotCreateKilled: `plumeria snapshot create` SIGKILLed at
// several moments, once perhaps while it holds the barrier. The file
// system goes on (at worst after the killed clerk's lease), and a snapshot
// that was made holds what was written before it started.
func TestSnapshotCreateKilled(t *testing.T) {
	c := newFSCluster(t)
	a := c.mountNode("n1")
	for i, after := range []time.Duration{300 * time.Millisecond, 375 * time.Millisecond, 450 * time.Millisecond, 525 * time.Millisecond} {
		name := fmt.Sprintf("k%d", i)
		before := fmt.Sprintf("written before %s", name)
		if err := os.WriteFile(filepath.Join(a, name), []byte(before), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(plumeriaBin, "snapshot", "create", c.coordArg(), "--volume", "fs", name)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(after)
		cmd.Process.Kill()
		cmd.Wait()
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- os.WriteFile(filepath.Join(a, name+".after"), []byte("x"), 0o644) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("a write after the kill: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("the file system is still stopped 60 s after snapshot create was killed at %v", after)
		}
		list := string(c.cli("snapshot", "list", c.coordArg(), "--volume", "fs"))
		made := strings.Contains(list, name+" ")
		if made {
			got, err := os.ReadFile(filepath.Join(a, ".plumeria", "snapshots", name, name))
			if err != nil || string(got) != before {
				t.Fatalf("snapshot %s (create killed at %v) reads %q (%v), want %q", name, after, got, err, before)
			}
			if _, err := os.Stat(filepath.Join(a, ".plumeria", "snapshots", name, name+".after")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("snapshot %s holds a file written after the kill: %v", name, err)
			}
		}
		t.Logf("killed at %v: snapshot made: %v; the next write took %v", after, made, time.Since(start).Round(time.Millisecond))
	}
}
