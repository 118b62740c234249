package inproc

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// health is a Health service whose Check does what the test says.
type health struct {
	healthpb.UnimplementedHealthServer
	check func(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error)
}

func (h *health) Check(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return h.check(ctx, r)
}

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// setup serves h directly at a fresh address (nothing listens there over
// TCP, so a call that is not direct fails) and returns a client of it.
func setup(t *testing.T, h *health, auth func() (credentials.AuthInfo, error), ics ...grpc.UnaryServerInterceptor) (*Server, healthpb.HealthClient, *Conn) {
	t.Helper()
	addr := freeAddr(t)
	s := NewServer(auth, ics...)
	healthpb.RegisterHealthServer(s, h)
	if err := s.Serve(addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	conn := Wrap(cc, addr)
	t.Cleanup(func() { conn.Close() })
	return s, healthpb.NewHealthClient(conn), conn
}

// TestDirect: a call reaches the handler without a network: with the
// request's fields, the caller's metadata as incoming metadata, the
// server's peer credentials, the interceptors in order, none of the
// caller's context values; its reply comes back.
func TestDirect(t *testing.T) {
	type key struct{}
	var order []string
	ic := func(name string) grpc.UnaryServerInterceptor {
		return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			order = append(order, name+":"+info.FullMethod)
			return h(ctx, req)
		}
	}
	auth := credentials.TLSInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
	h := &health{check: func(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		p, ok := peer.FromContext(ctx)
		switch {
		case r.Service != "svc":
			return nil, status.Errorf(codes.InvalidArgument, "service %q", r.Service)
		case len(md.Get("x-test")) != 1 || md.Get("x-test")[0] != "v":
			return nil, status.Errorf(codes.InvalidArgument, "metadata %v", md)
		case !ok || p.AuthInfo == nil || p.AuthInfo.AuthType() != "tls":
			return nil, status.Errorf(codes.Unauthenticated, "peer %v", p)
		case ctx.Value(key{}) != nil:
			return nil, status.Error(codes.Internal, "the caller's value reached the handler")
		}
		if _, ok := ctx.Deadline(); !ok {
			return nil, status.Error(codes.Internal, "the caller's deadline did not reach the handler")
		}
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	}}
	_, cl, _ := setup(t, h, func() (credentials.AuthInfo, error) { return auth, nil }, ic("a"), ic("b"))
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), key{}, 1), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-test", "v")
	r, err := cl.Check(ctx, &healthpb.HealthCheckRequest{Service: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("reply %v", r)
	}
	want := []string{"a:" + healthpb.Health_Check_FullMethodName, "b:" + healthpb.Health_Check_FullMethodName}
	if strings.Join(order, " ") != strings.Join(want, " ") {
		t.Fatalf("interceptors ran %v, want %v", order, want)
	}
}

// TestRequestOwned: the handler gets its own copy of the request, so a
// caller that gives up at its deadline may change its request while the
// handler still reads it; the caller returns at its deadline even though
// the handler has not, and the handler's context ends then too.
func TestRequestOwned(t *testing.T) {
	release := make(chan struct{})
	seen := make(chan string, 1)
	handlerCtxDone := make(chan error, 1)
	h := &health{check: func(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
		<-ctx.Done()
		handlerCtxDone <- ctx.Err()
		<-release
		seen <- r.Service
		return &healthpb.HealthCheckResponse{}, nil
	}}
	_, cl, _ := setup(t, h, nil)
	req := &healthpb.HealthCheckRequest{Service: "before"}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := cl.Check(ctx, req)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("call past its deadline: %v, want DeadlineExceeded", err)
	}
	select {
	case err := <-handlerCtxDone:
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			t.Fatalf("handler's context ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end with the caller's")
	}
	req.Service = "after"
	close(release)
	if got := <-seen; got != "before" {
		t.Fatalf("handler saw %q: it shares the caller's request", got)
	}
}

// TestStop: a stopped server's calls in flight see their context end, and
// later calls are not direct (nothing listens on the address: they fail
// Unavailable, as calls to a stopped server do).
func TestStop(t *testing.T) {
	started := make(chan struct{})
	h := &health{check: func(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
		close(started)
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}}
	s, cl, _ := setup(t, h, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := cl.Check(ctx, &healthpb.HealthCheckRequest{})
		errc <- err
	}()
	<-started
	s.Stop()
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Fatalf("call in flight at Stop: %v, want Canceled", err)
	}
	short, cancel2 := context.WithTimeout(ctx, 3*time.Second)
	defer cancel2()
	if _, err := cl.Check(short, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("call after Stop: %v, want it to go to the (dead) address", err)
	}
}

// TestErrors: a handler's plain error reaches the caller as gRPC sends it
// (Unknown, its message), a status error as it is, and a method the server
// lacks goes to the network.
func TestErrors(t *testing.T) {
	var plain atomic.Bool
	h := &health{check: func(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
		if plain.Load() {
			return nil, errors.New("disk on fire")
		}
		return nil, status.Error(codes.FailedPrecondition, "not now")
	}}
	_, cl, _ := setup(t, h, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := cl.Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.FailedPrecondition || status.Convert(err).Message() != "not now" {
		t.Fatalf("status error: %v", err)
	}
	plain.Store(true)
	if _, err := cl.Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unknown || status.Convert(err).Message() != "disk on fire" {
		t.Fatalf("plain error: %v", err)
	}
	// Watch is a stream: never direct; nothing listens, so it fails.
	st, err := cl.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("stream: %v, want it to go to the (dead) address", err)
	}
}

// TestInFlightBound: a connection has at most RPCStreamsPerConnMax calls
// in flight to a server; the next one waits for a slot (here until its
// deadline).
func TestInFlightBound(t *testing.T) {
	var running atomic.Int64
	release := make(chan struct{})
	h := &health{check: func(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
		running.Add(1)
		<-release
		return &healthpb.HealthCheckResponse{}, nil
	}}
	_, cl, _ := setup(t, h, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errc := make(chan error, limits.RPCStreamsPerConnMax)
	for range limits.RPCStreamsPerConnMax {
		go func() {
			_, err := cl.Check(ctx, &healthpb.HealthCheckRequest{})
			errc <- err
		}()
	}
	for running.Load() < limits.RPCStreamsPerConnMax {
		time.Sleep(time.Millisecond)
	}
	short, cancel2 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel2()
	if _, err := cl.Check(short, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("call beyond the bound: %v, want it to wait", err)
	}
	if n := running.Load(); n != limits.RPCStreamsPerConnMax {
		t.Fatalf("%d handlers ran, want %d", n, limits.RPCStreamsPerConnMax)
	}
	close(release)
	for range limits.RPCStreamsPerConnMax {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

// TestServeTwice: one address, one server.
func TestServeTwice(t *testing.T) {
	s, _, _ := setup(t, &health{}, nil)
	s2 := NewServer(nil)
	if err := s2.Serve(s.addr); !errors.Is(err, ErrAddrInUse) {
		t.Fatalf("second Serve of %s: %v", s.addr, err)
	}
}

// brickStub is a Brick service whose WriteV reports the request it got.
type brickStub struct {
	pb.UnimplementedBrickServer
	got chan *pb.WriteVRequest
}

func (b *brickStub) WriteV(ctx context.Context, r *pb.WriteVRequest) (*pb.WriteResponse, error) {
	b.got <- r
	return &pb.WriteResponse{Stale: uint32(len(r.Extents))}, nil
}

// TestRequestFields: a request with nested and repeated fields and bytes
// reaches the handler equal to what the caller sent and not sharing the
// caller's memory, and the reply comes back.
func TestRequestFields(t *testing.T) {
	addr := freeAddr(t)
	s := NewServer(nil)
	stub := &brickStub{got: make(chan *pb.WriteVRequest, 1)}
	pb.RegisterBrickServer(s, stub)
	if err := s.Serve(addr); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	conn := Wrap(cc, addr)
	defer conn.Close()
	req := &pb.WriteVRequest{MapEpoch: 3, Vol: 7, Pg: 2, Writer: &pb.Writer{Id: "n1", Epoch: 4}, Reserved: true,
		Extents: []*pb.Extent{{Offset: 4096, Data: []byte("first")}, {Offset: 1 << 20, Data: make([]byte, 100_000), FileVersion: 2}}}
	want := proto.Clone(req)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := pb.NewBrickClient(conn).WriteV(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got := <-stub.got
	if !proto.Equal(got, want) || r.Stale != 2 {
		t.Fatalf("handler got %v (reply %v), want %v", got, r, want)
	}
	req.Extents[0].Data[0], req.Writer.Id = 'X', "changed"
	if !proto.Equal(got, want) {
		t.Fatal("the handler's request shares the caller's memory")
	}
}

// TestClientInterceptors: a direct call runs the connection's client
// interceptors in order, outermost first, and the metadata they add
// reaches the handler.
func TestClientInterceptors(t *testing.T) {
	addr := freeAddr(t)
	s := NewServer(nil)
	healthpb.RegisterHealthServer(s, &health{check: func(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if got := strings.Join(md.Get("x-order"), " "); got != "a b" {
			return nil, status.Errorf(codes.InvalidArgument, "metadata x-order %q", got)
		}
		return &healthpb.HealthCheckResponse{}, nil
	}})
	if err := s.Serve(addr); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	ic := func(name string) grpc.UnaryClientInterceptor {
		return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoke(metadata.AppendToOutgoingContext(ctx, "x-order", name), method, req, reply, cc, opts...)
		}
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	conn := Wrap(cc, addr, ic("a"), ic("b"))
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
}
