package server

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/lock"
	"github.com/plumeria-fs/plumeria/lock/lockpb"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // against hangs only
	t.Cleanup(cancel)
	return ctx
}

// serve runs one lock server on 127.0.0.1 with mc and returns its address.
func serve(t *testing.T, mc *MemCoordinator, id string, reg prometheus.Registerer) (string, *Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	s, err := New(Config{ID: id, Coordinator: mc.Server(id, addr), Groups: 4, Tick: 5 * time.Millisecond,
		LeaseTicks: 60, RetryTicks: 2, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("serve: %v", err)
		}
	})
	return addr, s
}

func stream(t *testing.T, ctx context.Context, addr string) lockpb.Lock_SessionClient {
	t.Helper()
	conn, err := coordclient.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	st, err := lockpb.NewLockClient(conn).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// recvUntil reads frames until want accepts a message.
func recvUntil(t *testing.T, st lockpb.Lock_SessionClient, id string, sn uint64, want func(lock.Message) bool) {
	t.Helper()
	for {
		f, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := lockpb.DecodeServer(f, id, sn)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if want(m) {
				return
			}
		}
	}
}

// TestSessionStream drives a server with a raw stream: a request is
// granted and a renewal acknowledged.
func TestSessionStream(t *testing.T) {
	ctx := testCtx(t)
	mc := NewMemCoordinator(4)
	reg := prometheus.NewRegistry()
	addr, s := serve(t, mc, "s0", reg)
	sn, err := mc.Mount("n1", "fs0")
	if err != nil {
		t.Fatal(err)
	}
	st := stream(t, ctx, addr)
	send := func(msgs ...lock.Message) {
		t.Helper()
		if err := st.Send(lockpb.EncodeClerk("n1", sn, msgs)); err != nil {
			t.Fatal(err)
		}
	}
	send(lock.OpenTable{Clerk: "n1", Session: sn, Table: "fs0"},
		lock.Renew{Clerk: "n1", Session: sn, Seq: 1, Tables: []string{"fs0"}})
	recvUntil(t, st, "n1", sn, func(m lock.Message) bool {
		a, ok := m.(lock.RenewAck)
		return ok && a.Seq == 1
	})
	// The server rebuilds its new groups: it asks what we hold (nothing)
	// before it grants.
	send(lock.Request{Clerk: "n1", Session: sn, Table: "fs0", Lock: 7, Mode: lock.Write, ReqID: 1})
	recvUntil(t, st, "n1", sn, func(m lock.Message) bool {
		switch m := m.(type) {
		case lock.QueryHeld:
			send(lock.Held{Clerk: "n1", Session: sn, Table: m.Table, Epoch: m.Epoch, Groups: m.Groups})
		case lock.Grant:
			return m.Lock == 7 && m.Mode == lock.Write && m.ReqID == 1
		}
		return false
	})
	for s.Metrics().Grants == 0 { // published after the loop's iteration
		time.Sleep(time.Millisecond)
	}
	// The request waited for the rebuild: one observation of its wait.
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range fams {
		seen[f.GetName()] = true
		if f.GetName() != "plumeria_lock_wait_seconds" {
			continue
		}
		h := f.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() != 1 || len(h.GetBucket()) != len(lock.WaitBucketTicks) {
			t.Fatalf("wait histogram: %v", h)
		}
	}
	for _, name := range []string{"plumeria_lock_grants_total", "plumeria_lock_revokes_total",
		"plumeria_lock_waits_total", "plumeria_lock_wait_seconds", "plumeria_lock_lease_renewals_total",
		"plumeria_lock_recoveries_total"} {
		if !seen[name] {
			t.Errorf("no metric %s", name)
		}
	}
}

// TestSessionRejectsBadFrames: malformed frames and a change of session
// end the stream with InvalidArgument.
func TestSessionRejectsBadFrames(t *testing.T) {
	ctx := testCtx(t)
	mc := NewMemCoordinator(4)
	addr, _ := serve(t, mc, "s0", prometheus.NewRegistry())
	for name, frames := range map[string][]*lockpb.ClerkFrame{
		"no clerk id":    {{Session: 1}},
		"bad message":    {{Clerk: "n1", Session: 1, Msgs: []*lockpb.ClerkMsg{{}}}},
		"bad later":      {{Clerk: "n1", Session: 1}, {Clerk: "n1", Session: 1, Msgs: []*lockpb.ClerkMsg{{}}}},
		"session change": {{Clerk: "n1", Session: 1}, {Clerk: "n1", Session: 2}},
	} {
		t.Run(name, func(t *testing.T) {
			st := stream(t, ctx, addr)
			for _, f := range frames {
				if err := st.Send(f); err != nil {
					break // the server may have ended the stream already
				}
			}
			_, err := st.Recv()
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("got %v, want InvalidArgument", err)
			}
		})
	}
}

// TestMetrics: two servers share a registry, told apart by their label; a
// server with the same id replaces the first's collector.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	mc := NewMemCoordinator(4)
	for _, id := range []string{"a", "b", "a"} {
		if _, err := New(Config{ID: id, Coordinator: mc.Server(id, ""), Groups: 4, Registerer: reg}); err != nil {
			t.Fatalf("server %s: %v", id, err)
		}
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]int{}
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "plumeria_lock_") {
			t.Fatalf("metric %s", f.GetName())
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "server" {
					found[l.GetValue()]++
				}
			}
		}
	}
	if found["a"] != len(coreSeries)+len(ioSeries)+1 || found["b"] != found["a"] {
		t.Fatalf("series per server: %v", found)
	}
}

type closedCoord struct{ Coordinator }

func (closedCoord) Events(context.Context) (<-chan lock.Message, error) {
	ch := make(chan lock.Message)
	close(ch)
	return ch, nil
}

// TestCoordinatorLost: a server whose event stream ends stops.
func TestCoordinatorLost(t *testing.T) {
	s, err := New(Config{ID: "x", Coordinator: closedCoord{}, Groups: 4, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(testCtx(t)); !errors.Is(err, ErrCoordinatorLost) {
		t.Fatalf("Run: %v, want ErrCoordinatorLost", err)
	}
	if err := s.Run(testCtx(t)); err == nil {
		t.Fatal("second Run accepted")
	}
}

func TestConfigErrors(t *testing.T) {
	mc := NewMemCoordinator(4)
	for name, cfg := range map[string]Config{
		"no coordinator": {ID: "a", Groups: 4},
		"no groups":      {ID: "a", Coordinator: mc.Server("a", "")},
		"short lease":    {ID: "a", Coordinator: mc.Server("a", ""), Groups: 4, LeaseTicks: 3},
	} {
		t.Run(name, func(t *testing.T) {
			cfg.Registerer = prometheus.NewRegistry()
			if _, err := New(cfg); !errors.Is(err, lock.ErrConfig) {
				t.Fatalf("err %v, want lock.ErrConfig", err)
			}
		})
	}
}

// TestTicksAfterPause: a late timer is caught up; a pause counts as one
// tick, so that renewals queued meanwhile are read before any lease
// expires.
func TestTicksAfterPause(t *testing.T) {
	for _, c := range []struct{ elapsed, want int64 }{
		{0, 0}, {1, 1}, {3, 3}, {pauseTicks, pauseTicks}, {pauseTicks + 1, 1}, {600, 1}, {-2, 0},
	} {
		if got := ticksToRun(c.elapsed); got != c.want {
			t.Errorf("ticksToRun(%d) = %d, want %d", c.elapsed, got, c.want)
		}
	}
}
