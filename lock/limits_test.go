package lock

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// limitServer returns a started server owning its one group.
func limitServer(t *testing.T) *Server {
	t.Helper()
	s, err := NewServer(Config{Groups: 1, LeaseTicks: 30, RetryTicks: 5})
	if err != nil {
		t.Fatal(err)
	}
	mustStep(t, s, AssignGroups{Epoch: 1, Groups: []int{0}})
	s.Advance(s.Ready())
	return s
}

// rejects steps m and returns the Rejects the server sent.
func rejects(t *testing.T, s *Server, m Message) []Reject {
	t.Helper()
	mustStep(t, s, m)
	rd := s.Ready()
	s.Advance(rd)
	var rs []Reject
	for _, x := range rd.Messages {
		if r, ok := x.(Reject); ok {
			rs = append(rs, r)
		}
	}
	return rs
}

func wantReject(t *testing.T, rs []Reject, reason Reason) {
	t.Helper()
	if len(rs) != 1 || rs[0].Reason != reason {
		t.Fatalf("rejects %+v, want one for %v", rs, reason)
	}
}

func wantNoReject(t *testing.T, rs []Reject) {
	t.Helper()
	if len(rs) != 0 {
		t.Fatalf("unexpected rejects %+v", rs)
	}
}

// TestServerLimitPending: a clerk waits for PendingRequestsMax locks; its
// next request is refused, and accepted again once one wait ended.
func TestServerLimitPending(t *testing.T) {
	s := limitServer(t)
	for l := range uint64(PendingRequestsMax + 1) {
		wantNoReject(t, rejects(t, s, Request{Clerk: "h", Session: 1, Table: "t", Lock: l, Mode: Write, ReqID: l + 1}))
	}
	for l := range uint64(PendingRequestsMax) {
		wantNoReject(t, rejects(t, s, Request{Clerk: "w", Session: 1, Table: "t", Lock: l, Mode: Write, ReqID: l + 1}))
	}
	last := uint64(PendingRequestsMax)
	wantReject(t, rejects(t, s, Request{Clerk: "w", Session: 1, Table: "t", Lock: last, Mode: Write, ReqID: last + 1}), ReasonPendingMax)
	// h releases lock 0: w is granted it, one wait fewer.
	mustStep(t, s, Release{Clerk: "h", Session: 1, Table: "t", Lock: 0, ReqID: 1})
	wantNoReject(t, rejects(t, s, Request{Clerk: "w", Session: 1, Table: "t", Lock: last, Mode: Write, ReqID: last + 2}))
	if m := s.Metrics(); m.Rejects != 1 {
		t.Fatalf("rejects counted %d, want 1", m.Rejects)
	}
}

// TestServerLimitLocksPerClerk: a session at LocksPerClerkMax holds and
// waits is refused more. Reaching a million grants is slow under -race,
// so the session starts just below the bound.
func TestServerLimitLocksPerClerk(t *testing.T) {
	s := limitServer(t)
	wantNoReject(t, rejects(t, s, Request{Clerk: "a", Session: 1, Table: "t", Lock: 0, Mode: Read, ReqID: 1}))
	c := s.lookup("a", 1)
	c.held = LocksPerClerkMax - 1 // as if it held that many more
	wantNoReject(t, rejects(t, s, Request{Clerk: "a", Session: 1, Table: "t", Lock: 1, Mode: Read, ReqID: 2}))
	wantReject(t, rejects(t, s, Request{Clerk: "a", Session: 1, Table: "t", Lock: 2, Mode: Read, ReqID: 3}), ReasonLocksPerClerk)
	// An upgrade of a held lock is a new waiter too, and refused.
	wantReject(t, rejects(t, s, Request{Clerk: "a", Session: 1, Table: "t", Lock: 1, Mode: Write, ReqID: 4}), ReasonLocksPerClerk)
	mustStep(t, s, Release{Clerk: "a", Session: 1, Table: "t", Lock: 1, ReqID: 2})
	wantNoReject(t, rejects(t, s, Request{Clerk: "a", Session: 1, Table: "t", Lock: 2, Mode: Read, ReqID: 5}))
}

// TestServerLimitWaiters: the queue of one lock is bounded. A session
// waits at most once per lock and there are at most ClerksMax sessions,
// so the bound is a backstop; checkLimits is tested directly.
func TestServerLimitWaiters(t *testing.T) {
	var ls lockState
	ls.addHolder(holder{req: 1, clerk: 1, mode: Write})
	for i := range uint32(LockWaitersMax - 1) {
		ls.addWaiter(waiter{req: 1, clerk: i + 2, mode: Read})
	}
	c := &session{idx: LockWaitersMax + 5}
	if r := checkLimits(c, &ls); r != ReasonNone {
		t.Fatalf("%d waiters: %v", len(ls.waiters()), r)
	}
	ls.addWaiter(waiter{req: 1, clerk: LockWaitersMax + 1, mode: Read})
	if r := checkLimits(c, &ls); r != ReasonWaitersMax {
		t.Fatalf("%d waiters: %v, want %v", len(ls.waiters()), r, ReasonWaitersMax)
	}
}

// TestServerLimitTables: a session opens at most TablesPerClerkMax tables,
// a server tracks at most TablesMax; names are bounded.
func TestServerLimitTables(t *testing.T) {
	s := limitServer(t)
	for i := range TablesPerClerkMax {
		wantNoReject(t, rejects(t, s, OpenTable{Clerk: "a", Session: 1, Table: fmt.Sprint("t", i)}))
	}
	wantReject(t, rejects(t, s, OpenTable{Clerk: "a", Session: 1, Table: "one-more"}), ReasonTablesMax)
	// Fill the server's table set from other sessions.
	for i := TablesPerClerkMax; i < TablesMax; i++ {
		clerk := fmt.Sprint("c", i/TablesPerClerkMax)
		wantNoReject(t, rejects(t, s, OpenTable{Clerk: clerk, Session: 1, Table: fmt.Sprint("t", i)}))
	}
	wantReject(t, rejects(t, s, OpenTable{Clerk: "z", Session: 1, Table: "new"}), ReasonTablesMax)
	wantNoReject(t, rejects(t, s, OpenTable{Clerk: "z", Session: 1, Table: "t0"})) // an existing one is fine
	wantReject(t, rejects(t, s, OpenTable{Clerk: "z", Session: 1, Table: ""}), ReasonBadName)
	wantReject(t, rejects(t, s, OpenTable{Clerk: "z", Session: 1, Table: strings.Repeat("x", NameBytesMax+1)}), ReasonBadName)
}

// TestServerLimitClerks: a server tracks at most ClerksMax sessions.
func TestServerLimitClerks(t *testing.T) {
	s := limitServer(t)
	for i := range ClerksMax {
		wantNoReject(t, rejects(t, s, OpenTable{Clerk: fmt.Sprint("c", i), Session: 1, Table: "t"}))
	}
	wantReject(t, rejects(t, s, OpenTable{Clerk: "late", Session: 1, Table: "t"}), ReasonClerksMax)
	wantReject(t, rejects(t, s, Renew{Clerk: "late", Session: 1, Seq: 1}), ReasonClerksMax)
	wantReject(t, rejects(t, s, OpenTable{Clerk: strings.Repeat("x", NameBytesMax+1), Session: 1, Table: "t"}), ReasonBadName)
}

// TestClerkLimits: the clerk refuses more than TablesPerClerkMax tables,
// PendingRequestsMax outstanding requests and LocksPerClerkMax locks, in
// all tables together.
func TestClerkLimits(t *testing.T) {
	c := newTestClerk(t) // table "t" open
	for i := 1; i < TablesPerClerkMax; i++ {
		if err := c.Open(fmt.Sprint("t", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Open("one-more"); !errors.Is(err, ErrLimit) {
		t.Fatalf("open beyond TablesPerClerkMax: %v", err)
	}
	if err := c.Open(strings.Repeat("x", NameBytesMax+1)); !errors.Is(err, ErrLimit) {
		t.Fatalf("open of a long name: %v", err)
	}
	// Pending requests, spread over two tables.
	for l := range uint64(PendingRequestsMax) {
		table := []string{"t", "t1"}[l%2]
		if _, err := c.Acquire(table, l, Read); err != nil {
			t.Fatalf("acquire %d: %v", l, err)
		}
	}
	if _, err := c.Acquire("t2", 0, Read); !errors.Is(err, ErrLimit) {
		t.Fatalf("acquire beyond PendingRequestsMax: %v", err)
	}
	// Asking again, or for more, for a lock already requested is fine.
	if _, err := c.Acquire("t", 0, Write); err != nil {
		t.Fatalf("re-request: %v", err)
	}
	drainClerk(c)

	// Locks: fill a table with held entries (sharing one entry: only the
	// count matters) up to the bound.
	c = newTestClerk(t)
	shared := &entry{mode: Read, req: 1}
	c.tables["t"].locks = make(map[uint64]*entry, LocksPerClerkMax)
	for l := range uint64(LocksPerClerkMax) {
		c.tables["t"].locks[l] = shared
	}
	if _, err := c.Acquire("t", LocksPerClerkMax, Read); !errors.Is(err, ErrLimit) {
		t.Fatalf("acquire beyond LocksPerClerkMax: %v", err)
	}
	if held, err := c.Acquire("t", 0, Read); err != nil || held {
		t.Fatalf("cached lock at the bound: %v %v (not renewed yet: not held)", held, err)
	}
}
