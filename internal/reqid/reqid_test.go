package reqid

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

func TestContextHelpers(t *testing.T) {
	ctx := context.Background()
	if _, ok := From(ctx); ok {
		t.Fatal("empty context carries an id")
	}
	ctx2, id := Ensure(ctx)
	if got, ok := From(ctx2); !ok || got != id || len(id) != 16 || !Valid(id) {
		t.Fatalf("Ensure gave %q, From %q %v", id, got, ok)
	}
	if ctx3, id2 := Ensure(ctx2); id2 != id || ctx3 != ctx2 {
		t.Fatalf("Ensure replaced an existing id %q with %q", id, id2)
	}
	if New() == New() {
		t.Fatal("two New ids are equal")
	}
}

func TestValid(t *testing.T) {
	for id, want := range map[string]bool{
		"0123456789abcdef": true, "cli-7.x_Y": true, "": false, strings.Repeat("a", IDBytesMax): true,
		strings.Repeat("a", IDBytesMax+1): false, "a b": false, "a\nreq=forged": false, "é": false, "a=b": false,
	} {
		if Valid(id) != want {
			t.Errorf("Valid(%q) = %v, want %v", id, !want, want)
		}
	}
}

func TestHandlerAddsReq(t *testing.T) {
	var b bytes.Buffer
	log := Logger(slog.New(slog.NewTextHandler(&b, nil)))
	if Logger(log) != log || NewHandler(log.Handler()) != log.Handler() {
		t.Fatal("wrapping twice wraps again")
	}
	log = log.With("node", "n1")
	log.ErrorContext(With(context.Background(), "abc"), "boom", "err", "x")
	log.Info("no context")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "req=abc") || !strings.Contains(lines[0], "node=n1") || strings.Contains(lines[1], "req=") {
		t.Fatalf("log lines:\n%s", b.String())
	}
}

func TestLevel(t *testing.T) {
	for c, want := range map[codes.Code]slog.Level{
		codes.Internal: slog.LevelError, codes.DataLoss: slog.LevelError, codes.Unknown: slog.LevelError,
		codes.DeadlineExceeded: slog.LevelWarn, codes.ResourceExhausted: slog.LevelWarn,
		codes.PermissionDenied:   slog.LevelInfo,
		codes.FailedPrecondition: slog.LevelDebug, codes.Unavailable: slog.LevelDebug, codes.NotFound: slog.LevelDebug,
		codes.Canceled: slog.LevelDebug, codes.InvalidArgument: slog.LevelDebug,
	} {
		if got := Level(c); got != want {
			t.Errorf("Level(%v) = %v, want %v", c, got, want)
		}
	}
}

// health is a service whose handlers record the id they see and may
// call on to a next hop with their context.
type health struct {
	healthpb.UnimplementedHealthServer
	mu   sync.Mutex
	seen []string
	next healthpb.HealthClient // nil: answer
	fail error
}

func (h *health) record(ctx context.Context) {
	id, _ := From(ctx)
	h.mu.Lock()
	h.seen = append(h.seen, id)
	h.mu.Unlock()
}

func (h *health) Check(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.record(ctx)
	if h.next != nil {
		return h.next.Check(ctx, r)
	}
	return &healthpb.HealthCheckResponse{}, h.fail
}

func (h *health) Watch(r *healthpb.HealthCheckRequest, s healthpb.Health_WatchServer) error {
	h.record(s.Context())
	if h.fail != nil {
		return h.fail
	}
	return s.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
}

// serve starts a gRPC server with the interceptors and returns a client
// with them.
func serve(t *testing.T, h *health, log *slog.Logger) healthpb.HealthClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(ServerOptions(log)...)
	healthpb.RegisterHealthServer(gs, h)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })}, DialOptions()...)
	conn, err := grpc.NewClient("passthrough:///bufnet", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// TestIDCrossesTwoHops: the caller's id reaches a server, and the same id
// reaches the next server that one calls with its context.
func TestIDCrossesTwoHops(t *testing.T) {
	back := &health{}
	front := &health{next: serve(t, back, nil)}
	cl := serve(t, front, nil)
	ctx := With(context.Background(), "caller-1")
	if _, err := cl.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	// A context without an id gets a fresh one, the same on both hops.
	if _, err := cl.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if len(front.seen) != 2 || len(back.seen) != 2 || front.seen[0] != "caller-1" || back.seen[0] != "caller-1" ||
		!Valid(front.seen[1]) || front.seen[1] == "caller-1" || back.seen[1] != front.seen[1] {
		t.Fatalf("front saw %q, back saw %q", front.seen, back.seen)
	}
}

func TestStreamCarriesID(t *testing.T) {
	h := &health{}
	cl := serve(t, h, nil)
	s, err := cl.Watch(With(context.Background(), "s-1"), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	if len(h.seen) != 1 || h.seen[0] != "s-1" {
		t.Fatalf("stream handler saw %q", h.seen)
	}
}

// TestForgedIDReplaced: the client sends its context's id even over one
// set in metadata by hand, and a server replaces an id that is not Valid,
// so logs never carry what a peer made up.
func TestForgedIDReplaced(t *testing.T) {
	h := &health{}
	cl := serve(t, h, nil)
	ctx := metadata.AppendToOutgoingContext(With(context.Background(), "ok-1"), MetadataKey, "hand-made")
	if _, err := cl.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if h.seen[0] != "ok-1" {
		t.Fatalf("server saw %q, want the context's id", h.seen[0])
	}
	sctx, id := incoming(metadata.NewIncomingContext(context.Background(), metadata.Pairs(MetadataKey, "x y\nreq=forged")))
	if got, _ := From(sctx); got != id || !Valid(id) || strings.Contains(id, "forged") {
		t.Fatalf("forged id became %q", id)
	}
}

// TestFailureLoggedWithReq: a failed request is logged once with its
// method, code and req=<id>, at the code's level.
func TestFailureLoggedWithReq(t *testing.T) {
	for _, wrapped := range []bool{false, true} {
		var b bytes.Buffer
		log := slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelInfo}))
		if wrapped {
			log = Logger(log)
		}
		h := &health{fail: status.Error(codes.Internal, "disk on fire")}
		cl := serve(t, h, log)
		if _, err := cl.Check(With(context.Background(), "req-77"), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Internal {
			t.Fatalf("got %v", err)
		}
		s, err := cl.Watch(With(context.Background(), "req-78"), &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = s.Recv()
		}
		if status.Code(err) != codes.Internal {
			t.Fatalf("stream got %v", err)
		}
		h.fail = status.Error(codes.FailedPrecondition, "stale map epoch") // Debug: not logged at Info
		cl.Check(With(context.Background(), "req-79"), &healthpb.HealthCheckRequest{})
		out := b.String()
		for _, want := range []string{"req=req-77", "req=req-78", "method=/grpc.health.v1.Health/Check", "code=Internal", `err="disk on fire"`, "level=ERROR"} {
			if !strings.Contains(out, want) {
				t.Errorf("wrapped=%v: log does not contain %q:\n%s", wrapped, want, out)
			}
		}
		if strings.Contains(out, "req-79") || strings.Count(out, "req=req-77") != 1 {
			t.Errorf("wrapped=%v: wrong lines logged:\n%s", wrapped, out)
		}
	}
}
