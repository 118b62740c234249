package lock

import (
	"math/rand/v2"
	"testing"
)

// TestGroupOfStable pins GroupOf and LogLock: every node must compute the
// same values forever, so a change here breaks mixed-version clusters.
func TestGroupOfStable(t *testing.T) {
	for lock, want := range []int{63, 61, 60, 1} {
		if g := GroupOf("fs0", uint64(lock), 100); g != want {
			t.Errorf("GroupOf(fs0, %d, 100) = %d, pinned %d", lock, g, want)
		}
	}
	if l, want := LogLock("n1"), uint64(0x8a0b3732e85e35c4); !IsLogLock(l) || IsLogLock(l&^logLockBit) || l != want {
		t.Errorf("LogLock(n1) = %x", l)
	}
	// Groups spread: 10k consecutive locks over 16 groups, none empty or
	// more than twice its share.
	count := make([]int, 16)
	for l := range uint64(10000) {
		count[GroupOf("fs0", l, 16)]++
	}
	for g, n := range count {
		if n < 10000/16/2 || n > 2*10000/16 {
			t.Errorf("group %d got %d of 10000 locks", g, n)
		}
	}
}

// TestRandomInput steps arbitrary, often malformed or out-of-order messages
// into a server and a clerk: neither may panic, and the server's invariants
// hold after every step.
func TestRandomInput(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s, _ := NewServer(Config{Groups: 4, LeaseTicks: 12, RetryTicks: 2})
	c, _ := NewClerk(ClerkConfig{ID: "a", Session: 1, Groups: 4, LeaseTicks: 12, LeaseMarginTicks: 2, RetryTicks: 2, IdleTicks: 5})
	_ = c.Open("t")
	for range 20000 {
		m := randomMessage(rng)
		_ = s.Step(m) // errors are fine; panics are not
		_ = c.Step(m)
		if rng.IntN(10) == 0 {
			s.Tick()
			c.Tick()
		}
		if rng.IntN(50) == 0 {
			_, _ = c.Acquire("t", uint64(rng.IntN(6)), Mode(1+rng.IntN(2)))
		}
		s.Advance(s.Ready())
		for _, e := range c.Ready().Events {
			if f, ok := e.(Flush); ok {
				c.Flushed(f.Table, f.Lock, f.To)
			}
		}
		c.Advance(c.Ready())
		s.CheckInvariants()
	}
}

func randomMessage(rng *rand.Rand) Message {
	clerks := []string{"a", "b", "c", ""}
	id, sn := clerks[rng.IntN(len(clerks))], uint64(rng.IntN(3))
	table := []string{"t", "u", ""}[rng.IntN(3)]
	lock := uint64(rng.IntN(6))
	if rng.IntN(8) == 0 {
		lock = LogLock(clerks[rng.IntN(3)])
	}
	mode, req, ep := Mode(rng.IntN(4)), uint64(rng.IntN(8)), uint64(rng.IntN(4))
	groups := []int{rng.IntN(6) - 1}
	switch rng.IntN(17) {
	case 0:
		return AssignGroups{Epoch: ep, Groups: groups, Fences: []FenceDone{{Clerk: id, Session: sn, Tables: []string{table}}},
			Sessions: []Registered{{Clerk: id, Session: sn, Tables: []string{table}}}}
	case 1:
		return FenceDone{Clerk: id, Session: sn, Tables: []string{table}}
	case 2:
		return Recovered{Clerk: id, Session: sn, Table: table}
	case 3:
		return OpenTable{Clerk: id, Session: sn, Table: table}
	case 4:
		return CloseTable{Clerk: id, Session: sn, Table: table, RenewSeq: req}
	case 5:
		return Renew{Clerk: id, Session: sn, Seq: req, Tables: []string{table}}
	case 6, 7:
		return Request{Clerk: id, Session: sn, Table: table, Lock: lock, Mode: mode, ReqID: req}
	case 8:
		return Release{Clerk: id, Session: sn, Table: table, Lock: lock, ReqID: req}
	case 9:
		return Downgrade{Clerk: id, Session: sn, Table: table, Lock: lock, ReqID: req}
	case 10:
		return Held{Clerk: id, Session: sn, Table: table, Epoch: ep, Groups: groups,
			Locks:      []HeldLock{{Lock: lock, Mode: mode, ReqID: req}},
			Pending:    []HeldLock{{Lock: lock + 1, Mode: mode, ReqID: req}},
			Recovering: []DeadSession{{Clerk: clerks[rng.IntN(3)], Session: sn}}}
	case 11:
		return RecoveryDone{Clerk: id, Session: sn, Table: table, Dead: clerks[rng.IntN(3)], DeadSession: sn}
	case 12:
		return Grant{Clerk: id, Session: sn, Table: table, Lock: lock, Mode: mode, ReqID: req, Epoch: ep}
	case 13:
		return Revoke{Clerk: id, Session: sn, Table: table, Lock: lock, ReqID: req, To: mode, Epoch: ep}
	case 14:
		return QueryHeld{Clerk: id, Session: sn, Table: table, Epoch: ep, Groups: groups}
	case 15:
		return Recover{Clerk: id, Session: sn, Table: table, Dead: clerks[rng.IntN(3)], DeadSession: sn, Epoch: ep}
	}
	return RenewAck{Clerk: id, Session: sn, Seq: req, Groups: []GroupEpoch{{Group: groups[0], Epoch: ep}}}
}
