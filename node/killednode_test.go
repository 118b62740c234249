package node

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/coordclient/faultnet"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/lock"
	lockclerk "github.com/plumeria-fs/plumeria/lock/clerk"
	"github.com/plumeria-fs/plumeria/volume"
)

// TestKilledNodeStallsBriefly: a node running a brick and a lock server
// dies as a container does under `docker kill`: its connections close and
// its address goes dark (faultnet), so reconnecting hangs instead of
// failing. Volume reads and writes, and lock acquisitions in the lock
// groups it owned, resume once the coordinator has declared it dead
// (limits.BrickDeadAfter) and moved its placement groups and lock groups,
// not after a 20 s connect timeout (the docker test's stall: a FUSE read
// waited for gRPC's default connect timeout on the dead brick's address).
func TestKilledNodeStallsBriefly(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	ctx := context.Background()
	c, err := Start(ctx, Config{Name: "c1", Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "c1"), Coordinator: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	nodes := map[string]*Node{}
	proxies := map[string]*faultnet.Proxy{}
	defer func() {
		for _, n := range nodes {
			n.Stop()
		}
		for _, p := range proxies {
			p.Close()
		}
	}()
	for i := range 3 {
		name := fmt.Sprintf("n%d", i)
		listen := freeAddr(t)
		p, err := faultnet.Listen(listen)
		if err != nil {
			t.Fatal(err)
		}
		proxies[name] = p
		n, err := Start(ctx, Config{Name: name, Listen: listen, Advertise: p.Addr(), DataDir: filepath.Join(dir, name),
			Brick: true, Lock: true, Coord: []string{c.Addr()}, Domain: map[string]string{"host": name}, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		nodes[name] = n
	}
	cc, err := coordclient.New(c.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	waitMap(t, cc, "3 lock servers owning groups", func(m *clustermap.Map) bool {
		owners := map[string]bool{}
		for _, g := range m.LockGroups {
			owners[g.Server] = true
		}
		return len(m.LockGroups) == clustermap.LockGroupsN && len(owners) == 3 && !owners[""]
	})
	err = cc.Call(ctx, func(ctx context.Context, cl pb.CoordinatorClient) error {
		_, err := cl.CreateVolume(ctx, &pb.CreateVolumeRequest{Name: "v", Replicas: 3, Pgs: 16})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	// Two blocks in every placement group: one to read back after the
	// kill, one to write then.
	v, err := volume.Open(ctx, cc, "v", volume.Options{Writer: "w"})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	vol := v.Map().Volume("v")
	var reads, writes []uint64
	seen := map[uint32]int{}
	for k := uint64(0); len(reads) < len(vol.PGs) || len(writes) < len(vol.PGs); k++ {
		off := k * uint64(vol.ChunkBytes)
		switch seen[vol.PGOf(off)]++; seen[vol.PGOf(off)] {
		case 1:
			reads = append(reads, off)
		case 2:
			writes = append(writes, off)
		}
	}
	content := func(off uint64) []byte { return bytes.Repeat([]byte{byte(off >> 16)}, 4096) }
	for _, off := range reads {
		if err := v.WriteAt(ctx, content(off), off); err != nil {
			t.Fatal(err)
		}
	}

	// A clerk holding a lock in every lock group.
	cl := startClerk(t, cc, "fs1", "vol")
	lockIn := map[int][]uint64{} // group → locks, the first one held
	for l := uint64(0); len(lockIn) < clustermap.LockGroupsN || !allTwo(lockIn); l++ {
		g := lock.GroupOf("vol", l, clustermap.LockGroupsN)
		lockIn[g] = append(lockIn[g], l)
	}
	for _, ls := range lockIn {
		acquire(t, cl, ls[0])
	}

	m := v.Map()
	victim := m.Volume("v").PGs[0].Primary()
	var victimGroups []int
	for g, lg := range m.LockGroups {
		if lg.Server == victim {
			victimGroups = append(victimGroups, g)
		}
	}
	t.Logf("killing %s: primary of PG 0, owner of %d lock groups", victim, len(victimGroups))
	proxies[victim].Kill()
	nodes[victim].Stop()
	delete(nodes, victim)
	killed := time.Now()

	// Each kind of work runs from the kill on; each must be done within the
	// failure detection plus a margin for a loaded test machine.
	bound := limits.BrickDeadAfter + 6*time.Second
	var wg sync.WaitGroup
	run := func(what string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				t.Errorf("%s: %v", what, err)
				return
			}
			took := time.Since(killed)
			t.Logf("%s: done %v after the kill", what, took.Round(time.Millisecond))
			if took > bound {
				t.Errorf("%s took %v after the kill, want at most %v", what, took.Round(time.Millisecond), bound)
			}
		}()
	}
	run("read a block of every placement group", func() error {
		for _, off := range reads {
			got := make([]byte, 4096)
			if err := v.ReadAt(ctx, got, off); err != nil {
				return err
			}
			if !bytes.Equal(got, content(off)) {
				return fmt.Errorf("block at %d: wrong content", off)
			}
		}
		return nil
	})
	run("write a block of every placement group", func() error {
		for _, off := range writes {
			if err := v.WriteAt(ctx, content(off), off); err != nil {
				return err
			}
		}
		return nil
	})
	run(fmt.Sprintf("acquire a held and a new lock in each of %s's lock groups", victim), func() error {
		for _, g := range victimGroups {
			for _, l := range lockIn[g][:2] {
				if err := cl.Acquire(ctx, "vol", l, lock.Write); err != nil {
					return fmt.Errorf("lock %d (group %d): %w", l, g, err)
				}
				cl.Unpin("vol", l, lock.Write)
			}
		}
		return nil
	})
	wg.Wait()
	if cl.Lost() {
		t.Fatal("the clerk lost its lease")
	}
}

func allTwo(m map[int][]uint64) bool {
	for _, ls := range m {
		if len(ls) < 2 {
			return false
		}
	}
	return true
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitMap(t *testing.T, cc *coordclient.Client, what string, cond func(*clustermap.Map) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, err := cc.Map(context.Background(), 0)
		if err == nil && cond(m) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (last error %v)", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startClerk opens a session of id with table through the coordinator and
// runs its clerk until the test ends.
func startClerk(t *testing.T, cc *coordclient.Client, id, table string) *lockclerk.Clerk {
	t.Helper()
	var session uint64
	err := cc.Call(context.Background(), func(ctx context.Context, cl pb.CoordinatorClient) error {
		r, err := cl.OpenSession(ctx, &pb.OpenSessionRequest{Clerk: id, Tables: []string{table}})
		if err == nil {
			session = r.Session
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := lockclerk.New(lockclerk.Config{ID: id, Session: session, Groups: clustermap.LockGroupsN,
		Servers: NewLockResolver(cc), OnRecover: func(string, string, uint64) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); cl.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := cl.Open(table); err != nil {
		t.Fatal(err)
	}
	return cl
}

func acquire(t *testing.T, cl *lockclerk.Clerk, l uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.Acquire(ctx, "vol", l, lock.Write); err != nil {
		t.Fatalf("acquire %d: %v", l, err)
	}
	cl.Unpin("vol", l, lock.Write)
}
