package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plumeria-fs/plumeria/coord"
	"github.com/plumeria-fs/plumeria/fsx"
	"github.com/plumeria-fs/plumeria/posixtest"
)

// fsReady skips when FUSE is not available here.
func fsReady(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse: FUSE tests need it (make deps installs fuse3)")
	}
	if os.Geteuid() != 0 {
		t.Skip("FUSE tests mount as root")
	}
}

// newFSCluster starts a coordinator that is also a lock server, three
// bricks (with brickArgs added to their command lines), and formats volume
// "fs" (2 replicas).
func newFSCluster(t *testing.T, brickArgs ...string) *cluster {
	return startFSCluster(t, nil, brickArgs...)
}

// startFSCluster is newFSCluster with more arguments for plumeria format
// (e.g. --file-versions).
func startFSCluster(t *testing.T, formatArgs []string, brickArgs ...string) *cluster {
	return startFSClusterCoord(t, nil, formatArgs, brickArgs...)
}

// startFSClusterCoord is startFSCluster with more arguments for the
// coordinator's command line.
func startFSClusterCoord(t *testing.T, coordArgs, formatArgs []string, brickArgs ...string) *cluster {
	fsReady(t)
	c := newCluster(t)
	p := c.newProc("c1")
	p.coordinator = true
	p.args = append([]string{"server", "--name", "c1", "--listen", p.addr, "--data", p.data, "--coordinator", "--lock"}, coordArgs...)
	c.start(p)
	for i := 1; i <= 3; i++ {
		c.addBrick(fmt.Sprintf("b%d", i), fmt.Sprintf("h%d", i), brickArgs...)
	}
	c.waitStatus(60*time.Second, "3 bricks up and a lock server", func(st *coord.Status) (bool, string) {
		up := 0
		for _, b := range st.Bricks {
			if b.State == "up" {
				up++
			}
		}
		return up == 3 && len(st.LockServers) == 1, fmt.Sprintf("%d bricks up, %d lock servers", up, len(st.LockServers))
	})
	c.cli(append([]string{"format", c.coordArg(), "--volume", "fs", "--replicas", "2"}, formatArgs...)...)
	return c
}

// mountNode starts `plumeria mount` as process name on a new mount point
// and waits until the kernel shows the mount.
func (c *cluster) mountNode(name string) string {
	c.t.Helper()
	p := c.procs[name]
	if p == nil {
		p = c.newProc(name)
		mnt := filepath.Join(c.dir, name+".mnt")
		if err := os.MkdirAll(mnt, 0o755); err != nil {
			c.t.Fatal(err)
		}
		p.args = []string{"mount", c.coordArg(), "--volume", "fs", "--name", name, mnt}
		c.t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	}
	mnt := p.args[len(p.args)-1]
	c.start(p)
	c.waitFor(90*time.Second, name+" mounted", func() (bool, string) {
		b, _ := os.ReadFile("/proc/self/mounts")
		return bytes.Contains(b, []byte(" "+mnt+" fuse.plumeria ")), "not in /proc/self/mounts"
	})
	return mnt
}

// TestFSTwoMountsCoherent: two fs node processes mount one volume; what
// one does is seen at once by the other; appends under flock lose nothing.
func TestFSTwoMountsCoherent(t *testing.T) {
	c := newFSCluster(t)
	a, b := c.mountNode("n1"), c.mountNode("n2")
	posixtest.RunTwoDirs(t, a, b)
}

// TestFSPosix runs the POSIX behaviour suite on a Plumeria mount (the
// control run on a local directory is in package posixtest).
func TestFSPosix(t *testing.T) {
	c := newFSCluster(t)
	mnt := c.mountNode("n1")
	posixtest.Run(t, mnt, posixtest.Options{})
}

// TestFSFsx: the fsx exerciser's 100,000 operations on a file on the mount
// match its model.
func TestFSFsx(t *testing.T) {
	c := newFSCluster(t)
	mnt := c.mountNode("n1")
	ops := 100000
	if testing.Short() {
		ops = 5000
	}
	seed := rand.Uint64()
	st, err := fsx.Run(context.Background(), filepath.Join(mnt, "fsx.dat"), fsx.Config{Ops: ops, Seed: seed, MaxFileBytes: 256 << 10})
	if err != nil {
		t.Fatalf("fsx seed %d: %v", seed, err)
	}
	t.Logf("fsx seed %d: %+v", seed, st)
}

// TestFSKillNode: SIGKILL an fs node in the middle of a metadata-heavy
// workload; another node replays its log once its lease ends; every file
// it fsync'd is intact; fsck is clean. Repeated at random kill points.
func TestFSKillNode(t *testing.T) {
	c := newFSCluster(t)
	b := c.mountNode("n2")
	rounds := 5
	if testing.Short() {
		rounds = 1
	}
	for round := 0; round < rounds; round++ {
		a := c.mountNode("n1")
		dir := filepath.Join(a, fmt.Sprintf("round%d", round))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		synced := map[string]string{} // path relative to the mount → content
		var mu sync.Mutex
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				sub := filepath.Join(dir, fmt.Sprintf("d%d", i%7))
				os.Mkdir(sub, 0o755)
				name := filepath.Join(sub, fmt.Sprintf("f%d", i))
				content := strings.Repeat(fmt.Sprintf("round %d file %d\n", round, i), 1+i%50)
				f, err := os.Create(name)
				if err != nil {
					return
				}
				if _, err := f.WriteString(content); err != nil {
					f.Close()
					return
				}
				if i%3 == 0 {
					if f.Sync() == nil {
						rel, _ := filepath.Rel(a, name)
						mu.Lock()
						synced[rel] = content
						mu.Unlock()
					}
				}
				f.Close()
				if i%5 == 4 {
					os.Rename(name, name+".moved")
				}
			}
		}()
		time.Sleep(time.Duration(500+rand.IntN(2500)) * time.Millisecond)
		c.kill("n1")
		close(stop)
		unix.Unmount(a, unix.MNT_DETACH)
		<-done
		mu.Lock()
		start := time.Now()
		n := 0
		for rel, want := range synced {
			got, err := os.ReadFile(filepath.Join(b, rel))
			if err != nil {
				// renamed after its fsync: the rename may or may not have survived
				got, err = os.ReadFile(filepath.Join(b, rel+".moved"))
			}
			if err != nil || string(got) != want {
				t.Fatalf("round %d: fsync'd %s: %v (%d bytes, want %d)", round, rel, err, len(got), len(want))
			}
			n++
		}
		mu.Unlock()
		t.Logf("round %d: %d fsync'd files intact on the other node, %v after the kill", round, n, time.Since(start))
	}
	c.stop("n2")
	unix.Unmount(b, unix.MNT_DETACH)
	// Offline check: nothing is mounted now; exits non-zero on any problem.
	r := c.run(5*time.Minute, nil, "fsck", c.coordArg(), "--volume", "fs")
	if r.code != 0 {
		t.Fatalf("fsck after the kills: %v", r)
	}
	t.Logf("fsck: %s", r)
}
