package lock

import (
	"errors"
	"reflect"
	"testing"
)

func newTestClerk(t *testing.T) *Clerk {
	t.Helper()
	c, err := NewClerk(ClerkConfig{ID: "a", Session: 1, Groups: 1, LeaseTicks: 30,
		LeaseMarginTicks: 3, RetryTicks: 5, IdleTicks: 100})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Open("t"); err != nil {
		t.Fatal(err)
	}
	return c
}

// drainClerk returns and acknowledges the clerk's output.
func drainClerk(c *Clerk) ClerkReady {
	rd := c.Ready()
	c.Advance(rd)
	return rd
}

// renewed ticks the clerk and acknowledges any renewal at epoch 1; it
// returns the events the tick produced.
func renewed(t *testing.T, c *Clerk) []Event {
	t.Helper()
	c.Tick()
	rd := drainClerk(c)
	for _, m := range rd.Messages {
		if r, ok := m.(Renew); ok {
			mustStep(t, c, RenewAck{Clerk: "a", Session: 1, Seq: r.Seq, Groups: []GroupEpoch{{0, 1}}})
		}
	}
	return rd.Events
}

func grantW(t *testing.T, c *Clerk, lock uint64) uint64 {
	t.Helper()
	if held, err := c.Acquire("t", lock, Write); held || err != nil {
		t.Fatalf("acquire: %v %v", held, err)
	}
	req := drainClerk(c).Messages[0].(Request)
	mustStep(t, c, Grant{Clerk: "a", Session: 1, Table: "t", Lock: lock, Mode: Write, ReqID: req.ReqID, Epoch: 1})
	if got := drainClerk(c).Events; !reflect.DeepEqual(got, []Event{Granted{"t", lock, Write}}) {
		t.Fatalf("events %v", got)
	}
	return req.ReqID
}

func TestClerkHoldsOnlyUnderLease(t *testing.T) {
	c := newTestClerk(t)
	drainClerk(c)
	grantW(t, c, 7)
	if m := c.Holds("t", 7); m != None {
		t.Fatalf("holds %v before any renewal was acknowledged", m)
	}
	renewed(t, c)
	if m := c.Holds("t", 7); m != Write {
		t.Fatalf("holds %v after renewal", m)
	}
	// Renewals go out but nobody answers: belief ends LeaseTicks-margin
	// after the last acknowledged renewal was sent (tick 1), then the
	// session is lost because it holds something.
	for c.now < 1+30-3-1 {
		c.Tick()
	}
	if c.Holds("t", 7) != Write {
		t.Fatal("belief ended early")
	}
	c.Tick()
	if c.Holds("t", 7) != None || !c.Lost() {
		t.Fatalf("holds %v lost %v at tick %d", c.Holds("t", 7), c.Lost(), c.now)
	}
	evs := drainClerk(c).Events
	if _, ok := evs[len(evs)-1].(LeaseLost); !ok {
		t.Fatalf("events %v, want LeaseLost last", evs)
	}
	if _, err := c.Acquire("t", 8, Read); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("acquire after loss: %v", err)
	}
}

func TestClerkRevokeFlushRelease(t *testing.T) {
	c := newTestClerk(t)
	renewed(t, c)
	drainClerk(c)
	req := grantW(t, c, 7)
	mustStep(t, c, Revoke{Clerk: "a", Session: 1, Table: "t", Lock: 7, ReqID: req, To: Read, Epoch: 1})
	rd := drainClerk(c)
	if len(rd.Messages) != 0 || !reflect.DeepEqual(rd.Events, []Event{Flush{"t", 7, Read}}) {
		t.Fatalf("after revoke: %+v", rd)
	}
	// The server asks for less while the owner flushes.
	mustStep(t, c, Revoke{Clerk: "a", Session: 1, Table: "t", Lock: 7, ReqID: req, To: None, Epoch: 1})
	if rd := drainClerk(c); len(rd.Events)+len(rd.Messages) != 0 {
		t.Fatalf("second revoke while flushing: %+v", rd)
	}
	c.Flushed("t", 7, Read)
	rd = drainClerk(c)
	want := ClerkReady{
		Messages: []Message{Downgrade{Clerk: "a", Session: 1, Table: "t", Lock: 7, ReqID: req}},
		Events:   []Event{Flush{"t", 7, None}},
	}
	if !reflect.DeepEqual(rd, want) {
		t.Fatalf("after flushed(read): %+v", rd)
	}
	if c.Holds("t", 7) != Read {
		t.Fatalf("holds %v after downgrade", c.Holds("t", 7))
	}
	c.Flushed("t", 7, None)
	rd = drainClerk(c)
	if !reflect.DeepEqual(rd.Messages, []Message{Release{Clerk: "a", Session: 1, Table: "t", Lock: 7, ReqID: req}}) {
		t.Fatalf("after flushed(none): %+v", rd)
	}
	// A revoke repeated after the release was lost gets the release again.
	mustStep(t, c, Revoke{Clerk: "a", Session: 1, Table: "t", Lock: 7, ReqID: req, To: None, Epoch: 1})
	if rd := drainClerk(c); !reflect.DeepEqual(rd.Messages, []Message{Release{Clerk: "a", Session: 1, Table: "t", Lock: 7, ReqID: req}}) {
		t.Fatalf("repeated revoke: %+v", rd)
	}
}

func TestClerkIgnoresOldEpochs(t *testing.T) {
	c := newTestClerk(t)
	renewed(t, c)
	drainClerk(c)
	req := grantW(t, c, 7)
	// A new owner at epoch 3 queries; the clerk reports and moves on.
	mustStep(t, c, QueryHeld{Clerk: "a", Session: 1, Table: "t", Epoch: 3, Groups: []int{0}})
	want := Held{Clerk: "a", Session: 1, Table: "t", Epoch: 3, Groups: []int{0},
		Locks: []HeldLock{{Lock: 7, Mode: Write, ReqID: req}}}
	if rd := drainClerk(c); !reflect.DeepEqual(rd.Messages, []Message{want}) {
		t.Fatalf("held: %+v", rd.Messages)
	}
	if c.Holds("t", 7) != None {
		t.Fatal("belief survived the epoch change before the new owner renewed")
	}
	// A revoke and a grant from the old owner are ignored.
	mustStep(t, c, Revoke{Clerk: "a", Session: 1, Table: "t", Lock: 7, ReqID: req, To: None, Epoch: 1})
	c.Acquire("t", 8, Read)
	r := drainClerk(c).Messages[0].(Request)
	mustStep(t, c, Grant{Clerk: "a", Session: 1, Table: "t", Lock: 8, Mode: Read, ReqID: r.ReqID, Epoch: 1})
	if rd := drainClerk(c); len(rd.Events)+len(rd.Messages) != 0 {
		t.Fatalf("old epoch had effect: %+v", rd)
	}
}

func TestClerkIdleAndRecovery(t *testing.T) {
	c := newTestClerk(t)
	renewed(t, c)
	grantW(t, c, 7)
	mustStep(t, c, Recover{Clerk: "a", Session: 1, Table: "t", Dead: "b", DeadSession: 4, Epoch: 1})
	if rd := drainClerk(c); !reflect.DeepEqual(rd.Events, []Event{RunRecovery{"b", 4, "t"}}) {
		t.Fatalf("recover: %+v", rd)
	}
	if c.Holds("t", LogLock("b")) != Write {
		t.Fatal("recovery does not hold the log lock")
	}
	c.RecoveryDone("b", 4, "t")
	done := RecoveryDone{Clerk: "a", Session: 1, Table: "t", Dead: "b", DeadSession: 4}
	if rd := drainClerk(c); !reflect.DeepEqual(rd.Messages, []Message{done}) {
		t.Fatalf("recovery done: %+v", rd)
	}
	// A resent Recover is acknowledged again without rerunning it.
	mustStep(t, c, Recover{Clerk: "a", Session: 1, Table: "t", Dead: "b", DeadSession: 4, Epoch: 1})
	if rd := drainClerk(c); !reflect.DeepEqual(rd, ClerkReady{Messages: []Message{done}}) {
		t.Fatalf("resent recover: %+v", rd)
	}
	// Unused for IdleTicks, lock 7 is flushed and released.
	var flushed bool
	for range 120 {
		for _, e := range renewed(t, c) {
			flushed = flushed || e == Event(Flush{"t", 7, None})
		}
	}
	if !flushed {
		t.Fatal("idle lock not flushed")
	}
}

func TestClerkDowngrade(t *testing.T) {
	c := newTestClerk(t)
	renewed(t, c)
	drainClerk(c)
	req := grantW(t, c, 7)
	down := Downgrade{Clerk: "a", Session: 1, Table: "t", Lock: 7, ReqID: req}

	c.Downgrade("t", 7)
	if rd := drainClerk(c); !reflect.DeepEqual(rd, ClerkReady{Messages: []Message{down}}) {
		t.Fatalf("downgrade: %+v", rd)
	}
	if m := c.Holds("t", 7); m != Read {
		t.Fatalf("holds %v after downgrade", m)
	}
	// Held in Read (or not at all): no-op.
	c.Downgrade("t", 7)
	c.Downgrade("t", 8)
	c.Downgrade("nope", 7)
	if rd := drainClerk(c); len(rd.Messages)+len(rd.Events) != 0 {
		t.Fatalf("downgrade of a read lock: %+v", rd)
	}
	// Read is cached: Acquire(Read) is answered at once; Write asks again.
	if held, err := c.Acquire("t", 7, Read); !held || err != nil {
		t.Fatalf("acquire read after downgrade: %v %v", held, err)
	}
	if held, err := c.Acquire("t", 7, Write); held || err != nil {
		t.Fatalf("acquire write after downgrade: %v %v", held, err)
	}
	r := drainClerk(c).Messages[0].(Request)
	if r.Mode != Write || r.ReqID <= req {
		t.Fatalf("upgrade request %+v", r)
	}
	// A revoke of the downgraded grant to Read (the server had not seen
	// the Downgrade) is answered by the Downgrade again, without a flush.
	mustStep(t, c, Revoke{Clerk: "a", Session: 1, Table: "t", Lock: 7, ReqID: req, To: Read, Epoch: 1})
	if rd := drainClerk(c); !reflect.DeepEqual(rd, ClerkReady{Messages: []Message{down}}) {
		t.Fatalf("revoke to read after downgrade: %+v", rd)
	}
}

// TestClerkDowngradeDuringRevoke: a downgrade while a revoke's flush is
// under way answers a revoke to Read, and leaves a revoke to None running.
func TestClerkDowngradeDuringRevoke(t *testing.T) {
	c := newTestClerk(t)
	renewed(t, c)
	drainClerk(c)

	// Revoke to Read, then the owner downgrades before Flushed.
	req := grantW(t, c, 7)
	mustStep(t, c, Revoke{Clerk: "a", Session: 1, Table: "t", Lock: 7, ReqID: req, To: Read, Epoch: 1})
	if rd := drainClerk(c); !reflect.DeepEqual(rd.Events, []Event{Flush{"t", 7, Read}}) {
		t.Fatalf("revoke: %+v", rd)
	}
	c.Downgrade("t", 7)
	down := Downgrade{Clerk: "a", Session: 1, Table: "t", Lock: 7, ReqID: req}
	if rd := drainClerk(c); !reflect.DeepEqual(rd, ClerkReady{Messages: []Message{down}}) {
		t.Fatalf("downgrade while flushing: %+v", rd)
	}
	c.Flushed("t", 7, Read) // the late answer to the Flush: nothing left to do
	if rd := drainClerk(c); len(rd.Messages)+len(rd.Events) != 0 || c.Holds("t", 7) != Read {
		t.Fatalf("flushed after downgrade: %+v, holds %v", rd, c.Holds("t", 7))
	}
	// A later revoke to None is a new flush.
	mustStep(t, c, Revoke{Clerk: "a", Session: 1, Table: "t", Lock: 7, ReqID: req, To: None, Epoch: 1})
	if rd := drainClerk(c); !reflect.DeepEqual(rd.Events, []Event{Flush{"t", 7, None}}) {
		t.Fatalf("revoke to none: %+v", rd)
	}
	c.Flushed("t", 7, None)
	rel := Release{Clerk: "a", Session: 1, Table: "t", Lock: 7, ReqID: req}
	if rd := drainClerk(c); !reflect.DeepEqual(rd.Messages, []Message{rel}) || c.Holds("t", 7) != None {
		t.Fatalf("flushed(none): %+v", rd)
	}

	// Revoke to None, then the owner downgrades: the revoke still runs,
	// and no second Flush is raised.
	req = grantW(t, c, 8)
	mustStep(t, c, Revoke{Clerk: "a", Session: 1, Table: "t", Lock: 8, ReqID: req, To: None, Epoch: 1})
	if rd := drainClerk(c); !reflect.DeepEqual(rd.Events, []Event{Flush{"t", 8, None}}) {
		t.Fatalf("revoke: %+v", rd)
	}
	c.Downgrade("t", 8)
	down = Downgrade{Clerk: "a", Session: 1, Table: "t", Lock: 8, ReqID: req}
	if rd := drainClerk(c); !reflect.DeepEqual(rd, ClerkReady{Messages: []Message{down}}) {
		t.Fatalf("downgrade while flushing to none: %+v", rd)
	}
	c.Flushed("t", 8, None)
	rel = Release{Clerk: "a", Session: 1, Table: "t", Lock: 8, ReqID: req}
	if rd := drainClerk(c); !reflect.DeepEqual(rd, ClerkReady{Messages: []Message{rel}}) || c.Holds("t", 8) != None {
		t.Fatalf("flushed(none) after downgrade: %+v", rd)
	}
}

// TestClerkLeaseLeft: what LeaseLeft reports follows the belief in the
// held locks: the full lease with nothing held, what the last acknowledged
// renewal left while holding, 0 once the session is lost.
func TestClerkLeaseLeft(t *testing.T) {
	c := newTestClerk(t)
	drainClerk(c)
	if got := c.LeaseLeft(); got != 30-3 {
		t.Fatalf("nothing held: LeaseLeft %d, want %d", got, 30-3)
	}
	grantW(t, c, 7)
	renewed(t, c) // acknowledged renewal sent at tick 1
	for c.now < 10 {
		c.Tick()
		drainClerk(c)
	}
	if got, want := c.LeaseLeft(), int64(1+30-3-10); got != want {
		t.Fatalf("at tick %d: LeaseLeft %d, want %d", c.now, got, want)
	}
	for !c.Lost() {
		c.Tick()
		drainClerk(c)
		if left := c.LeaseLeft(); left < 0 || c.Holds("t", 7) == Write && left == 0 {
			t.Fatalf("at tick %d: LeaseLeft %d while holding %v", c.now, left, c.Holds("t", 7))
		}
	}
	if got := c.LeaseLeft(); got != 0 {
		t.Fatalf("lost: LeaseLeft %d", got)
	}
}
