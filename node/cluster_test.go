package node

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/volume"
)

// testCluster runs a coordinator and n bricks in this process on loopback.
type testCluster struct {
	t      testing.TB
	dir    string
	coord  *Node
	bricks []*Node
	cl     *coordclient.Client
}

func newTestCluster(t testing.TB, n int) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, dir: t.TempDir()}
	lvl := slog.LevelWarn
	if testing.Verbose() {
		lvl = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	ctx := context.Background()
	c, err := Start(ctx, Config{Name: "c1", Listen: "127.0.0.1:0", DataDir: filepath.Join(tc.dir, "c1"), Coordinator: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	tc.coord = c
	for i := 0; i < n; i++ {
		tc.bricks = append(tc.bricks, tc.startBrick(i, "127.0.0.1:0"))
	}
	if tc.cl, err = coordclient.New(c.Addr()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tc.cl.Close()
		for _, b := range tc.bricks {
			if b != nil {
				b.Stop()
			}
		}
		c.Stop()
	})
	return tc
}

func (tc *testCluster) startBrick(i int, listen string) *Node {
	name := fmt.Sprintf("b%d", i)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, err := Start(context.Background(), Config{Name: name, Listen: listen, DataDir: filepath.Join(tc.dir, name), Brick: true,
		Coord: []string{tc.coord.Addr()}, Domain: map[string]string{"host": name}, Logger: log})
	if err != nil {
		tc.t.Fatal(err)
	}
	return b
}

func (tc *testCluster) createVolume(name string, replicas uint32) {
	err := tc.cl.Call(context.Background(), func(ctx context.Context, c pb.CoordinatorClient) error {
		_, err := c.CreateVolume(ctx, &pb.CreateVolumeRequest{Name: name, Replicas: replicas, Pgs: 16})
		return err
	})
	if err != nil {
		tc.t.Fatal(err)
	}
}

// openVolume opens volume name as writer "w"; closed at cleanup.
func (tc *testCluster) openVolume(name string) *volume.Volume {
	tc.t.Helper()
	v, err := volume.Open(context.Background(), tc.cl, name, volume.Options{Writer: "w"})
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.t.Cleanup(v.Close)
	return v
}

// readAt reads n bytes at off from v, failing the test on an error (30 s,
// retries included).
func readAt(t testing.TB, v *volume.Volume, off uint64, n int) []byte {
	t.Helper()
	buf := make([]byte, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := v.ReadAt(ctx, buf, off); err != nil {
		t.Fatalf("read at %d: %v", off, err)
	}
	return buf
}

// waitUntil polls cond until it holds, failing the test after d.
func waitUntil(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitFor is waitUntil with 10 s.
func waitFor(t testing.TB, ok func() bool) {
	t.Helper()
	waitUntil(t, 10*time.Second, "condition reached", ok)
}

func TestInProcessWriteKillRead(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	tc := newTestCluster(t, 4)
	tc.createVolume("v", 3)
	ctx := context.Background()
	v, err := volume.Open(ctx, tc.cl, "v", volume.Options{Writer: "w"})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	type wr struct {
		off  uint64
		data []byte
	}
	var mu sync.Mutex
	var acked []wr
	var wg sync.WaitGroup
	rng := rand.New(rand.NewPCG(1, 2))
	const writers, perWriter = 4, 40
	seeds := make([]uint64, writers)
	for i := range seeds {
		seeds[i] = rng.Uint64()
	}
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seeds[w], 0))
			for i := 0; i < perWriter; i++ {
				n := 1 + r.IntN(200<<10)
				d := make([]byte, n)
				for j := range d {
					d[j] = byte(r.Uint32())
				}
				off := uint64(w)<<40 + uint64(i)<<21 + uint64(r.IntN(1<<20))
				if err := v.WriteAt(ctx, d, off); err != nil {
					t.Logf("write %d/%d: %v", w, i, err)
					continue
				}
				mu.Lock()
				acked = append(acked, wr{off, d})
				mu.Unlock()
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	t.Log("stopping brick b1")
	tc.bricks[1].Stop()
	tc.bricks[1] = nil
	wg.Wait()
	t.Logf("%d acked writes", len(acked))
	for _, a := range acked {
		got := make([]byte, len(a.data))
		if err := v.ReadAt(ctx, got, a.off); err != nil {
			t.Fatalf("read %d: %v", a.off, err)
		}
		if !bytes.Equal(got, a.data) {
			t.Fatalf("mismatch at %d", a.off)
		}
	}
	// Re-replication onto the spare brick finishes.
	deadline := time.Now().Add(60 * time.Second)
	for {
		m, err := tc.cl.Map(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		deg := 0
		for _, p := range m.Volume("v").PGs {
			if len(p.InSync()) < 3 {
				deg++
			}
		}
		if deg == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d PGs still degraded", deg)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
