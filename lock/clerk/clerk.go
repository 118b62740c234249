// Package clerk is the lock clerk linked into every fs node: the I/O layer
// around a lock.Clerk. It keeps one gRPC stream per lock server that owns
// lock groups (lockpb.Lock), routes the core's messages with lock.Route,
// reconnects with backoff, re-resolves group owners when told, ticks the
// core on a wall-clock ticker, and turns the core's events into blocking
// Acquire calls and owner callbacks.
//
// Concurrency: one mutex guards the core; every core call is followed, under
// the same mutex, by carrying out its Ready. Nothing under the mutex blocks:
// messages go to a bounded outbox per server (full: dropped, the protocol
// resends), events wake Acquire callers or queue callbacks. Callbacks
// (OnRevoke, OnRecover, OnLeaseLost) run on their own goroutines, at most
// Config.CallbacksMax at once, never under the mutex, so they may call the
// Clerk. A mutex rather than a loop goroutine makes a cached re-acquire
// (Acquire and Unpin) cost two uncontended mutex sections, about 0.1 µs,
// instead of goroutine hand-offs.
//
// Pins: Acquire pins the lock in the mode asked for, and Unpin ends that
// use. A revoke waits until no pin exceeds the mode it goes down to; only
// then is OnRevoke called, and the clerk releases or downgrades once it
// returns. Meanwhile Acquire calls for more than that mode wait, and a
// grant is pinned for the Acquire callers it answers before any revoke
// behind it can take it away, so a contended lock is used at least once
// per grant. An operation that needs several locks acquires them in
// ascending order, so pins never wait for each other in a cycle:
//
//	if err := c.Acquire(ctx, table, l, lock.Write); err != nil { ... }
//	defer c.Unpin(table, l, lock.Write)
//	... use what l covers; OnRevoke(table, l, ...) is not called meanwhile
//
// A pin does not extend the lease. When the session is lost, OnLeaseLost
// runs, Holds reports None, and the owner must stop using what it pinned
// (storage fencing stops the writes of a node that does not notice).
package clerk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/lock"
)

// Defaults for zero Config fields. Lock servers must use the same tick and
// lease (server.TickDefault, server.LeaseTicksDefault).
const (
	TickDefault             = 100 * time.Millisecond
	LeaseTicksDefault       = 150 // 15 s at TickDefault
	LeaseMarginTicksDefault = 15  // 10% of the lease for tick-rate drift
	RetryTicksDefault       = 5
	IdleTicksDefault        = 600 // a minute
	CallbacksMaxDefault     = 256
)

// Backoff between attempts to reach a lock server or the resolver.
const (
	backoffMin      = 20 * time.Millisecond
	backoffMax      = 2 * time.Second
	resolveInterval = 10 * time.Second // re-resolve even if not told
)

// Errors returned by Acquire besides lock's (lock.ErrNotOpen,
// lock.ErrBadMode, lock.ErrReservedLock, lock.ErrLimit) and ctx.Err().
var (
	// ErrLeaseLost: the session is over; the fs node must refuse
	// operations until it remounts with a new session.
	ErrLeaseLost = lock.ErrLeaseLost
	// ErrRejected: a lock server refused the request or the table for a
	// limit; the error says which.
	ErrRejected = errors.New("clerk: refused by lock server")
)

// Resolver tells the clerk which lock server owns each lock group. The
// coordinator's client implements it (server.MemCoordinator does too).
type Resolver interface {
	// Owners returns the address of each group's owner (groups without a
	// live owner are absent) and the map epoch of that answer.
	Owners(ctx context.Context) (owners map[int]string, epoch uint64, err error)
	// Changed returns a channel that is closed once the owners change
	// after epoch.
	Changed(epoch uint64) <-chan struct{}
}

// Config configures a Clerk. Zero durations and tick counts take the
// defaults above.
type Config struct {
	ID      string   // the fs node's writer id (valid UTF-8): names its log lock
	Session uint64   // the session the coordinator handed out at mount
	Groups  int      // lock groups in the cluster; every node agrees
	Servers Resolver // required

	Tick             time.Duration // must equal the lock servers'
	LeaseTicks       int           // must equal the lock servers'
	LeaseMarginTicks int
	RetryTicks       int
	IdleTicks        int // unused locks are given back after this; < 0: never

	// OnRevoke is called when a lock must go down to `to` (None: drop it,
	// Read: keep it clean), because another clerk wants it or because it
	// was idle. Write back what the cache holds under the lock (and drop it
	// for None), then return nil: the clerk then releases or downgrades. An
	// error is logged and the call repeated after a backoff. nil: nothing
	// is cached.
	OnRevoke func(table string, lock uint64, to lock.Mode) error
	// OnRecover is called when this clerk must replay the log of dead
	// (sessions up to session) in table. It is called while the clerk
	// holds lock.LogLock(dead) in Write mode; check Holds before each
	// write. Return nil when done; an error is logged and the call
	// repeated after a backoff. Required for a clerk that opens tables.
	OnRecover func(table, dead string, session uint64) error
	// OnLeaseLost is called once when the session ends: the clerk holds
	// nothing any more; the fs node refuses operations until it remounts.
	OnLeaseLost func()

	CallbacksMax int                                         // callbacks running at once; 0: CallbacksMaxDefault
	Dial         func(addr string) (*grpc.ClientConn, error) // nil: coordclient.Dial
	Logger       *slog.Logger                                // nil: discard
	// Registerer receives the metrics (label clerk=ID); nil means
	// prometheus.DefaultRegisterer. A later clerk with the same ID
	// replaces an earlier one's series.
	Registerer prometheus.Registerer
}

func (cfg *Config) setDefaults() {
	if cfg.Tick == 0 {
		cfg.Tick = TickDefault
	}
	if cfg.LeaseTicks == 0 {
		cfg.LeaseTicks = LeaseTicksDefault
	}
	if cfg.LeaseMarginTicks == 0 {
		cfg.LeaseMarginTicks = max(1, min(LeaseMarginTicksDefault, cfg.LeaseTicks/10))
	}
	if cfg.RetryTicks == 0 {
		cfg.RetryTicks = RetryTicksDefault
	}
	switch {
	case cfg.IdleTicks == 0:
		cfg.IdleTicks = IdleTicksDefault
	case cfg.IdleTicks < 0:
		cfg.IdleTicks = 0 // the core's "never"
	}
	if cfg.CallbacksMax == 0 {
		cfg.CallbacksMax = CallbacksMaxDefault
	}
	if cfg.Dial == nil {
		cfg.Dial = coordclient.DialGRPC
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.DefaultRegisterer
	}
}

// Clerk is one clerk session. Make it with New, start Run, then Open the
// tables and Acquire locks.
type Clerk struct {
	cfg     Config
	log     *slog.Logger
	kick    chan struct{} // capacity 1: re-resolve the owners now
	jobsIn  chan struct{} // capacity 1: a callback was queued
	running atomic.Bool
	stats   *stats
	mu      struct {
		sync.Mutex
		core   *lock.Clerk
		owners map[int]string        // group → server address
		links  map[string]*link      // by address; made and ended by Run
		waits  map[waitKey][]*waiter // Acquire calls waiting, by lock
		pins   map[waitKey]pinCount  // locks in use
		// flushing holds the locks being revoked, with the mode they go
		// down to, from the Flush event until the core is told Flushed.
		flushing map[waitKey]lock.Mode
		// deferred holds the revokes that wait for pins to end.
		deferred map[waitKey]lock.Flush
		changed  chan struct{} // closed and replaced on grants, renewals and loss
		jobs     []job         // callbacks to run, in order
		renew    *lock.Renew   // the latest renewal, for servers connected after it
	}
}

// New returns a clerk for one session. Errors: lock.ErrConfig.
func New(cfg Config) (*Clerk, error) {
	cfg.setDefaults()
	switch {
	case cfg.Servers == nil:
		return nil, fmt.Errorf("%w: no resolver", lock.ErrConfig)
	case !utf8.ValidString(cfg.ID):
		return nil, fmt.Errorf("%w: clerk id %q is not UTF-8", lock.ErrConfig, cfg.ID)
	case cfg.Session == 0:
		return nil, fmt.Errorf("%w: session 0", lock.ErrConfig)
	case cfg.Tick < time.Millisecond:
		return nil, fmt.Errorf("%w: tick %v < 1ms", lock.ErrConfig, cfg.Tick)
	}
	core, err := lock.NewClerk(lock.ClerkConfig{ID: cfg.ID, Session: cfg.Session, Groups: cfg.Groups,
		LeaseTicks: cfg.LeaseTicks, LeaseMarginTicks: cfg.LeaseMarginTicks, RetryTicks: cfg.RetryTicks,
		IdleTicks: cfg.IdleTicks})
	if err != nil {
		return nil, err
	}
	c := &Clerk{cfg: cfg, log: cfg.Logger.With("clerk", cfg.ID, "session", cfg.Session),
		kick: make(chan struct{}, 1), jobsIn: make(chan struct{}, 1)}
	c.mu.core = core
	c.mu.owners = map[int]string{}
	c.mu.links = map[string]*link{}
	c.mu.waits = map[waitKey][]*waiter{}
	c.mu.pins = map[waitKey]pinCount{}
	c.mu.flushing = map[waitKey]lock.Mode{}
	c.mu.deferred = map[waitKey]lock.Flush{}
	c.mu.changed = make(chan struct{})
	c.stats = newStats(cfg.ID, func() lock.ClerkMetrics {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.mu.core.Metrics()
	})
	if err := c.stats.register(cfg.Registerer); err != nil {
		return nil, err
	}
	return c, nil
}

// ID returns the clerk id; Session its session.
func (c *Clerk) ID() string      { return c.cfg.ID }
func (c *Clerk) Session() uint64 { return c.cfg.Session }

// Run connects to the lock servers and drives the clerk until ctx ends;
// it returns ctx.Err() after every goroutine it started (callbacks
// included) has exited. Ending Run without closing the tables is what a
// crash looks like to the lock service: the session's locks stay frozen
// until its lease runs out and another clerk recovers its log.
func (c *Clerk) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("clerk: Run called twice")
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(2)
	go func() { defer wg.Done(); c.resolve(ctx, &wg) }()
	go func() { defer wg.Done(); c.callbacks(ctx) }()
	tick := time.NewTicker(c.cfg.Tick)
	defer tick.Stop()
	start, ticked := time.Now(), int64(0)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		// One core tick per elapsed interval, never fewer: the clerk's
		// lease is counted in ticks, and missing ticks would let it
		// believe in its locks after the servers gave them away.
		due := int64(time.Since(start) / c.cfg.Tick)
		c.mu.Lock()
		for ; ticked < due; ticked++ {
			c.mu.core.Tick()
		}
		c.drainLocked()
		c.mu.Unlock()
	}
}

// Open opens table: the clerk registers with every lock server as a user
// of it. Errors: ErrLeaseLost, lock.ErrLimit (bad name, too many tables).
func (c *Clerk) Open(table string) error {
	if !utf8.ValidString(table) {
		return fmt.Errorf("%w: table name %q is not UTF-8", lock.ErrLimit, table)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.mu.core.Open(table)
	c.drainLocked()
	return err
}

// Close closes table and gives up every lock in it; the owner must have
// flushed what they cover.
func (c *Clerk) Close(table string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.core.Close(table)
	c.mu.renew = nil // it lists table
	c.failWaitsLocked(func(k waitKey) bool { return k.table == table }, lock.ErrNotOpen)
	maps.DeleteFunc(c.mu.deferred, func(k waitKey, _ lock.Flush) bool { return k.table == table })
	maps.DeleteFunc(c.mu.flushing, func(k waitKey, _ lock.Mode) bool { return k.table == table })
	maps.DeleteFunc(c.mu.pins, func(k waitKey, _ pinCount) bool { return k.table == table })
	c.changedLocked()
	c.drainLocked()
}

// Lost reports whether the session is over.
func (c *Clerk) Lost() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.core.Lost()
}

// receive steps the messages of one frame from the server at addr.
func (c *Clerk) receive(addr string, msgs []lock.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	acked := false
	for _, m := range msgs {
		switch m := m.(type) {
		case lock.QueryHeld:
			// Only an owner rebuilding a group asks; answer it there even
			// if the resolver has not caught up yet (unless the resolver
			// already dropped that server: this is a late frame).
			for _, g := range m.Groups {
				if c.mu.links[addr] != nil && g >= 0 && g < c.cfg.Groups {
					c.mu.owners[g] = addr
				}
			}
		case lock.RenewAck:
			acked = true
		}
		if err := c.mu.core.Step(m); err != nil {
			c.log.Warn("server message refused", "server", addr, "msg", fmt.Sprintf("%T", m), "err", err)
		}
	}
	c.drainLocked()
	if acked {
		// A lease renewed can make a held lock usable again: let every
		// waiter look.
		c.failWaitsLocked(func(waitKey) bool { return true }, nil)
		c.changedLocked()
	}
}

// drainLocked carries out the core's Ready: messages to the servers' outboxes,
// events to waiters and callbacks.
func (c *Clerk) drainLocked() {
	for c.mu.core.HasReady() {
		rd := c.mu.core.Ready()
		c.mu.core.Advance(rd)
		for _, m := range rd.Messages {
			c.routeLocked(m)
		}
		for _, e := range rd.Events {
			c.eventLocked(e)
		}
	}
}

func (c *Clerk) routeLocked(m lock.Message) {
	g, all := lock.Route(m, c.cfg.Groups)
	if r, ok := m.(lock.Renew); ok {
		c.mu.renew = &r
	}
	if all {
		for _, ln := range c.mu.links {
			ln.enqueue(m)
		}
		return
	}
	if ln := c.mu.links[c.mu.owners[g]]; ln != nil {
		ln.enqueue(m)
	} // else no owner known: the core resends what matters
}

func (c *Clerk) eventLocked(e lock.Event) {
	switch e := e.(type) {
	case lock.Granted:
		c.grantedLocked(waitKey{e.Table, e.Lock}, e.Mode)
	case lock.Rejected:
		err := fmt.Errorf("%w: %v (table %q, lock %#x)", ErrRejected, e.Reason, e.Table, e.Lock)
		switch e.Reason {
		case lock.ReasonTablesMax, lock.ReasonClerksMax, lock.ReasonBadName: // the table or the session
			c.failWaitsLocked(func(k waitKey) bool { return e.Table == "" || k.table == e.Table }, err)
		default:
			c.wakeLocked(waitKey{e.Table, e.Lock}, err)
		}
	case lock.Flush:
		c.flushLocked(e)
	case lock.RunRecovery:
		c.queueLocked(job{recovery: &e})
	case lock.LeaseLost:
		c.log.Error("lock lease lost", "reason", e.Reason)
		c.failWaitsLocked(func(waitKey) bool { return true }, fmt.Errorf("%w: %s", ErrLeaseLost, e.Reason))
		c.changedLocked()
		clear(c.mu.deferred)
		clear(c.mu.flushing)
		if c.cfg.OnLeaseLost != nil {
			c.queueLocked(job{leaseLost: true})
		}
	}
}
