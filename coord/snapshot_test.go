package coord

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/internal/netmux"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// startOne starts a single-member coordinator on loopback and returns a
// client of it once it leads.
func startOne(t *testing.T) (*Server, pb.CoordinatorClient) {
	t.Helper()
	mux, err := netmux.Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	s, err := Start(Config{Name: "c1", Addr: mux.Addr().String(), DataDir: t.TempDir(),
		Lease: 100 * time.Millisecond, DeadAfter: 300 * time.Millisecond, Registerer: prometheus.NewRegistry()}, mux.Raft(), gs)
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(mux.GRPC())
	conn, err := grpc.NewClient(mux.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); gs.Stop(); s.Stop(); mux.Close() })
	for deadline := time.Now().Add(10 * time.Second); !s.IsLeader(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("c1 did not become leader")
		}
	}
	return s, pb.NewCoordinatorClient(conn)
}

// TestDeleteSnapshotRPC: the deletion is a map change at the next epoch
// that removes the name and counts it; unknown volumes and snapshots are
// NotFound, naming what was not found.
func TestDeleteSnapshotRPC(t *testing.T) {
	s, cl := startOne(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.RegisterBrick(ctx, &pb.RegisterBrickRequest{Name: "b1", Addr: "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateVolume(ctx, &pb.CreateVolumeRequest{Name: "vol", Replicas: 1, Pgs: 2}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"s1", "s2"} {
		if _, err := cl.Snapshot(ctx, &pb.SnapshotRequest{Volume: "vol", Name: name}); err != nil {
			t.Fatalf("snapshot %s: %v", name, err)
		}
	}
	before := s.Map()
	if _, err := cl.DeleteSnapshot(ctx, &pb.DeleteSnapshotRequest{Volume: "vol", Name: "s1"}); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	after := s.Map()
	v := after.Volume("vol")
	if after.Epoch <= before.Epoch || v.Snapshots["s2"] != before.Volume("vol").Snapshots["s2"] || len(v.Snapshots) != 1 ||
		v.SnapshotsDeleted != 1 || v.Gen != before.Volume("vol").Gen {
		t.Errorf("after delete: epoch %d → %d, volume %+v", before.Epoch, after.Epoch, v)
	}
	for _, tc := range []struct{ vol, name, names string }{
		{"vol", "s1", `"s1"`},
		{"nope", "s2", `"nope"`},
	} {
		_, err := cl.DeleteSnapshot(ctx, &pb.DeleteSnapshotRequest{Volume: tc.vol, Name: tc.name})
		if status.Code(err) != codes.NotFound || !strings.Contains(status.Convert(err).Message(), tc.names) {
			t.Errorf("DeleteSnapshot(%s, %s) = %v, want NotFound naming %s", tc.vol, tc.name, err, tc.names)
		}
	}
	// (The leader's loop may change the map meanwhile: b1 never heartbeats.)
	if v := s.Map().Volume("vol"); v.SnapshotsDeleted != 1 || len(v.Snapshots) != 1 {
		t.Errorf("a refused delete changed the volume: %+v", v)
	}
}
