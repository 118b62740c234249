package clerk_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/lock"
	"github.com/plumeria-fs/plumeria/lock/clerk"
	"github.com/plumeria-fs/plumeria/lock/server"
)

// testCtx bounds a test so that a liveness bug fails it with a message
// instead of hanging; it is never used to assert timing.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestDefaultsMatchServer(t *testing.T) {
	if clerk.TickDefault != server.TickDefault || clerk.LeaseTicksDefault != server.LeaseTicksDefault {
		t.Fatal("clerk and server defaults for tick and lease differ")
	}
}

func TestConfigErrors(t *testing.T) {
	mc := server.NewMemCoordinator(4)
	for name, cfg := range map[string]clerk.Config{
		"no resolver": {ID: "a", Session: 1, Groups: 4},
		"no id":       {Servers: mc, Session: 1, Groups: 4},
		"not utf-8":   {Servers: mc, ID: "\xff", Session: 1, Groups: 4},
		"session 0":   {Servers: mc, ID: "a", Groups: 4},
		"no groups":   {Servers: mc, ID: "a", Session: 1},
		"margin":      {Servers: mc, ID: "a", Session: 1, Groups: 4, LeaseTicks: 30, LeaseMarginTicks: 10},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := clerk.New(cfg); !errors.Is(err, lock.ErrConfig) {
				t.Fatalf("err %v, want lock.ErrConfig", err)
			}
		})
	}
}

// TestBasic: grants, stickiness, a revoke that moves a lock, and the
// errors Acquire returns.
func TestBasic(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t, defaultOpts(), 1)
	k := newChecker()
	a, b := cl.startNode("a", "fs0", k), cl.startNode("b", "fs0", k)

	if err := a.use(ctx, 1, lock.Write); err != nil {
		t.Fatal(err)
	}
	if got := a.c.Holds("fs0", 1); got != lock.Write {
		t.Fatalf("a holds %v after a grant, want write (sticky)", got)
	}
	if err := b.use(ctx, 1, lock.Read); err != nil {
		t.Fatal(err)
	}
	if a.revokes.Load() == 0 {
		t.Fatal("b got the lock without a revoke at a")
	}
	if got := a.c.Holds("fs0", 1); got > lock.Read {
		t.Fatalf("a holds %v after b's read, want at most read", got)
	}
	if err := a.c.Acquire(ctx, "nope", 1, lock.Read); !errors.Is(err, lock.ErrNotOpen) {
		t.Fatalf("acquire in a closed table: %v", err)
	}
	if err := a.c.Acquire(ctx, "fs0", 1, lock.None); !errors.Is(err, lock.ErrBadMode) {
		t.Fatalf("acquire mode none: %v", err)
	}
	if err := a.c.Acquire(ctx, "fs0", lock.LogLock("b"), lock.Write); !errors.Is(err, lock.ErrReservedLock) {
		t.Fatalf("acquire another's log lock: %v", err)
	}
	short, cancel := context.WithCancel(ctx)
	cancel()
	if err := a.c.Acquire(short, "fs0", 2, lock.Write); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire with a cancelled ctx: %v", err)
	}
	k.check(t)
}

// workload runs workers per node doing ops random operations each on
// locks 0..locks-1; the hooks run one after the other, spread evenly over
// the operations (with two hooks: after a third and after two thirds).
func workload(ctx context.Context, t *testing.T, nodes []*node, workers, ops, locks int, hooks ...func()) {
	var wg sync.WaitGroup
	var done atomic.Int64
	total := int64(len(nodes) * workers * ops)
	hookAt := map[int64]func(){}
	for i, h := range hooks {
		hookAt[total*int64(i+1)/int64(len(hooks)+1)] = h
	}
	errs := make(chan error, len(nodes)*workers)
	for i, n := range nodes {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(i), uint64(w)))
				for range ops {
					l := uint64(rng.IntN(locks))
					mode := lock.Read
					if rng.IntN(10) < 4 {
						mode = lock.Write
					}
					if err := n.use(ctx, l, mode); err != nil {
						errs <- fmt.Errorf("%s: use lock %d %v: %w", n.id, l, mode, err)
						return
					}
					switch {
					case rng.IntN(10) == 0:
						n.release(l)
					case mode == lock.Write && rng.IntN(8) == 0:
						n.c.Downgrade(n.table, l) // keep it cached for reading
					}
					if h := hookAt[done.Add(1)]; h != nil {
						h() // the worker that reaches the mark runs it; the others go on
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func startNodes(cl *cluster, k *checker, n int) []*node {
	var nodes []*node
	for i := range n {
		nodes = append(nodes, cl.startNode(fmt.Sprintf("n%d", i), "fs0", k))
	}
	return nodes
}

// checkMoved asserts that locks were granted to several nodes and that
// revokes happened.
func checkMoved(t *testing.T, k *checker, nodes []*node) {
	t.Helper()
	var revokes int64
	for _, n := range nodes {
		revokes += n.revokes.Load()
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	moved := 0
	for _, by := range k.grants {
		if len(by) > 1 {
			moved++
		}
	}
	if revokes == 0 || moved == 0 {
		t.Fatalf("%d revokes, %d locks granted to more than one node: the workload did not contend", revokes, moved)
	}
	t.Logf("%d revokes; %d of %d locks moved between nodes", revokes, moved, len(k.grants))
}

// TestWorkload: 3 lock servers, 4 clerks, contended random operations;
// the checker sees every grant.
func TestWorkload(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t, defaultOpts(), 3)
	k := newChecker()
	nodes := startNodes(cl, k, 4)
	workload(ctx, t, nodes, 3, 150, 8)
	k.check(t)
	checkMoved(t, k, nodes)
}

// TestKillServer: a lock server crashes mid-workload and the coordinator
// moves its groups; the new owners rebuild them from the clerks and the
// workload goes on, safely.
func TestKillServer(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t, defaultOpts(), 3)
	k := newChecker()
	nodes := startNodes(cl, k, 4)
	killed := false
	workload(ctx, t, nodes, 3, 150, 8, func() {
		cl.killServer("s1")
		killed = true
	})
	if !killed {
		t.Fatal("server never killed")
	}
	for g := range cl.o.groups {
		if o := cl.mc.Owner(g); o == "s1" || o == "" {
			t.Fatalf("group %d owned by %q after s1 died", g, o)
		}
	}
	k.check(t)
	checkMoved(t, k, nodes)
}

// TestKillClerk: a clerk holding write locks and its log lock crashes.
// Other clerks wait for those locks; after its lease, the lock service
// fences it, a live clerk recovers its log exactly once, and only then are
// its locks granted.
func TestKillClerk(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t, defaultOpts(), 3)
	k := newChecker()
	nodes := startNodes(cl, k, 4)
	dead := nodes[3]
	deadSession := dead.c.Session()
	held := []uint64{0, 1, 2, lock.LogLock(dead.id)}
	for _, l := range held {
		if err := dead.use(ctx, l, lock.Write); err != nil {
			t.Fatal(err)
		}
	}
	dead.stop()

	var wg sync.WaitGroup
	for i, n := range nodes[:3] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := held[i]
			if err := n.use(ctx, l, lock.Write); err != nil {
				k.fail("%s: %v", n.id, err)
				return
			}
			if got := k.recoveriesOf(dead.id, deadSession, "fs0"); got != 1 {
				k.fail("%s granted lock %d of dead %s after %d recoveries, want 1", n.id, l, dead.id, got)
			}
		}()
	}
	wg.Wait()
	k.check(t)
	if f := cl.mc.Fenced(dead.id); f < deadSession {
		t.Fatalf("dead session %d not fenced (fence %d)", deadSession, f)
	}
	if reg := cl.mc.Registered(dead.id, deadSession); len(reg) != 0 {
		t.Fatalf("dead session still registered with %v", reg)
	}
	// A remount of the dead node gets its log lock back.
	again := cl.startNode(dead.id, "fs0", k)
	if err := again.use(ctx, lock.LogLock(dead.id), lock.Write); err != nil {
		t.Fatal(err)
	}
	if got := k.recoveriesOf(dead.id, deadSession, "fs0"); got != 1 {
		t.Fatalf("%d recoveries of %s/%d, want exactly 1", got, dead.id, deadSession)
	}
	k.check(t)
}

// TestServerChurn: lock servers die, join and restart mid-workload. A
// joining server takes groups from live ones (which must stop serving them
// first); a restarted one comes back under a new epoch at a new address.
func TestServerChurn(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t, defaultOpts(), 3)
	k := newChecker()
	nodes := startNodes(cl, k, 4)
	workload(ctx, t, nodes, 3, 200, 8,
		func() { cl.killServer("s0") },
		func() { cl.startServer("s3") },
		func() { cl.stopServer("s2"); cl.startServer("s2") }, // restart before the coordinator noticed
		func() { cl.killServer("s3") },
	)
	k.check(t)
	checkMoved(t, k, nodes)
	for g := range cl.o.groups {
		if o := cl.mc.Owner(g); o != "s1" && o != "s2" {
			t.Fatalf("group %d owned by %q; only s1 and s2 are alive", g, o)
		}
	}
}

// TestRecoveryHandoff: the clerk picked to recover a dead clerk's log dies
// before it finishes; the lock service hands the recovery to another live
// clerk, and the dead clerk's locks are granted only after it is done.
func TestRecoveryHandoff(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t, defaultOpts(), 2)
	k := newChecker()
	var first atomic.Pointer[node]
	picked := make(chan *node, 1)
	hooks := nodeHooks{onRecover: func(n *node, table, dead string, session uint64) error {
		if dead == "a" && first.CompareAndSwap(nil, n) {
			picked <- n
			<-n.stopped // dies in the middle of the replay
			return errors.New("node stopped")
		}
		return nil
	}}
	a := cl.startNode("a", "fs0", k)
	others := []*node{cl.startNodeWith("b", "fs0", k, hooks), cl.startNodeWith("c", "fs0", k, hooks),
		cl.startNodeWith("d", "fs0", k, hooks)}
	aSession := a.c.Session()
	if err := a.use(ctx, 1, lock.Write); err != nil {
		t.Fatal(err)
	}
	a.stop()

	var r *node
	select {
	case r = <-picked:
	case <-ctx.Done():
		t.Fatal("no recovery started")
	}
	r.stop()
	var wg sync.WaitGroup
	for _, n := range others {
		if n == r {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.use(ctx, 1, lock.Write); err != nil {
				k.fail("%s: %v", n.id, err)
				return
			}
			if got := k.recoveriesOf("a", aSession, "fs0"); got != 1 {
				k.fail("%s granted a's lock after %d finished recoveries of a, want 1", n.id, got)
			}
		}()
	}
	wg.Wait()
	k.check(t)
}

// TestLeaseLost: a clerk that cannot reach the owner of a group where it
// holds a lock loses its session once its lease runs out: OnLeaseLost
// runs, Holds reports nothing, Acquire fails with ErrLeaseLost.
func TestLeaseLost(t *testing.T) {
	ctx := testCtx(t)
	o := defaultOpts()
	o.leaseTicks = 60
	cl := newCluster(t, o, 1)
	k := newChecker()
	n := cl.startNodeWith("a", "fs0", k, nodeHooks{mayLoseLease: true})
	if err := n.use(ctx, 1, lock.Write); err != nil {
		t.Fatal(err)
	}
	cl.stopServer("s0") // not declared dead: no other server takes over
	err := n.c.Acquire(ctx, "fs0", 2, lock.Write)
	if !errors.Is(err, clerk.ErrLeaseLost) {
		t.Fatalf("acquire after the servers went away: %v, want ErrLeaseLost", err)
	}
	for !n.lost.Load() { // OnLeaseLost runs on a callback goroutine
		time.Sleep(time.Millisecond)
	}
	if got := n.c.Holds("fs0", 1); got != lock.None || !n.c.Lost() {
		t.Fatalf("after the lease was lost: holds %v, lost %v", got, n.c.Lost())
	}
	k.check(t)
}

// TestIdleRelease: a lock unused for IdleTicks goes back to the server
// through OnRevoke, unless pinned.
func TestIdleRelease(t *testing.T) {
	ctx := testCtx(t)
	o := defaultOpts()
	o.idleTicks = 20
	cl := newCluster(t, o, 1)
	k := newChecker()
	n := cl.startNode("a", "fs0", k)
	if err := n.c.Acquire(ctx, "fs0", 1, lock.Write); err != nil { // pinned: never idle
		t.Fatal(err)
	}
	if err := n.use(ctx, 2, lock.Write); err != nil {
		t.Fatal(err)
	}
	for n.c.Holds("fs0", 2) != lock.None {
		time.Sleep(time.Millisecond)
	}
	if n.revokes.Load() == 0 {
		t.Fatal("idle lock given back without OnRevoke")
	}
	if got := n.c.Holds("fs0", 1); got != lock.Write {
		t.Fatalf("pinned lock held %v after idleness, want write", got)
	}
	n.c.Unpin("fs0", 1, lock.Write)
	k.check(t)
}

// TestServerRestartSameAddress: a lock server restarts on its address
// (a new incarnation at a new epoch); clerks reconnect and the workload
// goes on.
func TestServerRestartSameAddress(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t, defaultOpts(), 2)
	k := newChecker()
	nodes := startNodes(cl, k, 3)
	workload(ctx, t, nodes, 2, 150, 6, func() { cl.restartServer("s1") })
	k.check(t)
	checkMoved(t, k, nodes)
}

// TestDowngrade: a voluntary downgrade keeps the lock cached for reading
// and lets another reader in without a revoke; a lock pinned in Write is
// not downgraded.
func TestDowngrade(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t, defaultOpts(), 1)
	k := newChecker()
	a, b := cl.startNode("a", "fs0", k), cl.startNode("b", "fs0", k)

	if err := a.c.Acquire(ctx, "fs0", 1, lock.Write); err != nil {
		t.Fatal(err)
	}
	a.c.Downgrade("fs0", 1) // pinned in Write: nothing happens
	if got := a.c.Holds("fs0", 1); got != lock.Write {
		t.Fatalf("pinned lock holds %v after Downgrade, want write", got)
	}
	a.c.Unpin("fs0", 1, lock.Write)
	a.c.Downgrade("fs0", 1)
	if got := a.c.Holds("fs0", 1); got != lock.Read {
		t.Fatalf("holds %v after Downgrade, want read", got)
	}
	a.c.Downgrade("fs0", 1) // already Read: no-op
	a.c.Downgrade("fs0", 9) // not held: no-op

	// a keeps reading from its cache; b reads too, and a is not asked to
	// flush (the server may revoke to Read before it sees the Downgrade;
	// the clerk answers that without the owner).
	if err := a.use(ctx, 1, lock.Read); err != nil {
		t.Fatal(err)
	}
	if err := b.use(ctx, 1, lock.Read); err != nil {
		t.Fatal(err)
	}
	if n := a.revokes.Load(); n != 0 {
		t.Fatalf("a flushed %d times for a reader after downgrading", n)
	}
	if got := a.c.Holds("fs0", 1); got != lock.Read {
		t.Fatalf("a holds %v with b reading, want read", got)
	}
	// An upgrade afterwards revokes b.
	if err := a.use(ctx, 1, lock.Write); err != nil {
		t.Fatal(err)
	}
	if b.revokes.Load() == 0 || b.c.Holds("fs0", 1) != lock.None {
		t.Fatalf("b not revoked by a's upgrade (holds %v)", b.c.Holds("fs0", 1))
	}
	k.check(t)
}

// TestClerkMetrics: the clerk's series are registered with its label and
// count what happened.
func TestClerkMetrics(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t, defaultOpts(), 1)
	k := newChecker()
	a, b := cl.startNode("a", "fs0", k), cl.startNode("b", "fs0", k)
	if err := a.use(ctx, 1, lock.Write); err != nil {
		t.Fatal(err)
	}
	a.c.Downgrade("fs0", 1)
	if err := b.use(ctx, 1, lock.Write); err != nil { // revokes a
		t.Fatal(err)
	}
	for a.c.Holds("fs0", 1) != lock.None {
		time.Sleep(time.Millisecond)
	}
	got := map[string]float64{} // of clerk a
	fams, err := cl.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			isA := false
			for _, l := range m.GetLabel() {
				isA = isA || (l.GetName() == "clerk" && l.GetValue() == "a")
			}
			switch {
			case !isA:
			case m.GetHistogram() != nil:
				got[f.GetName()] = float64(m.GetHistogram().GetSampleCount())
			case m.GetCounter() != nil:
				got[f.GetName()] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				got[f.GetName()] = m.GetGauge().GetValue()
			}
		}
	}
	want := map[string]float64{
		"plumeria_lock_clerk_requests_total":       1,
		"plumeria_lock_clerk_grants_total":         1,
		"plumeria_lock_clerk_revokes_total":        1,
		"plumeria_lock_clerk_downgrades_total":     1,
		"plumeria_lock_clerk_acquire_wait_seconds": 1,
		"plumeria_lock_clerk_locks_held":           0,
	}
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, v)
		}
	}
	for _, name := range []string{"plumeria_lock_clerk_lease_renewals_total", "plumeria_lock_clerk_recoveries_total",
		"plumeria_lock_clerk_recoveries_done_total", "plumeria_lock_clerk_idle_releases_total"} {
		if _, ok := got[name]; !ok {
			t.Errorf("no series %s for clerk a", name)
		}
	}
	if got["plumeria_lock_clerk_lease_renewals_total"] == 0 {
		t.Error("no lease renewal counted")
	}
	k.check(t)
}
