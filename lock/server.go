package lock

import (
	"fmt"
	"slices"
)

// Ready is what a Server has for its I/O layer. Carry it out, then call
// Advance with it. Nothing needs to be persisted: lock state lives in memory
// and is rebuilt from the clerks after a crash.
type Ready struct {
	// Messages go to clerk sessions (ClerkOf names the recipient). Order
	// within one session matters only for speed: the protocol tolerates
	// loss, duplication and reordering.
	Messages []Message
	// Actions go to the coordinator: FenceRequest, RecordRecovered.
	Actions []Action
}

// Metrics are counters since the Server was made.
type Metrics struct {
	Grants         uint64 // grants sent (not counting resends)
	Revokes        uint64 // revokes sent (not counting resends)
	Waits          uint64 // requests that could not be granted at once
	Renewals       uint64 // lease renewals received
	Expirations    uint64 // sessions whose lease ran out here
	Recoveries     uint64 // recoveries started (Recover sent to a clerk)
	RecoveriesDone uint64 // recoveries a clerk reported done
	Rejects        uint64 // requests refused for a limit
	// WaitTicks is a histogram of how long granted requests waited here,
	// from arrival to grant, in ticks: WaitTicks[i] counts waits of at
	// most WaitBucketTicks[i] (and more than the bound before); the last
	// element counts longer waits. WaitTicksSum is their total.
	WaitTicks    [len(WaitBucketTicks) + 1]uint64
	WaitTicksSum uint64
}

// WaitBucketTicks are the upper bounds of Metrics.WaitTicks.
var WaitBucketTicks = [...]int64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}

func (m *Metrics) observeWait(ticks int64) {
	ticks = max(ticks, 0)
	i, _ := slices.BinarySearch(WaitBucketTicks[:], ticks)
	m.WaitTicks[i]++
	m.WaitTicksSum += uint64(ticks)
}

// Server is the lock-service state of one lock server: the lock groups it
// owns, their locks, and the clerk sessions it hears from. It does no I/O
// and reads no clock. Not safe for concurrent use: one goroutine steps,
// ticks and drains it.
type Server struct {
	cfg       Config
	now       int64 // ticks since NewServer
	started   bool  // an AssignGroups arrived; until then clerks are ignored
	epoch     uint64
	groups    []groupState
	owned     []GroupEpoch // owned groups, for RenewAck; replaced, never mutated
	rebuilds  int          // groups with rebuild != nil
	sessions  map[sessionKey]uint32
	slots     []*session // by index; index 0 is never used
	free      []uint32
	fences    map[string]uint64 // clerk id → highest fenced session
	tables    map[string]*table
	names     []string // sorted keys of tables, for deterministic order
	nextRetry int64
	out       Ready
	metrics   Metrics
}

// groupState is one lock group from this server's point of view.
type groupState struct {
	owned   bool
	epoch   uint64   // map epoch at which this server acquired the group
	rebuild *rebuild // non-nil while the group is rebuilt: nothing is granted
}

// rebuild tracks which clerk sessions have reported their holdings in a
// newly acquired group.
type rebuild struct {
	since    int64
	answered map[answerKey]struct{}
}

type answerKey struct {
	sess  sessionKey
	table string
}

// NewServer returns a server that owns no groups yet. It ignores clerks
// until the I/O layer steps its first AssignGroups.
func NewServer(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Server{
		cfg:      cfg,
		groups:   make([]groupState, cfg.Groups),
		sessions: map[sessionKey]uint32{},
		slots:    []*session{nil},
		fences:   map[string]uint64{},
		tables:   map[string]*table{},
	}, nil
}

// Step feeds one message into the server: from a clerk, or from the I/O
// layer (AssignGroups, FenceDone, Recovered). Stale, duplicated and
// reordered messages are expected and ignored or answered again. Errors
// report malformed input (ErrUnknownMessage, ErrBadGroup) or a clerk's
// claim that conflicts with another's (ErrConflictClaim: that clerk is
// then treated as dead); the server stays consistent either way.
func (s *Server) Step(m Message) error {
	var err error
	switch m := m.(type) {
	case AssignGroups:
		err = s.assign(m)
	case FenceDone:
		s.fence(m)
	case Recovered:
		s.recovered(m)
	case nil:
		return ErrUnknownMessage
	default:
		err = s.stepClerk(m)
	}
	s.progress()
	return err
}

// Tick advances the server's clock by one tick: leases run out, and
// unanswered revokes, queries and recoveries are sent again.
func (s *Server) Tick() {
	s.now++
	s.expire()
	if s.now >= s.nextRetry {
		s.nextRetry = s.now + int64(s.cfg.RetryTicks)
		s.retry()
	}
	s.progress()
}

// HasReady reports whether Ready would return anything.
func (s *Server) HasReady() bool { return len(s.out.Messages)+len(s.out.Actions) > 0 }

// Ready returns the messages and actions produced since the last Advance.
func (s *Server) Ready() Ready { return s.out }

// Advance discards what rd (from the last Ready) held.
func (s *Server) Advance(rd Ready) {
	s.out.Messages = dropFront(s.out.Messages, len(rd.Messages))
	s.out.Actions = dropFront(s.out.Actions, len(rd.Actions))
}

// Metrics returns the counters.
func (s *Server) Metrics() Metrics { return s.metrics }

func dropFront[T any](xs []T, n int) []T {
	if n >= len(xs) {
		return nil
	}
	return slices.Clone(xs[n:])
}

func (s *Server) stepClerk(m Message) error {
	if !s.started {
		return nil // cannot tell fenced sessions yet; the clerk retries
	}
	id, sn := m.clerkOf()
	c := s.lookup(id, sn)
	if s.isFenced(id, sn) || (c != nil && !c.live()) {
		s.send(Expired{Clerk: id, Session: sn})
		return nil
	}
	switch m.(type) {
	case OpenTable, Renew, Request, Held:
		if c == nil {
			if c = s.register(id, sn); c == nil {
				return nil
			}
		}
	case Release, Downgrade, CloseTable, RecoveryDone:
		if c == nil {
			return nil // it holds nothing here
		}
	default:
		return fmt.Errorf("%w: %T sent to a server", ErrUnknownMessage, m)
	}
	return s.stepSession(c, m)
}

func (s *Server) stepSession(c *session, m Message) error {
	switch m := m.(type) {
	case OpenTable:
		s.openFor(c, m.Table)
	case Renew:
		s.renew(c, m)
	case Request:
		s.request(c, m)
	case Held:
		return s.held(c, m)
	case Release:
		s.release(c, m.Table, m.Lock, m.ReqID, None)
	case Downgrade:
		s.release(c, m.Table, m.Lock, m.ReqID, Read)
	case CloseTable:
		s.closeTable(c, m)
	case RecoveryDone:
		s.recoveryDone(c, m)
	}
	return nil
}

func (s *Server) renew(c *session, m Renew) {
	if m.Seq > c.renewSeq {
		c.renewSeq = m.Seq
		for _, name := range m.Tables {
			s.openFor(c, name)
		}
	}
	c.horizon = max(c.horizon, s.now+int64(s.cfg.LeaseTicks))
	s.metrics.Renewals++
	s.send(RenewAck{Clerk: c.key.id, Session: c.key.session, Seq: m.Seq, Groups: s.owned})
}

// progress does what may have become possible: finish rebuilds, start
// recoveries.
func (s *Server) progress() {
	if s.rebuilds > 0 {
		s.checkRebuilds()
	}
	s.drive()
}

func (s *Server) retry() {
	s.retryRevokes()
	s.retryRecoveries()
	if s.rebuilds > 0 {
		s.queryAll()
	}
	for _, c := range s.slots {
		if c != nil && c.expired && !c.fenced {
			s.act(FenceRequest{Clerk: c.key.id, Session: c.key.session})
		}
	}
}

func (s *Server) send(m Message) { s.out.Messages = append(s.out.Messages, m) }
func (s *Server) act(a Action)   { s.out.Actions = append(s.out.Actions, a) }

func (s *Server) reject(c *session, table string, lock, req uint64, r Reason) {
	s.metrics.Rejects++
	s.send(Reject{Clerk: c.key.id, Session: c.key.session, Table: table, Lock: lock, ReqID: req, Reason: r})
}

func (s *Server) group(t *table, lock uint64) int { return GroupOf(t.name, lock, s.cfg.Groups) }

func (s *Server) serving(g int) bool { return s.groups[g].owned && s.groups[g].rebuild == nil }
