package lock

import (
	"runtime"
	"testing"
)

const memLocks = 100_000

func heapBytes() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// memoryPerLock holds memLocks write locks of one clerk on one server core
// and on one clerk core, and returns the heap bytes per lock of each.
func memoryPerLock(tb testing.TB) (server, clerk float64) {
	s, err := NewServer(Config{Groups: 16, LeaseTicks: 30, RetryTicks: 5})
	if err != nil {
		tb.Fatal(err)
	}
	all := make([]int, 16)
	for g := range all {
		all[g] = g
	}
	mustStep(tb, s, AssignGroups{Epoch: 1, Groups: all})
	mustStep(tb, s, OpenTable{Clerk: "a", Session: 1, Table: "t"})
	s.Advance(s.Ready())

	before := heapBytes()
	for i := range uint64(memLocks) {
		mustStep(tb, s, Request{Clerk: "a", Session: 1, Table: "t", Lock: i, Mode: Write, ReqID: i + 1})
		s.Advance(s.Ready())
	}
	server = float64(heapBytes()-before) / memLocks
	if got := s.Metrics().Grants; got != memLocks {
		tb.Fatalf("%d grants, want %d", got, memLocks)
	}
	runtime.KeepAlive(s)

	c, err := NewClerk(ClerkConfig{ID: "a", Session: 1, Groups: 16, LeaseTicks: 30, LeaseMarginTicks: 2, RetryTicks: 5})
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.Open("t"); err != nil {
		tb.Fatal(err)
	}
	before = heapBytes()
	for i := range uint64(memLocks) {
		if _, err := c.Acquire("t", i, Write); err != nil {
			tb.Fatal(err)
		}
		mustStep(tb, c, Grant{Clerk: "a", Session: 1, Table: "t", Lock: i, Mode: Write, ReqID: i + 1, Epoch: 1})
		c.Advance(c.Ready())
	}
	clerk = float64(heapBytes()-before) / memLocks
	if got := c.Metrics().Held; got != memLocks {
		tb.Fatalf("clerk holds %d, want %d", got, memLocks)
	}
	runtime.KeepAlive(c)
	return server, clerk
}

// TestMemoryPerLock bounds the server's bytes per held lock.
func TestMemoryPerLock(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 100k locks")
	}
	server, clerk := memoryPerLock(t)
	t.Logf("bytes per held lock: server %.1f, clerk %.1f", server, clerk)
	if server > 96 {
		t.Errorf("server uses %.1f bytes per lock, want <= 96", server)
	}
}

// BenchmarkMemoryPerLock reports the heap bytes per held lock (100k write
// locks of one clerk) on a server core and on a clerk core, measured from
// runtime.MemStats after GC. Run with -benchtime=1x:
//
//	go test ./lock -run '^$' -bench MemoryPerLock -benchtime=1x
func BenchmarkMemoryPerLock(b *testing.B) {
	var server, clerk float64
	for range b.N {
		server, clerk = memoryPerLock(b)
	}
	b.ReportMetric(server, "server-B/lock")
	b.ReportMetric(clerk, "clerk-B/lock")
	b.ReportMetric(server+clerk, "B/lock")
}

type stepper interface{ Step(Message) error }

func mustStep(t testing.TB, s stepper, m Message) {
	t.Helper()
	if err := s.Step(m); err != nil {
		t.Fatalf("step %T: %v", m, err)
	}
}

func BenchmarkServerGrantRelease(b *testing.B) {
	s, _ := NewServer(Config{Groups: 1, LeaseTicks: 30, RetryTicks: 5})
	mustStep(b, s, AssignGroups{Epoch: 1, Groups: []int{0}})
	b.ReportAllocs()
	for i := range uint64(b.N) {
		lock := i % 1024
		mustStep(b, s, Request{Clerk: "a", Session: 1, Table: "t", Lock: lock, Mode: Write, ReqID: 2*i + 1})
		mustStep(b, s, Release{Clerk: "a", Session: 1, Table: "t", Lock: lock, ReqID: 2*i + 1})
		s.Advance(s.Ready())
	}
}
