package repl

// A seeded simulator of the primary/backup protocol: several bricks, each
// with a Core and a model store, a coordinator that runs the real map
// rules (clustermap.Reconcile, MarkSyncing, MarkSynced, the installed
// epoch and leases), clients that write and read, and a network that
// delays, reorders and loses messages. Faults: brick crashes (the Core is
// rebuilt from the store, as NewCore is at a start), bricks cut off from
// the coordinator (their lease runs out, they are declared dead), bricks
// cut off from their peers, full disks. The I/O flows (write, read,
// replicate, reconcile, backfill, fault reports) follow brick/serve.go,
// peer.go, reconcile.go and backfill.go step by step, with the same locks:
// a PG lock per brick held by a primary across its whole replicated write,
// and a map install that waits for the client requests in flight.
//
// The checker (simCheck) asserts after every event:
//   - durability: every acknowledged write is held (its seq or a newer
//     one) by every in-sync member of its PG in the coordinator's map;
//   - agreement: whenever a primary serves a request of a PG (past
//     Core.Serve, with the PG's lock held), every in-sync member of the PG
//     in its serving map holds exactly what the primary holds;
//   - reads: a read returns at least the newest write acknowledged before
//     it started, and never less than a read that ended before it started;
//
// and at the end of a calm phase: no member is left syncing, and the
// members of every PG agree.
//
// Besides writes and reads, clients ask a primary to swap a key's entry,
// as the erasure coder swaps a block's put for a ref (brick/ref.go
// swapToRefs): it reads the entry without a lock, then later, admitted
// as a write holding the key, replaces it by an entry with the same
// content and a new seq if its seq is unchanged. Every entry carries the
// seq of the write whose content it holds (origin), and the durability
// and read checks hold on origins too: a swap never brings back content
// older than an acknowledged write.

import (
	"cmp"
	"container/heap"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/plumeria-fs/plumeria/clustermap"
)

const (
	ms            = int64(1e6)
	simLease      = 3000 * ms
	simDeadAfter  = 6000 * ms
	simHeartbeat  = 1000 * ms
	simReplWait   = 2000 * ms // replicateTimeout
	simClientWait = 4000 * ms
	simChunk      = 1 << 20
)

type simOpts struct {
	Bricks, Replicas, PGs, Keys, Clients int
	Duration, Calm                       int64 // faults for Duration, then Calm without
	Loss                                 float64
	Faults                               bool
	Swaps                                bool // clients also swap entries (coderSwap)
	Legacy                               struct{ SelfMiss, Reconcile, SwapAnySeq bool }
}

func defaultSimOpts() simOpts {
	return simOpts{Bricks: 4, Replicas: 3, PGs: 2, Keys: 8, Clients: 5, Duration: 40000 * ms, Calm: 30000 * ms, Loss: 0.02, Faults: true, Swaps: true}
}

type simEvent struct {
	at, n int64
	fn    func()
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	return cmp.Or(cmp.Compare(q[i].at, q[j].at), cmp.Compare(q[i].n, q[j].n)) < 0
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type simWorld struct {
	opts    simOpts
	rng     *rand.Rand
	now     int64
	n       int64
	q       simQueue
	coord   *simCoord
	bricks  []*simBrick
	clients []*simClient
	check   simCheck
	trace   []string
	err     error
	stats   map[string]int
	nextVal uint64
}

func (w *simWorld) at(delay int64, fn func()) {
	w.n++
	heap.Push(&w.q, simEvent{at: w.now + delay, n: w.n, fn: fn})
}

func (w *simWorld) logf(format string, args ...any) {
	if len(w.trace) >= 400 {
		w.trace = w.trace[1:]
	}
	w.trace = append(w.trace, fmt.Sprintf("%8.3fs ", float64(w.now)/1e9)+fmt.Sprintf(format, args...))
}

func (w *simWorld) fail(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("at %.3fs: %s", float64(w.now)/1e9, fmt.Sprintf(format, args...))
	}
}

func (w *simWorld) delay() int64 { return ms/2 + w.rng.Int64N(20*ms) }

// send delivers fn at to after a network delay, unless lost or a link is
// cut. from and to are brick names, "coord" or a client id.
func (w *simWorld) send(from, to string, fn func()) {
	if (w.now < w.opts.Duration && w.rng.Float64() < w.opts.Loss) || w.cut(from, to) {
		w.stats["lost"]++
		return
	}
	w.at(w.delay(), func() {
		if w.cut(from, to) {
			w.stats["lost"]++
			return
		}
		fn()
	})
}

func (w *simWorld) brick(name string) *simBrick {
	for _, b := range w.bricks {
		if b.name == name {
			return b
		}
	}
	return nil
}

func (w *simWorld) cut(from, to string) bool {
	for _, pair := range [][2]string{{from, to}, {to, from}} {
		if b := w.brick(pair[0]); b != nil {
			if pair[1] == "coord" && b.cutCoord {
				return true
			}
			if w.brick(pair[1]) != nil && b.cutPeers {
				return true
			}
		}
	}
	return false
}

// ---- coordinator ----

type simCoord struct {
	w      *simWorld
	m      *clustermap.Map
	seen   map[string]int64
	epochs map[string]uint64
}

func (c *simCoord) set(n *clustermap.Map, why string) {
	if n == nil {
		return
	}
	c.m = n
	c.w.logf("coord: epoch %d (%s): %s", n.Epoch, why, pgsString(n))
}

func pgsString(m *clustermap.Map) string {
	var parts []string
	for i, p := range m.Volumes[0].PGs {
		parts = append(parts, fmt.Sprintf("pg%d=%v sync%v since%d", i, p.Bricks, p.Syncing, p.Since))
	}
	return strings.Join(parts, " ")
}

func (c *simCoord) installed() uint64 {
	low := c.m.Epoch
	for _, b := range c.m.Bricks {
		if b.State != clustermap.BrickUp || c.w.now-c.seen[b.Name] > simLease {
			continue
		}
		low = min(low, c.epochs[b.Name])
	}
	return low
}

func (c *simCoord) tick() {
	alive := map[string]bool{}
	for _, b := range c.m.Bricks {
		if c.w.now-c.seen[b.Name] <= simDeadAfter {
			alive[b.Name] = true
		}
	}
	c.set(clustermap.Reconcile(c.m, alive), "reconcile")
	c.w.at(200*ms, c.tick)
}

// ---- bricks ----

// simEntry is a stored entry: its seq, and its content (val) with the
// seq of the write that made it (origin: seq itself but for a swap's).
type simEntry struct{ seq, val, origin uint64 }

// simLock is a brick's pgLock (brick/pglock.go) for one PG: whole-PG work
// takes it exclusively (key wholePG); requests take one key, exclusive
// for changes and shared for reads, with the PG shared. Entries are
// granted in ticket order among conflicting ones.
type simLock struct {
	ticket  int64
	entries []simLockEntry
}

type simLockEntry struct {
	ticket  int64
	key     int64
	excl    bool
	granted bool
	fn      func()
}

const (
	wholePG = -1 // the whole PG, exclusive
	noKey   = -2 // the PG shared, no key (a reconciliation check)
)

func (a simLockEntry) conflicts(b simLockEntry) bool {
	if a.key == wholePG || b.key == wholePG {
		return true
	}
	return a.key == b.key && (a.excl || b.excl)
}

type simBrick struct {
	w          *simWorld
	name       string
	up         bool
	inc        int
	core       *Core
	store      map[uint64]simEntry
	reserved   uint64 // the seq reservation on disk
	full       bool
	cutCoord   bool
	cutPeers   bool
	locks      map[PGKey]*simLock
	clientOps  int
	backfills  map[Backfill]bool
	reporting  map[PGKey]bool
	reconciles bool
}

func (b *simBrick) start() {
	b.up = true
	b.inc++
	var maxSeq uint64
	for _, e := range b.store {
		maxSeq = max(maxSeq, e.seq)
	}
	b.core = NewCore(b.name, maxSeq, b.reserved)
	b.core.legacy.selfMiss = b.w.opts.Legacy.SelfMiss
	b.core.legacy.reconcile = b.w.opts.Legacy.Reconcile
	b.locks = map[PGKey]*simLock{}
	b.backfills = map[Backfill]bool{}
	b.reporting = map[PGKey]bool{}
	b.clientOps, b.reconciles = 0, false
	b.fetch() // register
	b.every(simHeartbeat, b.heartbeat)
	b.every(50*ms, func() { b.core.Tick(b.w.now); b.drain() })
}

// guard runs fn only if the brick is still the incarnation that made it.
func (b *simBrick) guard(fn func()) func() {
	inc := b.inc
	return func() {
		if b.up && b.inc == inc {
			fn()
		}
	}
}

func (b *simBrick) every(d int64, fn func()) {
	var loop func()
	loop = b.guard(func() { fn(); b.w.at(d, loop) })
	b.w.at(b.w.rng.Int64N(d), loop)
}

// reply sends fn back to a brick (only to the incarnation that asked).
func (b *simBrick) callPeer(to string, req func(t *simBrick, reply func(func(me *simBrick))), timeout int64, onTimeout func()) {
	w := b.w
	done := false
	inc := b.inc
	w.send(b.name, to, func() {
		t := w.brick(to)
		if !t.up {
			return
		}
		req(t, func(fn func(me *simBrick)) {
			w.send(to, b.name, func() {
				if b.up && b.inc == inc && !done {
					done = true
					fn(b)
				}
			})
		})
	})
	w.at(timeout, func() {
		if b.up && b.inc == inc && !done {
			done = true
			onTimeout()
		}
	})
}

func (b *simBrick) heartbeat() {
	w, c := b.w, b.w.coord
	sent, serving := w.now, b.core.Serving().Epoch
	inc := b.inc
	w.send(b.name, "coord", func() {
		c.seen[b.name] = w.now
		c.epochs[b.name] = serving
		m, inst := c.m, c.installed()
		w.send("coord", b.name, func() {
			if b.up && b.inc == inc {
				b.core.SetLease(sent+simLease, inst)
				b.learn(m)
			}
		})
	})
}

// fetch brings the latest map up to the coordinator's (catchUpLatest): a
// synchronous call in the model, unless the brick is cut off from it.
func (b *simBrick) fetch() bool {
	if b.cutCoord {
		return false
	}
	b.learn(b.w.coord.m)
	return true
}

func (b *simBrick) learn(m *clustermap.Map) {
	if b.core.Learn(m) {
		b.maybeInstall()
	}
}

// maybeInstall switches the serving map once no client request runs under
// the old one (the installer's mapMu).
func (b *simBrick) maybeInstall() {
	if b.clientOps == 0 && b.core.Latest().Epoch > b.core.Serving().Epoch {
		b.core.Install(b.core.Latest())
		b.drain()
	}
}

func (b *simBrick) drain() {
	rd := b.core.Ready()
	b.core.Advance()
	for _, r := range rd.Reports {
		b.report(r)
	}
	if len(rd.Reconcile) > 0 {
		b.reconcileAll()
	}
	for _, f := range rd.Backfills {
		if !b.backfills[f] {
			b.backfills[f] = true
			b.backfill(f)
		}
	}
}

func (b *simBrick) lockOf(k PGKey) *simLock {
	l := b.locks[k]
	if l == nil {
		l = &simLock{}
		b.locks[k] = l
	}
	return l
}

// lock runs fn once the PG (key wholePG) or one of its keys is granted.
func (b *simBrick) lock(k PGKey, key int64, excl bool, fn func()) {
	l := b.lockOf(k)
	l.ticket++
	e := simLockEntry{ticket: l.ticket, key: key, excl: excl || key == wholePG, fn: b.guard(fn)}
	l.entries = append(l.entries, e)
	if l.grantable(len(l.entries) - 1) {
		l.entries[len(l.entries)-1].granted = true
		fn()
	}
}

func (l *simLock) grantable(i int) bool {
	for _, o := range l.entries[:i] {
		if o.conflicts(l.entries[i]) {
			return false
		}
	}
	return true
}

// unlock releases a granted entry of key (and mode) and grants the
// waiters it held back.
func (b *simBrick) unlock(k PGKey, key int64, excl bool) {
	l := b.lockOf(k)
	excl = excl || key == wholePG
	for i, e := range l.entries {
		if e.granted && e.key == key && e.excl == excl {
			l.entries = append(l.entries[:i], l.entries[i+1:]...)
			break
		}
	}
	for i := range l.entries {
		if !l.entries[i].granted && l.grantable(i) {
			l.entries[i].granted = true
			b.w.at(0, l.entries[i].fn)
		}
	}
}

// inFlight lists the keys of PG k that changes hold here.
func (b *simBrick) inFlight(k PGKey) map[uint64]bool {
	out := map[uint64]bool{}
	for _, e := range b.lockOf(k).entries {
		if e.granted && e.excl && e.key >= 0 {
			out[uint64(e.key)] = true
		}
	}
	return out
}

func pgOfKey(m *clustermap.Map, key uint64) PGKey {
	v := &m.Volumes[0]
	if key < uint64(len(simKeyPGs)) && simKeyPGs[key].ok && simKeyPGs[key].n == len(v.PGs) {
		return PGKey{v.ID, simKeyPGs[key].pg}
	}
	return PGKey{v.ID, v.PGOf(key * simChunk)}
}

type simKeyPG struct {
	pg uint32
	n  int
	ok bool
}

var simKeyPGs []simKeyPG

func initKeyPGs(m *clustermap.Map, keys int) {
	v := &m.Volumes[0]
	simKeyPGs = make([]simKeyPG, keys)
	for k := range simKeyPGs {
		simKeyPGs[k] = simKeyPG{v.PGOf(uint64(k) * simChunk), len(v.PGs), true}
	}
}

func (b *simBrick) entries(m *clustermap.Map, k PGKey) map[uint64]simEntry {
	out := map[uint64]simEntry{}
	for key, e := range b.store {
		if pgOfKey(m, key) == k {
			out[key] = e
		}
	}
	return out
}

// begin runs fn under the serving map once it knows the request's epoch and
// the PG's last change, with the request counted against map installs
// (Server.begin); it answers err if that cannot happen in time.
func (b *simBrick) begin(epoch uint64, key uint64, fn func(m *clustermap.Map), fail func(error)) {
	deadline := b.w.now + 2000*ms
	var try func()
	try = b.guard(func() {
		if epoch > b.core.Latest().Epoch && !b.fetch() {
			fail(refuse(NoLease, "cannot fetch map %d", epoch))
			return
		}
		at := b.core.ServeEpoch(pgOfKey(b.core.Latest(), key), epoch)
		if b.core.Serving().Epoch < at || b.core.Serving().Epoch < b.core.Latest().Epoch {
			if b.w.now > deadline {
				fail(refuse(HandOff, "map %d not installed", at))
				return
			}
			b.maybeInstall()
			b.w.at(ms, try)
			return
		}
		b.clientOps++
		fn(b.core.Serving())
	})
	try()
}

func (b *simBrick) done() {
	b.clientOps--
	b.maybeInstall()
}

var errUnknown = refuse(Unreconciled, "no answer")

type simResult struct {
	seq, val, origin uint64
	err              error
}

// admit is Server.admit: the core's checks, a reconciliation if the lead
// is new, the PG's lock, Core.Serve; then fn with the lock held.
func (b *simBrick) admit(m *clustermap.Map, k PGKey, r Request, key int64, excl bool, fn func(), fail func(error)) {
	need, err := b.core.Admit(m, r)
	if err != nil {
		fail(err)
		return
	}
	then := func() {
		b.lock(k, key, excl, func() {
			if err := b.core.Serve(m, k); err != nil {
				b.unlock(k, key, excl)
				b.drain()
				fail(err)
				return
			}
			b.w.check.serving(b, m, k)
			fn()
		})
	}
	if need {
		b.ensureReconciled(m, k, then, fail)
		return
	}
	then()
}

func (b *simBrick) clientWrite(c string, epoch, key, val uint64, reply func(simResult)) {
	fail := func(err error) { reply(simResult{err: err}) }
	b.begin(epoch, key, func(m *clustermap.Map) {
		k := pgOfKey(m, key)
		failDone := func(err error) { b.done(); fail(err) }
		b.admit(m, k, Request{PG: k, Epoch: epoch, Writer: &Writer{ID: c, Epoch: 1}, Now: b.w.now}, int64(key), true, func() {
			seq, reserve, err := b.core.NextSeq(m.Epoch)
			if err != nil {
				b.unlock(k, int64(key), true)
				failDone(err)
				return
			}
			if reserve > 0 {
				b.reserved = max(b.reserved, reserve)
				b.core.Reserved(reserve)
			}
			p := m.Volumes[0].PGs[k.PG]
			b.w.logf("%s: write key %d seq %x val %d to %v", b.name, key, seq, val, p.Bricks)
			b.replicate(m, k, p, key, simEntry{seq, val, seq}, func(out Outcome, err error) {
				b.unlock(k, int64(key), true)
				b.drain()
				b.done()
				if err == nil && !out.OK {
					err = refuse(Faulty, "not acknowledged (retry %v)", out.Retry)
				}
				reply(simResult{seq: seq, val: val, err: err})
			})
		}, failDone)
	}, fail)
}

// coderSwap is Server.swapToRefs of one key: read its entry now without a
// lock (the coder's read), then after a while, under the serving map,
// admitted as a write by the coder's writer holding the key, replace it
// by one with the same content and a new seq through replicate, if its
// seq is unchanged (with Legacy.SwapAnySeq: regardless). It answers the
// new seq, or seq 0 if nothing was swapped.
func (b *simBrick) coderSwap(epoch, key uint64, reply func(simResult)) {
	read, ok := b.store[key]
	if !ok {
		reply(simResult{})
		return
	}
	fail := func(err error) { reply(simResult{err: err}) }
	b.w.at(b.w.rng.Int64N(50*ms), b.guard(func() {
		b.begin(epoch, key, func(m *clustermap.Map) {
			k := pgOfKey(m, key)
			failDone := func(err error) { b.done(); fail(err) }
			b.admit(m, k, Request{PG: k, Epoch: epoch, Writer: &Writer{ID: "plumeria.ec", Epoch: 1}, Now: b.w.now}, int64(key), true, func() {
				finish := func(r simResult) {
					b.unlock(k, int64(key), true)
					b.drain()
					b.done()
					reply(r)
				}
				if cur := b.store[key]; cur.seq != read.seq && !b.w.opts.Legacy.SwapAnySeq {
					finish(simResult{}) // changed since the read: left alone
					return
				}
				seq, reserve, err := b.core.NextSeq(m.Epoch)
				if err != nil {
					finish(simResult{err: err})
					return
				}
				if reserve > 0 {
					b.reserved = max(b.reserved, reserve)
					b.core.Reserved(reserve)
				}
				p := m.Volumes[0].PGs[k.PG]
				b.w.logf("%s: swap key %d seq %x (read %x, origin %x) to %v", b.name, key, seq, read.seq, read.origin, p.Bricks)
				b.replicate(m, k, p, key, simEntry{seq, read.val, read.origin}, func(out Outcome, err error) {
					if err == nil && !out.OK {
						err = refuse(Faulty, "not acknowledged (retry %v)", out.Retry)
					}
					finish(simResult{seq: seq, err: err})
				})
			}, failDone)
		}, fail)
	}))
}

// replicate applies the op here and at every other member, and decides
// (Server.replicate).
func (b *simBrick) replicate(m *clustermap.Map, k PGKey, p clustermap.PG, key uint64, e simEntry, done func(Outcome, error)) {
	var r Replies
	waiting := len(p.Bricks)
	// finish records a member's answer: nil applied, errUnknown no answer.
	finish := func(brick string, err error) {
		switch {
		case err == nil:
			r.Applied = append(r.Applied, brick)
		case err == errUnknown:
			r.Unknown = append(r.Unknown, brick)
		default:
			r.Refused = append(r.Refused, brick)
		}
		if waiting--; waiting == 0 {
			slices.Sort(r.Applied)
			slices.Sort(r.Refused)
			slices.Sort(r.Unknown)
			out := b.core.Replicated(k, p.Since, r, p.Syncing)
			if len(r.Refused)+len(r.Unknown) > 0 {
				b.w.logf("%s: pg %d seq %x applied %v refused %v unknown %v: missed %v ok %v (since %d, faults now %v)", b.name, k.PG, e.seq, r.Applied, r.Refused, r.Unknown, out.Missed, out.OK, p.Since, b.core.Faults(k))
			}
			var err error
			if slices.Contains(r.Refused, b.name) {
				err = refuse(Faulty, "local apply failed")
			}
			done(out, err)
		}
	}
	// The local apply runs beside the replication.
	b.w.at(b.w.rng.Int64N(2*ms), b.guard(func() {
		if b.full {
			finish(b.name, refuse(Faulty, "full"))
			return
		}
		b.store[key] = e
		finish(b.name, nil)
	}))
	for _, t := range p.Bricks {
		if t == b.name {
			continue
		}
		b.callPeer(t, func(tb *simBrick, reply func(func(*simBrick))) {
			tb.applyReplicate(m.Epoch, k, b.name, key, e, func(err error) {
				reply(func(*simBrick) { finish(t, err) })
			})
		}, simReplWait, func() { finish(t, errUnknown) })
	}
}

// applyReplicate is Server.Replicate at a backup: membership checked
// before and again under the PG's lock.
func (b *simBrick) applyReplicate(epoch uint64, k PGKey, primary string, key uint64, e simEntry, reply func(error)) {
	if epoch > b.core.Latest().Epoch {
		b.fetch()
	}
	if err := b.core.CheckMember(k.Vol, k.PG, primary, epoch); err != nil {
		reply(err)
		return
	}
	b.lock(k, int64(key), true, func() {
		defer b.unlock(k, int64(key), true)
		if err := b.core.CheckMember(k.Vol, k.PG, primary, epoch); err != nil {
			reply(err)
			return
		}
		old, ok := b.store[key]
		if !ShouldApply(Existing{Present: ok, Seq: old.seq}, e.seq, 0) {
			reply(nil)
			return
		}
		if b.full {
			reply(refuse(Faulty, "full"))
			return
		}
		b.store[key] = e
		reply(nil)
	})
}

func (b *simBrick) clientRead(epoch, key uint64, reply func(simResult)) {
	fail := func(err error) { reply(simResult{err: err}) }
	b.begin(epoch, key, func(m *clustermap.Map) {
		k := pgOfKey(m, key)
		b.admit(m, k, Request{PG: k, Epoch: epoch, Now: b.w.now}, int64(key), false, func() {
			e := b.store[key]
			b.unlock(k, int64(key), false)
			b.done()
			reply(simResult{seq: e.seq, val: e.val, origin: e.origin})
		}, func(err error) { b.done(); fail(err) })
	}, fail)
}

// ensureReconciled is Server.ensureReconciled: under the PG's lock, make
// every other in-sync member hold what this brick holds.
func (b *simBrick) ensureReconciled(m *clustermap.Map, k PGKey, then func(), fail func(error)) {
	b.lock(k, wholePG, true, func() {
		lead, need := b.core.NeedsReconcile(k)
		if !need {
			b.unlock(k, wholePG, true)
			then()
			return
		}
		p := m.Volumes[0].PGs[k.PG]
		horizon := b.core.Horizon(k)
		var missed []string
		var members []string
		for _, t := range p.InSync() {
			if t != b.name {
				members = append(members, t)
			}
		}
		var next func(i int)
		next = func(i int) {
			if i == len(members) {
				b.core.Reconciled(k, lead, p.Since, missed)
				b.w.logf("%s: reconciled pg %d for lead %d, missed %v", b.name, k.PG, lead, missed)
				b.unlock(k, wholePG, true)
				b.drain()
				then()
				return
			}
			b.push(m, k, members[i], horizon, func(err error) {
				if err != nil {
					missed = append(missed, members[i])
				}
				next(i + 1)
			})
		}
		next(0)
	})
}

// push sends target the difference between its copy of PG k and this
// brick's (inventory, then one backfill batch under horizon). The caller
// holds the PG's lock.
func (b *simBrick) push(m *clustermap.Map, k PGKey, target string, horizon uint64, done func(error)) {
	epoch := m.Epoch
	b.callPeer(target, func(t *simBrick, reply func(func(*simBrick))) {
		t.inventory(epoch, k, func(theirs map[uint64]simEntry, err error) {
			reply(func(*simBrick) {
				if err != nil {
					done(err)
					return
				}
				mine := b.entries(m, k)
				var ops []simOp
				for key, e := range mine {
					if te, ok := theirs[key]; !ok || te.seq != e.seq {
						ops = append(ops, simOp{key: key, e: e})
					}
				}
				for key, te := range theirs {
					if _, ok := mine[key]; !ok {
						ops = append(ops, simOp{key: key, e: te, remove: true})
					}
				}
				slices.SortFunc(ops, func(a, b simOp) int { return cmp.Compare(a.key, b.key) })
				if len(ops) == 0 {
					done(nil)
					return
				}
				primary := b.name
				b.callPeer(target, func(t *simBrick, reply func(func(*simBrick))) {
					t.applyBackfill(epoch, k, primary, ops, horizon, func(err error) { reply(func(*simBrick) { done(err) }) })
				}, simReplWait, func() { done(refuse(Unreconciled, "backfill timed out")) })
			})
		})
	}, simReplWait, func() { done(refuse(Unreconciled, "inventory timed out")) })
}

type simOp struct {
	key    uint64
	e      simEntry
	remove bool
}

// inventory is Server.Inventory (no membership check, as there).
func (b *simBrick) inventory(epoch uint64, k PGKey, reply func(map[uint64]simEntry, error)) {
	if epoch > b.core.Latest().Epoch && !b.fetch() {
		reply(nil, refuse(NoLease, "cannot fetch map"))
		return
	}
	b.lock(k, wholePG, true, func() {
		out := b.entries(b.core.Latest(), k)
		b.unlock(k, wholePG, true)
		reply(out, nil)
	})
}

// applyBackfill is Server.Backfill.
func (b *simBrick) applyBackfill(epoch uint64, k PGKey, primary string, ops []simOp, horizon uint64, reply func(error)) {
	if epoch > b.core.Latest().Epoch {
		b.fetch()
	}
	if err := b.core.CheckMember(k.Vol, k.PG, primary, epoch); err != nil {
		reply(err)
		return
	}
	b.lock(k, wholePG, true, func() {
		defer b.unlock(k, wholePG, true)
		if err := b.core.CheckMember(k.Vol, k.PG, primary, epoch); err != nil {
			reply(err)
			return
		}
		if b.full {
			reply(refuse(Faulty, "full"))
			return
		}
		for _, op := range ops {
			old, ok := b.store[op.key]
			ex := Existing{Present: ok, Seq: old.seq}
			switch {
			case op.remove && ShouldRemoveInBackfill(ex, horizon):
				delete(b.store, op.key)
			case !op.remove && ShouldApply(ex, op.e.seq, horizon):
				b.store[op.key] = op.e
			}
		}
		reply(nil)
	})
}

// reconcileAll is the reconcile loop: every PG this brick leads and has
// not reconciled, under the serving map.
func (b *simBrick) reconcileAll() {
	if b.reconciles {
		return
	}
	b.reconciles = true
	m := b.core.Serving()
	var todo []PGKey
	for i, p := range m.Volumes[0].PGs {
		k := PGKey{m.Volumes[0].ID, uint32(i)}
		if _, need := b.core.NeedsReconcile(k); need && p.Primary() == b.name {
			todo = append(todo, k)
		}
	}
	var next func(i int)
	next = func(i int) {
		if i == len(todo) {
			b.reconciles = false
			return
		}
		b.begin(m.Epoch, 0, func(sm *clustermap.Map) {
			b.admit(sm, todo[i], Request{PG: todo[i], Epoch: sm.Epoch, Now: b.w.now}, noKey, false, func() {
				b.unlock(todo[i], noKey, false)
				b.done()
				next(i + 1)
			}, func(error) { b.done(); next(i + 1) })
		}, func(error) { next(i + 1) })
	}
	next(0)
}

// backfill is Server.backfillLoop for one syncing member.
func (b *simBrick) backfill(f Backfill) {
	w := b.w
	retry := func() {
		w.at(1000*ms, b.guard(func() { b.backfill(f) }))
	}
	needed := func() (*clustermap.Map, bool) {
		m := b.core.Serving()
		p := m.Volumes[0].PGs[f.PG.PG]
		return m, p.Primary() == b.name && slices.Contains(p.Syncing, f.Target)
	}
	m, ok := needed()
	if !ok {
		delete(b.backfills, f)
		return
	}
	since := m.Volumes[0].PGs[f.PG.PG].Since
	b.lock(f.PG, wholePG, true, func() {
		m, ok := needed()
		if !ok {
			b.unlock(f.PG, wholePG, true)
			delete(b.backfills, f)
			return
		}
		horizon := b.core.Horizon(f.PG)
		b.push(m, f.PG, f.Target, horizon, func(err error) {
			b.unlock(f.PG, wholePG, true)
			if err != nil {
				retry()
				return
			}
			inc := b.inc
			w.send(b.name, "coord", func() {
				c := w.coord
				n := clustermap.MarkSynced(c.m, f.PG.Vol, f.PG.PG, f.Target, b.name, since)
				c.set(n, fmt.Sprintf("%s synced by %s since %d", f.Target, b.name, since))
				w.send("coord", b.name, func() {
					if !b.up || b.inc != inc {
						return
					}
					if n == nil {
						retry() // membership changed: a new pass
						return
					}
					delete(b.backfills, f)
					b.fetch()
				})
			})
			w.at(3000*ms, b.guard(func() {
				if b.backfills[f] {
					b.backfill(f) // the report or its answer was lost
				}
			}))
		})
	})
}

// report asks the coordinator to mark members syncing, in order.
func (b *simBrick) report(r Report) {
	if b.reporting[r.PG] {
		return
	}
	b.reporting[r.PG] = true
	w := b.w
	inc := b.inc
	var next func(i int)
	next = func(i int) {
		if i == len(r.Bricks) {
			delete(b.reporting, r.PG)
			return
		}
		ok := false
		w.send(b.name, "coord", func() {
			c := w.coord
			n, _ := clustermap.MarkSyncing(c.m, r.PG.Vol, r.PG.PG, r.Bricks[i], b.name)
			c.set(n, fmt.Sprintf("%s reports %s", b.name, r.Bricks[i]))
			w.send("coord", b.name, func() {
				if b.up && b.inc == inc {
					ok = true
					next(i + 1)
				}
			})
		})
		w.at(1000*ms, func() {
			if b.up && b.inc == inc && !ok {
				delete(b.reporting, r.PG)
			}
		})
	}
	next(0)
}

// ---- clients ----

type simClient struct {
	w  *simWorld
	id string
	m  *clustermap.Map
}

func (c *simClient) run() {
	w := c.w
	if w.now > w.opts.Duration+w.opts.Calm-5000*ms {
		return
	}
	key := uint64(w.rng.IntN(w.opts.Keys))
	k := pgOfKey(c.m, key)
	primary := w.brick(c.m.Volumes[0].PGs[k.PG].Primary())
	kind := w.rng.IntN(10)
	write := kind < 6
	swap := w.opts.Swaps && kind == 9
	start := w.now
	answered := false
	finish := func(r simResult) {
		if answered {
			return
		}
		answered = true
		if r.err != nil {
			w.stats["client errors"]++
			c.m = w.coord.m // refresh the map
			w.at(5*ms+w.rng.Int64N(20*ms), c.run)
			return
		}
		switch {
		case swap && r.seq != 0:
			w.stats["swaps"]++
		case swap:
			w.stats["swaps skipped"]++
		case write:
			w.stats["acked writes"]++
			w.check.acked(key, r.seq, w.now)
		default:
			w.stats["reads"]++
			w.check.read(key, r.origin, start, w.now)
		}
		w.at(w.rng.Int64N(10*ms), c.run)
	}
	epoch := c.m.Epoch
	val := w.nextVal + 1
	w.nextVal++
	if primary != nil {
		w.send(c.id, primary.name, func() {
			if !primary.up {
				return
			}
			back := func(r simResult) { w.send(primary.name, c.id, func() { finish(r) }) }
			switch {
			case swap:
				primary.coderSwap(epoch, key, back)
			case write:
				primary.clientWrite(c.id, epoch, key, val, back)
			default:
				primary.clientRead(epoch, key, back)
			}
		})
	}
	w.at(simClientWait, func() { finish(simResult{err: refuse(NoLease, "timeout")}) })
}

// ---- checker ----

type simCheck struct {
	w        *simWorld
	inSyncOf *clustermap.Map    // the map inSync was computed for
	inSync   [][]string         // per PG: its in-sync members in inSyncOf
	acks     map[uint64][]simAt // key → acknowledged seqs
	reads    map[uint64][]simAt // key → seqs reads returned, at their end
}

type simAt struct {
	seq uint64
	at  int64
}

// acked and read keep, per key, the running maximum of the seqs, in time
// order: maxBefore is a binary search.
func (k *simCheck) acked(key, seq uint64, at int64) {
	k.acks[key] = appendMax(k.acks[key], seq, at)
}

func appendMax(list []simAt, seq uint64, at int64) []simAt {
	if n := len(list); n > 0 {
		seq = max(seq, list[n-1].seq)
	}
	return append(list, simAt{seq, at})
}

func maxBefore(list []simAt, t int64) uint64 {
	i, _ := slices.BinarySearchFunc(list, t, func(a simAt, t int64) int { return cmp.Compare(a.at, t) })
	if i == 0 {
		return 0
	}
	return list[i-1].seq
}

// read checks a read of key that returned the content of the write of
// seq (its entry's origin).
func (k *simCheck) read(key, seq uint64, start, end int64) {
	if want := maxBefore(k.acks[key], start); seq < want {
		k.w.fail("read of key %d returned seq %x, older than the write acknowledged before it started (%x)", key, seq, want)
	}
	if want := maxBefore(k.reads[key], start); seq < want {
		k.w.fail("read of key %d returned seq %x, older than a read that ended before it started (%x)", key, seq, want)
	}
	k.reads[key] = appendMax(k.reads[key], seq, end)
}

// serving: brick b serves a request of PG k under map m.
func (k *simCheck) serving(b *simBrick, m *clustermap.Map, pg PGKey) {
	busy := b.inFlight(pg)
	mine := b.entries(m, pg)
	maps.DeleteFunc(mine, func(key uint64, _ simEntry) bool { return busy[key] })
	for _, t := range m.Volumes[0].PGs[pg.PG].InSync() {
		if t == b.name {
			continue
		}
		theirs := k.w.brick(t).entries(m, pg)
		maps.DeleteFunc(theirs, func(key uint64, _ simEntry) bool { return busy[key] })
		if !maps.Equal(mine, theirs) {
			k.w.fail("primary %s serves pg %d at epoch %d while in-sync member %s differs: %v vs %v", b.name, pg.PG, m.Epoch, t, mine, theirs)
		}
	}
}

// after checks durability after every event.
func (k *simCheck) after() {
	m := k.w.coord.m
	if k.inSyncOf != m {
		k.inSyncOf, k.inSync = m, k.inSync[:0]
		for _, p := range m.Volumes[0].PGs {
			k.inSync = append(k.inSync, p.InSync())
		}
	}
	for key, acks := range k.acks {
		want := acks[len(acks)-1].seq
		pg := pgOfKey(m, key)
		for _, t := range k.inSync[pg.PG] {
			got := k.w.brick(t).store[key]
			if got.seq < want {
				k.w.fail("in-sync member %s of pg %d holds seq %x of key %d, below the acknowledged %x", t, pg.PG, got.seq, key, want)
			}
			if got.origin < want {
				k.w.fail("in-sync member %s of pg %d holds key %d at seq %x with the content of write %x, older than the acknowledged %x", t, pg.PG, key, got.seq, got.origin, want)
			}
		}
	}
}

// final checks, after the calm phase, that every PG is fully in sync and
// its members agree.
func (k *simCheck) final() {
	m := k.w.coord.m
	for i, p := range m.Volumes[0].PGs {
		pg := PGKey{m.Volumes[0].ID, uint32(i)}
		if len(p.Syncing) > 0 || len(p.Bricks) < k.w.opts.Replicas {
			k.w.fail("after the calm phase pg %d has members %v, syncing %v", i, p.Bricks, p.Syncing)
		}
		first := k.w.brick(p.Bricks[0]).entries(m, pg)
		for _, t := range p.Bricks[1:] {
			if theirs := k.w.brick(t).entries(m, pg); !maps.Equal(first, theirs) {
				k.w.fail("after the calm phase pg %d: %s and %s differ: %v vs %v", i, p.Bricks[0], t, first, theirs)
			}
		}
	}
}

// ---- faults ----

func (w *simWorld) faults() {
	if w.now >= w.opts.Duration {
		for _, b := range w.bricks {
			b.full, b.cutCoord, b.cutPeers = false, false, false
			if !b.up {
				b.start()
			}
		}
		return
	}
	w.at(300*ms+w.rng.Int64N(700*ms), w.faults)
	active := 0
	for _, b := range w.bricks {
		if !b.up || b.full || b.cutCoord || b.cutPeers {
			active++
		}
	}
	if active >= 2 {
		return
	}
	b := w.bricks[w.rng.IntN(len(w.bricks))]
	if !b.up || b.full || b.cutCoord || b.cutPeers {
		return
	}
	heal := func(d int64, fn func()) { w.at(d, fn) }
	switch w.rng.IntN(4) {
	case 0:
		w.logf("fault: crash %s", b.name)
		w.stats["crashes"]++
		b.up = false
		heal(500*ms+w.rng.Int64N(8000*ms), func() { w.logf("heal: restart %s", b.name); b.start() })
	case 1:
		w.logf("fault: %s cut from the coordinator", b.name)
		w.stats["cut coordinator"]++
		b.cutCoord = true
		heal(1000*ms+w.rng.Int64N(10000*ms), func() { b.cutCoord = false })
	case 2:
		w.logf("fault: %s cut from its peers", b.name)
		w.stats["cut peers"]++
		b.cutPeers = true
		heal(200*ms+w.rng.Int64N(3000*ms), func() { b.cutPeers = false })
	case 3:
		w.logf("fault: %s disk full", b.name)
		w.stats["full"]++
		b.full = true
		heal(200*ms+w.rng.Int64N(3000*ms), func() { b.full = false })
	}
}

// ---- running ----

func newSimWorld(seed uint64, o simOpts) *simWorld {
	w := &simWorld{opts: o, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), stats: map[string]int{}}
	w.check = simCheck{w: w, acks: map[uint64][]simAt{}, reads: map[uint64][]simAt{}}
	m := &clustermap.Map{Epoch: 1}
	for i := range o.Bricks {
		m.PutBrick(clustermap.Brick{Name: fmt.Sprintf("b%d", i+1), Addr: "-", State: clustermap.BrickUp,
			Domain: map[string]string{clustermap.LevelHost: fmt.Sprintf("h%d", i+1)}})
	}
	m, err := clustermap.AddVolume(m, "v", o.Replicas, simChunk, o.PGs, false)
	if err != nil {
		panic(err)
	}
	initKeyPGs(m, o.Keys)
	w.coord = &simCoord{w: w, m: m, seen: map[string]int64{}, epochs: map[string]uint64{}}
	for _, b := range m.Bricks {
		w.bricks = append(w.bricks, &simBrick{w: w, name: b.Name, store: map[uint64]simEntry{}})
	}
	return w
}

func (w *simWorld) run() error {
	for _, b := range w.bricks {
		b.start()
		b.heartbeat()
	}
	w.at(0, w.coord.tick)
	w.at(simLease, func() { // let leases settle, then start
		for i := range w.opts.Clients {
			c := &simClient{w: w, id: fmt.Sprintf("c%d", i+1), m: w.coord.m}
			w.clients = append(w.clients, c)
			w.at(0, c.run)
		}
		if w.opts.Faults {
			w.at(0, w.faults)
		}
	})
	end := simLease + w.opts.Duration + w.opts.Calm
	for w.q.Len() > 0 && w.err == nil {
		e := heap.Pop(&w.q).(simEvent)
		if e.at > end {
			break
		}
		w.now = e.at
		e.fn()
		w.check.after()
	}
	if w.err == nil {
		w.check.final()
	}
	return w.err
}

func (w *simWorld) report(t *testing.T, seed uint64) {
	t.Helper()
	t.Errorf("seed %d: %v\nlast events:\n%s", seed, w.err, strings.Join(w.trace, "\n"))
}

var (
	simSeeds = flag.Int("sim.seeds", 0, "seeds of the replication simulator (0: the default for -short or not)")
	simSeed  = flag.Uint64("sim.seed", 0, "run the replication simulator with this seed only")
)

// TestSimulator runs the replication protocol under random faults, seed
// after seed (a few hundred in `make test`; -sim.seeds=N for a soak).
func TestSimulator(t *testing.T) {
	seeds := *simSeeds
	if seeds == 0 {
		seeds = 200
		if testing.Short() || raceEnabled {
			seeds = 40
		}
	}
	first := uint64(1)
	if *simSeed != 0 {
		first, seeds = *simSeed, 1
	}
	total := map[string]int{}
	for seed := first; seed < first+uint64(seeds); seed++ {
		w := newSimWorld(seed, defaultSimOpts())
		if err := w.run(); err != nil {
			w.report(t, seed)
			return
		}
		for k, v := range w.stats {
			total[k] += v
		}
	}
	t.Logf("%d seeds: %v", seeds, total)
	if total["acked writes"] == 0 || total["reads"] == 0 || total["crashes"] == 0 || total["swaps"] == 0 || total["swaps skipped"] == 0 {
		t.Fatalf("the simulator did no work: %v", total)
	}
}

// TestSimulatorFindsRevertedFixes: with either fix of a past divergence bug
// reverted, random runs find a violation.
func TestSimulatorFindsRevertedFixes(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(o *simOpts)
	}{
		{"primary missing a write its backups applied", func(o *simOpts) { o.Legacy.SelfMiss = true }},
		{"new primary serving without reconciling", func(o *simOpts) { o.Legacy.Reconcile = true }},
		{"coder swapping an entry changed since its read", func(o *simOpts) { o.Legacy.SwapAnySeq = true }},
	} {
		t.Run(c.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 200; seed++ {
				o := defaultSimOpts()
				c.set(&o)
				w := newSimWorld(seed, o)
				if err := w.run(); err != nil {
					t.Logf("seed %d finds it: %v", seed, err)
					return
				}
			}
			t.Fatal("200 seeds found no violation with the fix reverted")
		})
	}
}
