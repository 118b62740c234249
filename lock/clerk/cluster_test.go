package clerk_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumeria-fs/plumeria/lock"
	"github.com/plumeria-fs/plumeria/lock/clerk"
	"github.com/plumeria-fs/plumeria/lock/server"
)

// opts shape an in-process cluster: lock servers and clerks over real
// gRPC on 127.0.0.1, with a MemCoordinator.
type opts struct {
	groups     int
	tick       time.Duration
	leaseTicks int
	retryTicks int
	idleTicks  int
}

func defaultOpts() opts {
	// A 3 s lease: long enough that a race-detector stall does not cost a
	// clerk its lease, short enough for the dead-clerk test.
	return opts{groups: 16, tick: 10 * time.Millisecond, leaseTicks: 300, retryTicks: 5, idleTicks: -1}
}

type cluster struct {
	t       testing.TB
	o       opts
	mc      *server.MemCoordinator
	reg     *prometheus.Registry
	mu      sync.Mutex
	servers map[string]*serverProc
}

type serverProc struct {
	s      *server.Server
	addr   string
	cancel context.CancelFunc
	done   chan error
}

func newCluster(t testing.TB, o opts, servers int) *cluster {
	cl := &cluster{t: t, o: o, mc: server.NewMemCoordinator(o.groups), reg: prometheus.NewRegistry(),
		servers: map[string]*serverProc{}}
	for i := range servers {
		cl.startServer(fmt.Sprintf("s%d", i))
	}
	t.Cleanup(func() {
		for _, id := range cl.serverIDs() {
			cl.stopServer(id)
		}
	})
	return cl
}

func logger(t testing.TB) *slog.Logger {
	if os.Getenv("LOCK_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (cl *cluster) startServer(id string) { cl.startServerAt(id, "127.0.0.1:0") }

// restartServer stops a lock server and starts a new one on its address.
func (cl *cluster) restartServer(id string) {
	cl.mu.Lock()
	addr := cl.servers[id].addr
	cl.mu.Unlock()
	cl.stopServer(id)
	cl.startServerAt(id, addr)
}

func (cl *cluster) startServerAt(id, at string) {
	lis, err := net.Listen("tcp", at)
	if err != nil {
		cl.t.Fatal(err)
	}
	addr := lis.Addr().String()
	s, err := server.New(server.Config{ID: id, Coordinator: cl.mc.Server(id, addr), Groups: cl.o.groups,
		Tick: cl.o.tick, LeaseTicks: cl.o.leaseTicks, RetryTicks: cl.o.retryTicks,
		Registerer: cl.reg, Logger: logger(cl.t)})
	if err != nil {
		cl.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &serverProc{s: s, addr: addr, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- s.Serve(ctx, lis) }()
	cl.mu.Lock()
	cl.servers[id] = p
	cl.mu.Unlock()
}

// stopServer stops a lock server as a crash would (its connections drop)
// and returns once it stopped.
func (cl *cluster) stopServer(id string) {
	cl.mu.Lock()
	p := cl.servers[id]
	delete(cl.servers, id)
	cl.mu.Unlock()
	if p == nil {
		return
	}
	p.cancel()
	if err := <-p.done; err != nil && !errors.Is(err, context.Canceled) {
		cl.t.Errorf("server %s: %v", id, err)
	}
}

// killServer crashes a lock server and has the coordinator declare it
// dead, so its groups move.
func (cl *cluster) killServer(id string) {
	cl.stopServer(id)
	cl.mc.Kill(id)
}

func (cl *cluster) serverIDs() []string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var ids []string
	for id := range cl.servers {
		ids = append(ids, id)
	}
	return ids
}

// node is a model fs node: a clerk, and operations that pin locks while
// they use them.
type node struct {
	id      string
	table   string
	c       *clerk.Clerk
	cancel  context.CancelFunc
	done    chan error
	k       *checker
	revokes atomic.Int64
	lost    atomic.Bool
	stopped chan struct{} // closed when the node is stopped
}

// nodeHooks change a node's behaviour for one test.
type nodeHooks struct {
	mayLoseLease bool
	// onRecover replaces the model's recovery (which succeeds at once).
	onRecover func(n *node, table, dead string, session uint64) error
}

// startNode mounts a new session of id with table open and runs its clerk.
func (cl *cluster) startNode(id, table string, k *checker) *node {
	return cl.startNodeWith(id, table, k, nodeHooks{})
}

func (cl *cluster) startNodeWith(id, table string, k *checker, h nodeHooks) *node {
	n := &node{id: id, table: table, k: k, done: make(chan error, 1), stopped: make(chan struct{})}
	sn, err := cl.mc.Mount(id, table)
	if err != nil {
		cl.t.Fatal(err)
	}
	c, err := clerk.New(clerk.Config{ID: id, Session: sn, Groups: cl.o.groups, Servers: cl.mc,
		Tick: cl.o.tick, LeaseTicks: cl.o.leaseTicks, RetryTicks: cl.o.retryTicks, IdleTicks: cl.o.idleTicks,
		OnRevoke: func(table string, l uint64, to lock.Mode) error {
			k.revoking(n, l, to)
			n.revokes.Add(1)
			return nil
		},
		OnRecover: func(table, dead string, session uint64) error {
			if h.onRecover != nil {
				if err := h.onRecover(n, table, dead, session); err != nil {
					return err
				}
			}
			k.recovered(n, table, dead, session)
			return nil
		},
		OnLeaseLost: func() {
			n.lost.Store(true)
			if !h.mayLoseLease {
				k.fail("%s lost its lease", id)
			}
		},
		Registerer: cl.reg,
		Logger:     logger(cl.t),
	})
	if err != nil {
		cl.t.Fatal(err)
	}
	n.c = c
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { n.done <- c.Run(ctx) }()
	if err := c.Open(table); err != nil {
		cl.t.Fatal(err)
	}
	cl.t.Cleanup(n.stop)
	return n
}

// stop ends the clerk without closing its table: a crash.
func (n *node) stop() {
	if n.cancel != nil {
		close(n.stopped)
		n.cancel()
		<-n.done
		n.cancel = nil
	}
}

// use acquires l in mode, runs an operation under the checker and unpins.
func (n *node) use(ctx context.Context, l uint64, mode lock.Mode) error {
	if err := n.c.Acquire(ctx, n.table, l, mode); err != nil {
		return err
	}
	defer n.c.Unpin(n.table, l, mode)
	if got := n.c.Holds(n.table, l); got < mode {
		n.k.fail("%s: lock %d acquired %v but held %v", n.id, l, mode, got)
	}
	n.k.enter(n, l, mode)
	time.Sleep(time.Duration(rand.N(200)) * time.Microsecond) // the operation: let conflicts overlap
	n.k.leave(n, l, mode)
	return nil
}

// release gives l back voluntarily (not if an operation uses it).
func (n *node) release(l uint64) { n.c.Release(n.table, l) }

// checker is the test's view of who believes they hold what. At every
// grant (enter) it checks that no other node uses the lock in a
// conflicting mode. The one excuse is a node whose session was lost while
// it was in its critical section (its lease ran out mid-operation: the
// hazard storage fencing covers); that is counted, not failed.
type checker struct {
	mu         sync.Mutex
	holders    map[uint64]map[*node]holding
	grants     map[uint64]map[string]int // lock → node → grants seen
	recoveries map[string]int            // "dead/session/table" → recoveries run
	lapsed     int
	errs       []string
}

// holding counts a node's uses of a lock in progress, by mode.
type holding struct{ read, write int }

func (h holding) mode() lock.Mode {
	switch {
	case h.write > 0:
		return lock.Write
	case h.read > 0:
		return lock.Read
	}
	return lock.None
}

func newChecker() *checker {
	return &checker{holders: map[uint64]map[*node]holding{}, grants: map[uint64]map[string]int{},
		recoveries: map[string]int{}}
}

func (k *checker) fail(format string, args ...any) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.errs = append(k.errs, fmt.Sprintf(format, args...))
}

func (k *checker) enter(n *node, l uint64, mode lock.Mode) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for o, h := range k.holders[l] {
		if o == n || (mode != lock.Write && h.mode() != lock.Write) {
			continue
		}
		if o.c.Lost() {
			k.lapsed++ // o's lease ran out mid-section: fencing's business
			continue
		}
		k.errs = append(k.errs, fmt.Sprintf("SAFETY: lock %d used by %s (%v, clerk holds %v) and %s (%v, clerk holds %v)",
			l, o.id, h.mode(), o.c.Holds(o.table, l), n.id, mode, n.c.Holds(n.table, l)))
	}
	hs := k.holders[l]
	if hs == nil {
		hs = map[*node]holding{}
		k.holders[l] = hs
	}
	h := hs[n]
	if mode == lock.Write {
		h.write++
	} else {
		h.read++
	}
	hs[n] = h
	if k.grants[l] == nil {
		k.grants[l] = map[string]int{}
	}
	k.grants[l][n.id]++
}

func (k *checker) leave(n *node, l uint64, mode lock.Mode) {
	k.mu.Lock()
	defer k.mu.Unlock()
	h := k.holders[l][n]
	if mode == lock.Write {
		h.write--
	} else {
		h.read--
	}
	if h.mode() == lock.None {
		delete(k.holders[l], n)
	} else {
		k.holders[l][n] = h
	}
}

// revoking checks that a revoke never reaches the owner while one of its
// operations uses the lock above the mode the revoke goes down to.
func (k *checker) revoking(n *node, l uint64, to lock.Mode) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if h, ok := k.holders[l][n]; ok && h.mode() > to {
		k.errs = append(k.errs, fmt.Sprintf("%s: revoke of lock %d to %v during a %v use", n.id, l, to, h.mode()))
	}
}

func (k *checker) recovered(n *node, table, dead string, session uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if n.c.Holds(table, lock.LogLock(dead)) != lock.Write {
		k.errs = append(k.errs, fmt.Sprintf("%s recovers %s/%d without its log lock", n.id, dead, session))
	}
	k.recoveries[fmt.Sprintf("%s/%d/%s", dead, session, table)]++
}

func (k *checker) recoveriesOf(dead string, session uint64, table string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.recoveries[fmt.Sprintf("%s/%d/%s", dead, session, table)]
}

func (k *checker) check(t *testing.T) {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range k.errs {
		t.Error(e)
	}
	if k.lapsed > 0 {
		t.Logf("%d conflicts with a holder whose lease had lapsed (not violations)", k.lapsed)
	}
}
