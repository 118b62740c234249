package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/coord"
)

// TestCoordinatorFailover: three coordinators, three brick-only processes.
// The Raft leader is SIGKILLed while a client writes; another coordinator
// takes over, bricks stay up, and volume create, writes and reads keep
// working through the survivors. The old leader then restarts and rejoins.
func TestCoordinatorFailover(t *testing.T) {
	_, rng := seed(t)
	size := int64(16 << 20)
	if testing.Short() {
		size = 4 << 20
	}
	c := startCluster(t, 3, 3)
	c.createVolume("vol", 3)
	v := c.open("vol", "w1")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sl := newSlots(rng)
	first := sl.scattered(size)
	w := &writer{v: v, workers: 4}
	w.writeAll(ctx, first)
	if res := summarise(first); len(res.failed) > 0 {
		t.Fatalf("writes before the failover failed: %s", res)
	}

	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	old := st.Leader
	if c.procs[old] == nil || !c.procs[old].coordinator {
		t.Fatalf("status names leader %q, not one of the coordinators: %+v", old, st.Coordinators)
	}
	for _, m := range st.Coordinators {
		if m.Leader != (m.Name == old) || m.Addr != c.procs[m.Name].addr {
			t.Errorf("status coordinator entry %+v disagrees with leader %q / address %s", m, old, c.procs[m.Name].addr)
		}
	}

	// Keep writing through the failover: small paced writes, so that many
	// are in flight or start while there is no leader.
	var during []*extent
	for range 3000 {
		e := &extent{off: sl.next() + uint64(rng.IntN(4096)), data: make([]byte, 4096+rng.IntN(28<<10))}
		fill(rng, e.data)
		during = append(during, e)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	dw := &writer{v: v}
	var next atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
				i := int(next.Add(1) - 1)
				if i >= len(during) {
					return
				}
				dw.writeOne(ctx, during[i])
			}
		}()
	}
	time.Sleep(300 * time.Millisecond) // let some writes start
	c.kill(old)
	killed := time.Now()
	st = c.waitStatus(30*time.Second, "a new leader", func(st *coord.Status) (bool, string) {
		return st.Leader != "" && st.Leader != old, fmt.Sprintf("leader %q coordinators %+v", st.Leader, st.Coordinators)
	})
	c.logf("%s took over %v after %s was killed", st.Leader, time.Since(killed).Round(time.Millisecond), old)
	for _, m := range st.Coordinators {
		if m.Name == old && m.Up {
			t.Errorf("status shows the killed coordinator %s up: %+v", old, m)
		}
	}
	// No brick may be declared down by the change of leader.
	c.waitStatus(20*time.Second, "all bricks up under the new leader", func(st *coord.Status) (bool, string) {
		up := 0
		for _, b := range st.Bricks {
			if b.State == "up" && b.LastSeen >= 0 && b.LastSeen < 2000 {
				up++
			}
		}
		return up == 3, brickStates(st)
	})
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if next.Load() >= int64(len(during)) {
		t.Errorf("the paced writer ran out of extents before the failover ended; the test did not write throughout it")
	}
	res := summarise(during)
	t.Logf("writes during the failover: %s", res)
	if len(res.failed) > 0 {
		t.Errorf("writes during the failover failed (the client retries for a minute)")
	}
	straddled := 0
	for _, e := range res.acked {
		if e.start.Before(killed) && e.end.After(killed) || e.start.After(killed) {
			straddled++
		}
	}
	if straddled == 0 {
		t.Errorf("no write was acknowledged that was in flight or started after the leader died")
	}
	t.Logf("%d acknowledged writes were in flight or started after the leader died", straddled)

	// Create, write and read through the surviving coordinators only.
	var survivors []string
	for _, a := range c.coordAddrs() {
		if a != c.procs[old].addr {
			survivors = append(survivors, a)
		}
	}
	only := "--coord=" + survivors[0] + "," + survivors[1]
	c.cli("volume", "create", only, "vol2", "--replicas", "3")
	payload := make([]byte, 300<<10+7)
	fill(rng, payload)
	file := filepath.Join(t.TempDir(), "payload")
	if err := os.WriteFile(file, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	c.cli("vdisk", "write", only, "--volume", "vol2", "--offset", "1TiB", "--file", file)
	got := c.cli("vdisk", "read", only, "--volume", "vol2", "--offset", "1TiB", "--length", fmt.Sprint(len(payload)))
	if !bytes.Equal(got, payload) {
		t.Errorf("vdisk read after failover returned %d bytes differing from the %d written", len(got), len(payload))
	}
	// The Go client, holding every address including the dead one.
	v2 := c.open("vol2", "w2")
	after := sl.scattered(size / 2)
	(&writer{v: v2, workers: 4}).writeAll(ctx, after)
	if res := summarise(after); len(res.failed) > 0 {
		t.Errorf("writes to a volume created after the failover failed: %s", res)
	}
	verifyWith(t, ctx, v, "", first, c.replicaDiag("vol"))
	verifyWith(t, ctx, v, "", during, c.replicaDiag("vol"))
	verifyWith(t, ctx, v2, "", after, c.replicaDiag("vol2"))

	// The old leader comes back as a follower and the group is whole again.
	c.restart(old)
	c.waitStatus(30*time.Second, old+" back as an up follower", func(st *coord.Status) (bool, string) {
		for _, m := range st.Coordinators {
			if m.Name == old {
				return m.Up && !m.Leader && st.Leader != "", fmt.Sprintf("leader %q coordinators %+v", st.Leader, st.Coordinators)
			}
		}
		return false, fmt.Sprintf("%s missing: %+v", old, st.Coordinators)
	})
	c.cli("volume", "create", c.coordArg(), "vol3", "--replicas", "3")
}
