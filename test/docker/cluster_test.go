//go:build linux

package docker

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/coord"
)

const volumeName = "dockertest"

// TestDockerCluster: the three containers of deploy/compose.yaml form a
// cluster; this host mounts its volume at the containers' bridge addresses;
// `docker kill` of one node leaves the mount working (old files read back,
// new ones written) while status shows its brick down and the data
// degraded; `docker start` brings it back into the same cluster (it was
// started with --join and rejoins from its data volume), after which
// nothing is degraded and every file is intact; the mount leaves cleanly.
func TestDockerCluster(t *testing.T) {
	c := newCluster(t)
	c.up()
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range st.Bricks { // the host mount must reach these
		if b.Addr != c.addr(b.Name) {
			t.Fatalf("brick %s advertises %s, want its bridge address %s", b.Name, b.Addr, c.addr(b.Name))
		}
	}
	c.cli("format", c.coordArg(), "--volume", volumeName, "--replicas", "3")
	m := c.mount(volumeName, fmt.Sprintf("dockertest-%d", os.Getpid()))

	seed := rand.Uint64()
	t.Logf("seed %d (file contents)", seed)
	w := &files{root: m.dir, rng: rand.New(rand.NewPCG(seed, seed)), sums: map[string][32]byte{}}
	within(t, 2*time.Minute, "wrote 12 files", func() error { return w.write("before", 12) })

	// The Raft leader: its brick, lock server and coordinator go away at
	// once, and a new leader must take over (PLUMERIA_DOCKER_VICTIM=follower
	// kills a follower instead).
	st, err = c.status()
	if err != nil {
		t.Fatal(err)
	}
	victim := st.Leader
	if os.Getenv("PLUMERIA_DOCKER_VICTIM") == "follower" {
		victim = "n3"
		if st.Leader == "n3" {
			victim = "n2"
		}
	}
	id := c.container(victim)
	c.docker("kill", id)
	c.logf("docker kill %s (%s)", victim, id[:12])

	within(t, 2*time.Minute, "read the old files and wrote 6 new ones with "+victim+" down", func() error {
		if err := w.check(); err != nil {
			return err
		}
		return w.write("during", 6)
	})
	st = c.waitStatus(30*time.Second, "status shows "+victim+" down and the volume degraded", func(st *coord.Status) (bool, string) {
		b, v := brickOf(st, victim), volumeOf(st, volumeName)
		return b != nil && b.State == "down" && v != nil && v.DegradedPGs > 0 && v.DegradedChunks > 0 && !coordUp(st, victim), summary(st, volumeName)
	})
	t.Logf("with %s down: %s", victim, summary(st, volumeName))
	c.waitDashboard(30*time.Second, st.Leader, victim, "down")
	within(t, 2*time.Minute, "wrote 6 more files and read everything after the map change", func() error {
		if err := w.write("degraded", 6); err != nil {
			return err
		}
		return w.check()
	})

	c.docker("start", id)
	c.logf("docker start %s", victim)
	maxSyncing := 0
	c.waitStatus(90*time.Second, victim+" rejoined: brick, lock server and coordinator up; the volume whole again", func(st *coord.Status) (bool, string) {
		b, v := brickOf(st, victim), volumeOf(st, volumeName)
		if v != nil {
			maxSyncing = max(maxSyncing, v.SyncingPGs)
		}
		return b != nil && b.State == "up" && lockUp(st, victim) && coordUp(st, victim) && len(st.Coordinators) == 3 &&
			v != nil && v.DegradedPGs == 0 && v.DegradedChunks == 0 && v.SyncingPGs == 0, summary(st, volumeName)
	})
	t.Logf("most placement groups seen syncing during the catch-up: %d", maxSyncing)
	within(t, 2*time.Minute, "wrote 4 files and read everything after the rejoin", func() error {
		if err := w.write("after", 4); err != nil {
			return err
		}
		return w.check()
	})
	m.unmount(t, 90*time.Second)
	c.logf("unmounted")
}

func coordUp(st *coord.Status, name string) bool {
	return slices.ContainsFunc(st.Coordinators, func(m coord.CoordinatorStatus) bool { return m.Name == name && m.Up && m.Voter })
}

func lockUp(st *coord.Status, name string) bool {
	return slices.ContainsFunc(st.LockServers, func(l coord.LockServerStatus) bool { return l.Name == name && l.State == "up" })
}

// files writes random files on the mount and remembers their checksums.
type files struct {
	root string
	rng  *rand.Rand
	sums map[string][32]byte // path → sha256
}

// write creates dir/f0..f(n-1), 1 KiB to 1 MiB each, fsync'd, then fsyncs dir.
func (f *files) write(dir string, n int) error {
	d := filepath.Join(f.root, dir)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	for i := range n {
		b := make([]byte, 1<<10+f.rng.IntN(1<<20))
		for j := range b {
			b[j] = byte(f.rng.Uint32())
		}
		p := filepath.Join(d, fmt.Sprintf("f%d", i))
		fh, err := os.Create(p)
		if err != nil {
			return err
		}
		_, err = fh.Write(b)
		if err == nil {
			err = fh.Sync()
		}
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		f.sums[p] = sha256.Sum256(b)
	}
	dh, err := os.Open(d)
	if err != nil {
		return err
	}
	defer dh.Close()
	return dh.Sync()
}

// check reads back every file written so far.
func (f *files) check() error {
	for p, want := range f.sums {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if got := sha256.Sum256(b); !bytes.Equal(got[:], want[:]) {
			return fmt.Errorf("%s: %d bytes with sha256 %x, want %x", p, len(b), got[:8], want[:8])
		}
	}
	return nil
}
