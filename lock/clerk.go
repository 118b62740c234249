package lock

import (
	"fmt"
	"math"
	"slices"
)

// ClerkReady is what a Clerk has for its I/O layer and its owner. Carry it
// out, then call Advance with it.
type ClerkReady struct {
	Messages []Message // to lock servers; Route says where each goes
	Events   []Event   // to the owner (the fs node)
}

// Clerk is the lock-service state of one clerk session: the tables it has
// open, the locks it holds and waits for, its lease, and the recoveries it
// runs. It does no I/O and reads no clock. Not safe for concurrent use.
//
// The owner asks for locks with Acquire and learns of grants from Granted
// events; before each use of a lock it checks Holds, which says no once
// the lease may have run out. Revokes and idleness become Flush events;
// the owner answers with Flushed. RunRecovery events are answered with
// RecoveryDone. After LeaseLost (or ErrLeaseLost) the clerk is finished:
// the owner remounts with a new session.
type Clerk struct {
	cfg     ClerkConfig
	now     int64
	lost    bool
	nextReq uint64
	tables  map[string]*ctable

	renewSeq  uint64
	renewAt   int64
	sent      [renewRingN]sentRenew // recent renewals, by seq % renewRingN
	lease     []int64               // per group: send tick of the last accepted acked renewal
	lapseBase []int64               // per group: start of the current lapse countdown
	epoch     []uint64              // per group: the epoch whose grants are believed; 0 none yet
	count     []int32               // per group: held locks plus running recoveries

	done      []recoveryKey // recently finished recoveries, oldest first
	nextRetry int64
	nextIdle  int64
	out       ClerkReady
	metrics   ClerkMetrics
}

// ClerkMetrics are a clerk's counters since NewClerk, and what it holds.
type ClerkMetrics struct {
	Requests       uint64 // requests made (Acquire found the lock not held well enough)
	Grants         uint64 // grants accepted
	Revokes        uint64 // revokes that asked the owner to flush (resends not counted)
	IdleReleases   uint64 // locks the clerk started to give back for idleness
	Downgrades     uint64 // voluntary downgrades (Downgrade)
	Renewals       uint64 // lease renewals a lock server acknowledged
	Recoveries     uint64 // recoveries of dead clerks' logs run (RunRecovery events)
	RecoveriesDone uint64 // recoveries the owner finished
	Held           int64  // locks held now, running recoveries included
}

type sentRenew struct {
	seq  uint64
	tick int64
}

type recoveryKey struct {
	table string
	dead  DeadSession
}

// ctable is one open table at the clerk.
type ctable struct {
	name       string
	locks      map[uint64]*entry    // held or requested
	pending    map[uint64]struct{}  // locks with a request outstanding
	recovering map[DeadSession]bool // recoveries the owner is running
}

// entry is one lock at the clerk. Invariant: mode != None || want != None.
type entry struct {
	mode     Mode   // held mode
	req      uint64 // grant held
	used     int64  // last Acquire that found it held
	want     Mode   // requested mode; None if no request is outstanding
	wantReq  uint64
	asked    bool // a revoke or idleness asks the holder to go down to target
	target   Mode
	flushing bool // Flush event out, Flushed not yet called
}

const leaseNever = math.MinInt64 / 4

// NewClerk returns a clerk for one session. It renews at its first Tick
// and every LeaseTicks/3 after.
func NewClerk(cfg ClerkConfig) (*Clerk, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Clerk{
		cfg:       cfg,
		tables:    map[string]*ctable{},
		lease:     make([]int64, cfg.Groups),
		lapseBase: make([]int64, cfg.Groups),
		epoch:     make([]uint64, cfg.Groups),
		count:     make([]int32, cfg.Groups),
	}
	for g := range c.lease {
		c.lease[g] = leaseNever
	}
	return c, nil
}

// Step feeds one message from a lock server into the clerk. Messages for
// another session are ignored.
func (c *Clerk) Step(m Message) error {
	if m == nil {
		return ErrUnknownMessage
	}
	if id, sn := m.clerkOf(); id != c.cfg.ID || sn != c.cfg.Session || c.lost {
		return nil
	}
	switch m := m.(type) {
	case RenewAck:
		c.renewAck(m)
	case Grant:
		c.grant(m)
	case Revoke:
		c.revoke(m)
	case QueryHeld:
		c.queryHeld(m)
	case Recover:
		c.recover(m)
	case Reject:
		c.rejected(m)
	case Expired:
		c.loseLease("lock service declared the session dead")
	default:
		return fmt.Errorf("%w: %T sent to a clerk", ErrUnknownMessage, m)
	}
	return nil
}

// Tick advances the clerk's clock by one tick.
func (c *Clerk) Tick() {
	c.now++
	if c.lost {
		return
	}
	if c.checkLease(); c.lost {
		return
	}
	if c.now >= c.renewAt {
		c.renew()
	}
	if c.now >= c.nextRetry {
		c.nextRetry = c.now + int64(c.cfg.RetryTicks)
		c.resendPending()
	}
	if c.cfg.IdleTicks > 0 && c.now >= c.nextIdle {
		c.nextIdle = c.now + int64(max(1, c.cfg.IdleTicks/4))
		c.dropIdle()
	}
}

// HasReady reports whether Ready would return anything.
func (c *Clerk) HasReady() bool { return len(c.out.Messages)+len(c.out.Events) > 0 }

// Ready returns the messages and events produced since the last Advance.
func (c *Clerk) Ready() ClerkReady { return c.out }

// Advance discards what rd (from the last Ready) held.
func (c *Clerk) Advance(rd ClerkReady) {
	c.out.Messages = dropFront(c.out.Messages, len(rd.Messages))
	c.out.Events = dropFront(c.out.Events, len(rd.Events))
}

// Metrics returns the clerk's counters.
func (c *Clerk) Metrics() ClerkMetrics {
	m := c.metrics
	for _, n := range c.count {
		m.Held += int64(n)
	}
	return m
}

// Lost reports whether the session is over (lease lapsed or expired).
func (c *Clerk) Lost() bool { return c.lost }

// Open opens table: the clerk registers with every lock server.
func (c *Clerk) Open(table string) error {
	switch {
	case c.lost:
		return ErrLeaseLost
	case c.tables[table] != nil:
		return nil
	case table == "" || len(table) > NameBytesMax || len(c.tables) >= TablesPerClerkMax:
		return fmt.Errorf("%w: table %q (%d open)", ErrLimit, table, len(c.tables))
	}
	c.tables[table] = &ctable{name: table, locks: map[uint64]*entry{},
		pending: map[uint64]struct{}{}, recovering: map[DeadSession]bool{}}
	c.send(OpenTable{Clerk: c.cfg.ID, Session: c.cfg.Session, Table: table})
	return nil
}

// Close closes table, giving up every lock in it. The owner must have
// flushed what they cover.
func (c *Clerk) Close(table string) {
	t := c.tables[table]
	if t == nil || c.lost {
		return
	}
	for lock, e := range t.locks {
		if e.mode != None {
			c.count[c.group(table, lock)]--
		}
	}
	for d := range t.recovering {
		c.count[c.group(table, LogLock(d.Clerk))]--
	}
	delete(c.tables, table)
	c.sendClose(table)
}

func (c *Clerk) sendClose(table string) {
	c.send(CloseTable{Clerk: c.cfg.ID, Session: c.cfg.Session, Table: table, RenewSeq: c.renewSeq})
}

// loseLease ends the session: nothing is held any more.
func (c *Clerk) loseLease(why string) {
	if c.lost {
		return
	}
	c.lost = true
	c.tables = map[string]*ctable{}
	clear(c.count)
	c.out.Messages = nil
	c.event(LeaseLost{Reason: why})
}

func (c *Clerk) send(m Message) { c.out.Messages = append(c.out.Messages, m) }
func (c *Clerk) event(e Event)  { c.out.Events = append(c.out.Events, e) }

func (c *Clerk) group(table string, lock uint64) int { return GroupOf(table, lock, c.cfg.Groups) }

func (c *Clerk) sortedTables() []*ctable {
	ts := make([]*ctable, 0, len(c.tables))
	for _, name := range sortedKeys(c.tables) {
		ts = append(ts, c.tables[name])
	}
	return ts
}

// sortedLocks returns the locks of t that satisfy keep, sorted.
func sortedLocks(t *ctable, keep func(*entry) bool) []uint64 {
	var ls []uint64
	for l, e := range t.locks {
		if keep(e) {
			ls = append(ls, l)
		}
	}
	slices.Sort(ls)
	return ls
}
