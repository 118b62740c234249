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

// TestMemoryPerLock reports the server's and the clerk's bytes per held
// lock, measured over 100k write locks held by one clerk.
func TestMemoryPerLock(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 100k locks")
	}
	s, err := NewServer(Config{Groups: 16, LeaseTicks: 30, RetryTicks: 5})
	if err != nil {
		t.Fatal(err)
	}
	all := make([]int, 16)
	for g := range all {
		all[g] = g
	}
	mustStep(t, s, AssignGroups{Epoch: 1, Groups: all})
	mustStep(t, s, OpenTable{Clerk: "a", Session: 1, Table: "t"})
	s.Advance(s.Ready())

	before := heapBytes()
	for i := range uint64(memLocks) {
		mustStep(t, s, Request{Clerk: "a", Session: 1, Table: "t", Lock: i, Mode: Write, ReqID: i + 1})
		s.Advance(s.Ready())
	}
	server := float64(heapBytes()-before) / memLocks
	runtime.KeepAlive(s)

	c, err := NewClerk(ClerkConfig{ID: "a", Session: 1, Groups: 16, LeaseTicks: 30, LeaseMarginTicks: 2, RetryTicks: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Open("t"); err != nil {
		t.Fatal(err)
	}
	before = heapBytes()
	for i := range uint64(memLocks) {
		if _, err := c.Acquire("t", i, Write); err != nil {
			t.Fatal(err)
		}
		mustStep(t, c, Grant{Clerk: "a", Session: 1, Table: "t", Lock: i, Mode: Write, ReqID: i + 1, Epoch: 1})
		c.Advance(c.Ready())
	}
	clerk := float64(heapBytes()-before) / memLocks
	runtime.KeepAlive(c)

	t.Logf("bytes per held lock: server %.1f, clerk %.1f", server, clerk)
	if server > 96 {
		t.Errorf("server uses %.1f bytes per lock, want <= 96", server)
	}
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
