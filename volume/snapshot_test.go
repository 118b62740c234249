package volume

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// snapCoord answers DeleteSnapshot as the coordinator does: the map change,
// NotFound with clustermap's error for an unknown volume or snapshot.
type snapCoord struct {
	pb.UnimplementedCoordinatorServer
	mu sync.Mutex
	m  *clustermap.Map
}

func (c *snapCoord) DeleteSnapshot(_ context.Context, r *pb.DeleteSnapshotRequest) (*pb.DeleteSnapshotResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := clustermap.DeleteSnapshot(c.m, r.Volume, r.Name)
	if err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	c.m = n
	return &pb.DeleteSnapshotResponse{}, nil
}

func TestDeleteSnapshot(t *testing.T) {
	m := &clustermap.Map{Epoch: 1, NextVolumeID: 1}
	m.PutBrick(clustermap.Brick{Name: "b1", Addr: "b1:1", State: clustermap.BrickUp})
	m, err := clustermap.AddVolume(m, "vol", 1, limits.ChunkBytesDefault, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	m.Volume("vol").Snapshots = map[string]uint64{"s1": 1}
	m.Volume("vol").Gen = 2
	fake := &snapCoord{m: m}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterCoordinatorServer(gs, fake)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	cc, err := coordclient.New(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx := context.Background()

	if err := DeleteSnapshot(ctx, cc, "vol", "s1"); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	if _, ok := fake.m.Volume("vol").Snapshots["s1"]; ok {
		t.Fatal("s1 still in the map")
	}
	for _, tc := range []struct {
		vol, name string
		want      error
	}{
		{"vol", "s1", ErrNoSnapshot}, // deleted already
		{"nope", "s1", ErrNoVolume},
	} {
		err := DeleteSnapshot(ctx, cc, tc.vol, tc.name)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.name) || !strings.Contains(err.Error(), tc.vol) {
			t.Errorf("DeleteSnapshot(%s, %s) = %v, want %v naming both", tc.vol, tc.name, err, tc.want)
		}
	}
}
