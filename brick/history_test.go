package brick_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/plumeria-fs/plumeria/brick"
	"github.com/plumeria-fs/plumeria/coord"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/netmux"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/volume"
)

// startCluster runs a coordinator and n bricks counting history every
// historyEvery, in this process on loopback; all stop at cleanup.
func startCluster(t *testing.T, n int, historyEvery time.Duration) *coordclient.Client {
	t.Helper()
	return newTestCluster(t, n, historyEvery).cl
}

// testCluster is a coordinator and bricks in this process on loopback.
type testCluster struct {
	t            *testing.T
	dir          string
	cl           *coordclient.Client
	historyEvery time.Duration
	bricks       []*brick.Server // b0, b1, ... in order
}

func serveGRPC(t *testing.T) (*netmux.Mux, *grpc.Server) {
	mux, err := netmux.Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	return mux, grpc.NewServer(grpc.MaxRecvMsgSize(limits.RPCMessageBytesMax), grpc.MaxSendMsgSize(limits.RPCMessageBytesMax))
}

// newTestCluster runs a coordinator and n bricks (addBrick); all stop at
// cleanup.
func newTestCluster(t *testing.T, n int, historyEvery time.Duration) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, dir: t.TempDir(), historyEvery: historyEvery}
	mux, gs := serveGRPC(t)
	c, err := coord.Start(coord.Config{Name: "c1", Addr: mux.Addr().String(), DataDir: filepath.Join(tc.dir, "c1"),
		Registerer: prometheus.NewRegistry()}, mux.Raft(), gs)
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(mux.GRPC())
	t.Cleanup(func() { gs.Stop(); c.Stop(); mux.Close() })
	if tc.cl, err = coordclient.New(mux.Addr().String()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.cl.Close)
	for range n {
		tc.addBrick()
	}
	return tc
}

// addBrick starts the next brick, on a host of its own, and returns it.
func (tc *testCluster) addBrick() *brick.Server {
	t := tc.t
	t.Helper()
	name := fmt.Sprintf("b%d", len(tc.bricks))
	bmux, bgs := serveGRPC(t)
	b, err := brick.New(brick.Config{Name: name, Addr: bmux.Addr().String(), DataDir: filepath.Join(tc.dir, name),
		Domain: map[string]string{"host": name}, Coord: tc.cl, HistoryInterval: tc.historyEvery}, bgs)
	if err != nil {
		t.Fatal(err)
	}
	go bgs.Serve(bmux.GRPC())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err = b.Run(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bgs.Stop(); b.Stop(); bmux.Close() })
	tc.bricks = append(tc.bricks, b)
	return b
}

func call(t *testing.T, cl *coordclient.Client, what string, fn func(context.Context, pb.CoordinatorClient) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.Call(ctx, fn); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func volumeStatus(t *testing.T, cl *coordclient.Client, name string) coord.VolumeStatus {
	t.Helper()
	var st coord.Status
	call(t, cl, "status", func(ctx context.Context, c pb.CoordinatorClient) error {
		r, err := c.Status(ctx, &pb.StatusRequest{})
		if err != nil {
			return err
		}
		return json.Unmarshal(r.StatusJson, &st)
	})
	for _, v := range st.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("status has no volume %q: %+v", name, st.Volumes)
	return coord.VolumeStatus{}
}

// createVolume creates a 2-replica volume and opens it.
func createVolume(t *testing.T, cl *coordclient.Client, name string, fileVersions bool) *volume.Volume {
	t.Helper()
	call(t, cl, "create volume", func(ctx context.Context, c pb.CoordinatorClient) error {
		_, err := c.CreateVolume(ctx, &pb.CreateVolumeRequest{Name: name, Replicas: 2, Pgs: 4, FileVersions: fileVersions})
		return err
	})
	v, err := volume.Open(context.Background(), cl, name, volume.Options{Writer: "w-" + name, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return v
}

// waitSpace waits (at most 30 s) until status shows name's bytes as ok
// says, and returns them.
func waitSpace(t *testing.T, cl *coordclient.Client, name, what string, ok func(v coord.VolumeStatus) bool) coord.VolumeStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v := volumeStatus(t, cl, name)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: status never showed it; last: live %d history %d report %d ms ago",
				what, v.LiveBytes, v.HistoryBytes, v.SpaceReportMsAgo)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestHistoryBytesInStatus: blocks written three times across two
// snapshots on a 2-replica volume hold, on the bricks, one live and two
// history versions per block per replica; status shows that, and the
// history falls by half when one snapshot is deleted and to nothing when
// the other is (the prune removes what no reader reads; the next count
// sees it), while the live bytes stay.
func TestHistoryBytesInStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	cl := startCluster(t, 2, 200*time.Millisecond)
	const name, blocks = "hist", 8
	v := createVolume(t, cl, name, false)
	ctx := context.Background()
	snapshot := func(snap string) {
		call(t, cl, "snapshot "+snap, func(ctx context.Context, c pb.CoordinatorClient) error {
			_, err := c.Snapshot(ctx, &pb.SnapshotRequest{Volume: name, Name: snap})
			return err
		})
	}
	for i, snap := range []string{"s1", "s2", ""} {
		if err := v.WriteAt(ctx, bytes.Repeat([]byte{byte(i + 1)}, blocks*limits.BlockBytes), 0); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if snap != "" {
			snapshot(snap)
		}
	}
	// Each put's record is a block and a header: between one and two
	// blocks' worth.
	const liveMin, liveMax = 2 * blocks * limits.BlockBytes, 2 * 2 * blocks * limits.BlockBytes
	st := waitSpace(t, cl, name, "two snapshots", func(v coord.VolumeStatus) bool {
		return v.LiveBytes >= liveMin && v.HistoryBytes == 2*v.LiveBytes
	})
	if st.LiveBytes > liveMax || st.SpaceReportMsAgo < 0 || st.SpaceReportMsAgo > 10_000 {
		t.Fatalf("two snapshots: live %d (want [%d, %d]), report %d ms ago", st.LiveBytes, liveMin, liveMax, st.SpaceReportMsAgo)
	}
	live := st.LiveBytes
	t.Logf("two snapshots: live %d history %d bytes, report %d ms old", st.LiveBytes, st.HistoryBytes, st.SpaceReportMsAgo)

	for _, step := range []struct {
		snap    string
		history int64
	}{
		{"s1", live}, // the versions of gen 1: only s1 read them
		{"s2", 0},
	} {
		call(t, cl, "delete snapshot "+step.snap, func(ctx context.Context, c pb.CoordinatorClient) error {
			_, err := c.DeleteSnapshot(ctx, &pb.DeleteSnapshotRequest{Volume: name, Name: step.snap})
			return err
		})
		start := time.Now()
		st := waitSpace(t, cl, name, "deleted "+step.snap, func(v coord.VolumeStatus) bool {
			if v.LiveBytes != live {
				t.Fatalf("deleted %s: live bytes %d, were %d", step.snap, v.LiveBytes, live)
			}
			return v.HistoryBytes == step.history
		})
		t.Logf("deleted %s: live %d history %d bytes after %v", step.snap, st.LiveBytes, st.HistoryBytes, time.Since(start).Round(10*time.Millisecond))
	}
}

// TestHistoryBytesFileVersions: blocks written at three file versions of
// one generation hold two history versions each (the closed file
// versions 1 and 2); status shows them, and they go when the version
// cleaner prunes the versions below 3 (Brick.PruneVersions).
func TestHistoryBytesFileVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	cl := startCluster(t, 2, 200*time.Millisecond)
	const name, blocks = "fvhist", 8
	v := createVolume(t, cl, name, true)
	ctx := context.Background()
	for f := uint32(1); f <= 3; f++ {
		if err := v.WriteAtVersion(ctx, bytes.Repeat([]byte{byte(f)}, blocks*limits.BlockBytes), 0, f); err != nil {
			t.Fatalf("write version %d: %v", f, err)
		}
	}
	const liveMin = 2 * blocks * limits.BlockBytes
	st := waitSpace(t, cl, name, "three file versions", func(v coord.VolumeStatus) bool {
		return v.LiveBytes >= liveMin && v.HistoryBytes == 2*v.LiveBytes
	})
	t.Logf("three file versions: live %d history %d bytes", st.LiveBytes, st.HistoryBytes)
	start := time.Now()
	if _, err := v.PruneVersions(ctx, 0, blocks*limits.BlockBytes, nil, 3); err != nil {
		t.Fatalf("prune versions below 3: %v", err)
	}
	after := waitSpace(t, cl, name, "versions 1 and 2 pruned", func(v coord.VolumeStatus) bool {
		if v.LiveBytes != st.LiveBytes {
			t.Fatalf("pruned: live bytes %d, were %d", v.LiveBytes, st.LiveBytes)
		}
		return v.HistoryBytes == 0
	})
	t.Logf("versions 1 and 2 pruned: live %d history %d bytes after %v", after.LiveBytes, after.HistoryBytes, time.Since(start).Round(10*time.Millisecond))
}
