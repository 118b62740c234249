package coordclient

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/coordclient/faultnet"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// proxied serves a fake coordinator behind a faultnet proxy and returns
// the proxy.
func proxied(t *testing.T) *faultnet.Proxy {
	t.Helper()
	p, err := faultnet.Listen(serve(t, fakeCoord{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func getMap(ctx context.Context, conn grpc.ClientConnInterface, opts ...grpc.CallOption) (time.Duration, error) {
	start := time.Now()
	_, err := pb.NewCoordinatorClient(conn).GetMap(ctx, &pb.GetMapRequest{}, opts...)
	return time.Since(start), err
}

// leftReady returns once conn noticed that its connection closed, as a
// FUSE request after a kill does (a call racing the close fails at once).
func leftReady(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !conn.WaitForStateChange(ctx, connectivity.Ready) {
		t.Fatalf("connection still %v 5 s after the kill", conn.GetState())
	}
}

// TestDialKilledServer: once a server's host dies (connections closed, its
// address dark), an RPC without a deadline fails within ConnectTimeout,
// not gRPC's default 20 s; later RPCs fail at once; and the connection
// comes back within ReconnectDelayMax once the address answers again.
// (The docker test's 20 s stall after `docker kill`: a FUSE read waited
// for a brick connection's reconnect attempt.)
func TestDialKilledServer(t *testing.T) {
	p := proxied(t)
	conn, err := Dial(p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A guard well above gRPC's default connect timeout, so that a
	// regression shows as a slow failure rather than a deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := getMap(ctx, conn); err != nil {
		t.Fatal(err)
	}

	p.Kill()
	leftReady(t, conn.ClientConn)
	took, err := getMap(ctx, conn)
	if status.Code(err) != codes.Unavailable || took > ConnectTimeout+time.Second {
		t.Fatalf("first call after the kill: %v after %v; want Unavailable within %v", err, took, ConnectTimeout+time.Second)
	}
	t.Logf("first call after the kill failed after %v", took.Round(time.Millisecond))
	took, err = getMap(ctx, conn)
	if status.Code(err) != codes.Unavailable || took > time.Second {
		t.Fatalf("second call after the kill: %v after %v; want Unavailable at once", err, took)
	}

	p.Revive()
	took, err = getMap(ctx, conn, grpc.WaitForReady(true))
	if err != nil || took > ReconnectDelayMax+ConnectTimeout+time.Second {
		t.Fatalf("call after the revival: %v after %v; want an answer within %v", err, took, ReconnectDelayMax+ConnectTimeout+time.Second)
	}
}

// TestCallMovesPastAKilledCoordinator: a Call without a deadline, starting
// with a coordinator whose host died, is answered by the live one within
// about ConnectTimeout (not its share of GiveUpAfter).
func TestCallMovesPastAKilledCoordinator(t *testing.T) {
	dead := proxied(t)
	c, err := New(dead.Addr(), serve(t, fakeCoord{}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	call := func() (time.Duration, error) {
		start := time.Now()
		err := c.Call(context.Background(), func(ctx context.Context, cl pb.CoordinatorClient) error {
			_, err := cl.GetMap(ctx, &pb.GetMapRequest{})
			return err
		})
		return time.Since(start), err
	}
	if _, err := call(); err != nil { // connects to the first coordinator
		t.Fatal(err)
	}
	dead.Kill()
	leftReady(t, c.conns[0].ClientConn)
	if took, err := call(); err != nil || took > ConnectTimeout+time.Second {
		t.Fatalf("call after the kill: %v after %v; want an answer within %v", err, took, ConnectTimeout+time.Second)
	}
}
