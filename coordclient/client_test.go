package coordclient

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/plumeria-fs/plumeria/internal/pb"
)

// fakeCoord answers GetMap at once, or never (hang) until the caller's
// deadline: a coordinator on a host that drops packets.
type fakeCoord struct {
	pb.UnimplementedCoordinatorServer
	hang bool
}

func (f fakeCoord) GetMap(ctx context.Context, _ *pb.GetMapRequest) (*pb.GetMapResponse, error) {
	if f.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &pb.GetMapResponse{}, nil
}

func serve(t *testing.T, f fakeCoord) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterCoordinatorServer(gs, f)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return ln.Addr().String()
}

// TestCallMovesPastAHungCoordinator: a call with a short deadline reaches
// the live coordinator although the hung one comes first, and the next
// call starts with the live one.
func TestCallMovesPastAHungCoordinator(t *testing.T) {
	c, err := New(serve(t, fakeCoord{hang: true}), serve(t, fakeCoord{}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Call(ctx, func(ctx context.Context, cl pb.CoordinatorClient) error {
			_, err := cl.GetMap(ctx, &pb.GetMapRequest{})
			return err
		})
		cancel()
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		c.mu.Lock()
		next := c.mu.next
		c.mu.Unlock()
		if next != 1 {
			t.Fatalf("call %d: next call starts with coordinator %d, not the live one", i, next)
		}
	}
}

func TestAttemptTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if d := attemptTimeout(ctx, 3); d < 900*time.Millisecond || d > time.Second {
		t.Errorf("3 s among 3: %v", d)
	}
	if d := attemptTimeout(ctx, 100); d != attemptMin {
		t.Errorf("3 s among 100: %v, want the minimum", d)
	}
	long, cancel2 := context.WithTimeout(context.Background(), time.Hour)
	defer cancel2()
	if d := attemptTimeout(long, 1); d != attemptMax {
		t.Errorf("an hour: %v, want the maximum", d)
	}
}
