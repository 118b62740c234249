package locktest

import (
	"slices"
	"strconv"

	"github.com/plumeria-fs/plumeria/lock"
)

type serverNode struct {
	id    int
	s     *lock.Server // nil while down
	upAt  int64        // restart tick while down
	owned []int        // groups in the last assignment sent
	dirty bool         // stepped since its invariants were last checked
}

func (s *serverNode) lostGroups(next []int) bool {
	for _, g := range s.owned {
		if !slices.Contains(next, g) {
			return true
		}
	}
	return false
}

// clerkNode is an fs node: a clerk and a model owner that wishes for
// locks, flushes on demand, runs recoveries, and remounts when its lease
// is lost.
type clerkNode struct {
	id      string
	idx     int
	c       *lock.Clerk // nil while down
	session uint64
	upAt    int64 // remount tick while down or lost
	wishes  map[wishKey]lock.Mode
	todo    []todo // owner work due later, by time
}

type wishKey struct {
	table string
	lock  uint64
}

type todo struct {
	at  int64
	run func()
}

func (w *World) startServer(s *serverNode) {
	srv, err := lock.NewServer(lock.Config{Groups: w.opts.Groups, LeaseTicks: w.opts.LeaseTicks,
		RetryTicks: w.opts.RetryTicks, RebuildGraceTicks: w.opts.GraceTicks})
	if err != nil {
		panic(err)
	}
	s.s, s.upAt, s.owned = srv, 0, nil
	w.logf("server %d starts", s.id)
}

func (w *World) mount(n *clerkNode) {
	n.session = w.coord.mount(n.id, w.opts.Tables)
	c, err := lock.NewClerk(lock.ClerkConfig{ID: n.id, Session: n.session, Groups: w.opts.Groups,
		LeaseTicks: w.opts.LeaseTicks, LeaseMarginTicks: w.opts.MarginTicks,
		RetryTicks: w.opts.RetryTicks, IdleTicks: w.opts.IdleTicks})
	if err != nil {
		panic(err)
	}
	n.c, n.upAt, n.todo, n.wishes = c, 0, nil, map[wishKey]lock.Mode{}
	for _, t := range w.opts.Tables {
		if err := c.Open(t); err != nil {
			panic(err)
		}
		n.wishes[wishKey{t, lock.LogLock(n.id)}] = lock.Write // the fs node writes its log
	}
	w.check.sessions++
	w.logf("%s mounts session %d", n.id, n.session)
	w.drainClerk(n)
}

// end takes a node's session down: crash, lost lease, or clean unmount.
func (w *World) end(n *clerkNode, why string, clean bool, downFor int64) {
	if !clean {
		w.check.ended(n)
	}
	w.logf("%s session %d ends: %s", n.id, n.session, why)
	n.c, n.todo, n.wishes = nil, nil, nil
	n.upAt = w.now + downFor
}

func (w *World) unmount(n *clerkNode) {
	for _, t := range w.opts.Tables {
		n.c.Close(t)
	}
	w.drainClerk(n)
	// The coordinator fences the session; it stays registered until its
	// (clean) log is recovered, so servers that missed CloseTable free its
	// locks too.
	w.coord.fence(n.id, n.session)
	w.end(n, "unmount", true, w.between(5, 20))
}

// own runs the owner of n for one tick: due work, wishes, new wishes.
func (w *World) own(n *clerkNode) {
	if n.c == nil {
		return
	}
	for len(n.todo) > 0 && n.todo[0].at <= w.now && n.c != nil {
		t := n.todo[0]
		n.todo = n.todo[1:]
		t.run()
	}
	if n.c == nil || n.c.Lost() {
		return
	}
	for _, k := range sortedWishes(n.wishes) {
		if held, err := n.c.Acquire(k.table, k.lock, n.wishes[k]); err == nil && held {
			delete(n.wishes, k)
			w.check.granted++
		}
	}
	if !w.quiet && w.chance(w.opts.WishRate) {
		k := wishKey{w.opts.Tables[w.rng.IntN(len(w.opts.Tables))], uint64(w.rng.IntN(w.opts.Locks))}
		if _, ok := n.wishes[k]; !ok {
			mode := lock.Read
			if w.chance(0.4) {
				mode = lock.Write
			}
			n.wishes[k] = mode
			n.c.Acquire(k.table, k.lock, mode)
		}
	}
	if w.chance(0.02) {
		w.releaseSome(n)
	}
	w.drainClerk(n)
}

// releaseSome gives up a held lock voluntarily: it releases it, or, if it
// is held in Write, downgrades it to Read half the time. Either may come
// while a revoke of the lock is being flushed.
func (w *World) releaseSome(n *clerkNode) {
	var held []wishKey
	modes := map[wishKey]lock.Mode{}
	n.c.EachHeld(func(t string, l uint64, m lock.Mode) {
		held = append(held, wishKey{t, l})
		modes[wishKey{t, l}] = m
	})
	if len(held) == 0 {
		return
	}
	slices.SortFunc(held, cmpWish)
	k := held[w.rng.IntN(len(held))]
	if modes[k] == lock.Write && w.chance(0.5) {
		n.c.Downgrade(k.table, k.lock)
		w.check.downgrades++
		w.logf("%s downgrades %s/%d", n.id, k.table, k.lock)
		return
	}
	n.c.Release(k.table, k.lock)
}

func (w *World) later(n *clerkNode, delay int64, f func()) {
	t := todo{at: w.now + delay, run: f}
	i := len(n.todo)
	for i > 0 && n.todo[i-1].at > t.at {
		i--
	}
	n.todo = slices.Insert(n.todo, i, t)
}

// drainClerk routes the clerk's messages and hands its events to the owner.
func (w *World) drainClerk(n *clerkNode) {
	c := n.c
	rd := c.Ready()
	c.Advance(rd)
	for _, m := range rd.Messages {
		g, all := lock.Route(m, w.opts.Groups)
		for s := range w.servers {
			if all || w.coord.owner[g] == s {
				w.post(endpoint{false, n.idx}, endpoint{true, s}, m)
			}
		}
	}
	for _, e := range rd.Events {
		w.event(n, c, e)
	}
}

func (w *World) event(n *clerkNode, c *lock.Clerk, e lock.Event) {
	switch e := e.(type) {
	case lock.Flush:
		// Sometimes the owner downgrades on its own before it answers.
		down := w.chance(0.2)
		w.later(n, w.between(0, 3), func() {
			if down && c.Holds(e.Table, e.Lock) == lock.Write {
				c.Downgrade(e.Table, e.Lock)
				w.check.downgrades++
			}
			c.Flushed(e.Table, e.Lock, e.To)
		})
	case lock.RunRecovery:
		w.logf("%s recovers %s/%d in %s", n.id, e.Dead, e.Session, e.Table)
		w.later(n, w.between(1, 8), func() { w.finishRecovery(n, c, e) })
	case lock.LeaseLost:
		w.end(n, "lease lost: "+e.Reason, false, w.between(5, 30))
	case lock.Rejected:
		delete(n.wishes, wishKey{e.Table, e.Lock})
	}
}

// finishRecovery completes a replay, which the owner may only do while it
// holds the dead clerk's log lock under a valid lease; else it waits.
func (w *World) finishRecovery(n *clerkNode, c *lock.Clerk, e lock.RunRecovery) {
	switch {
	case c.Lost():
	case c.Holds(e.Table, lock.LogLock(e.Dead)) != lock.Write:
		w.later(n, 2, func() { w.finishRecovery(n, c, e) })
	default:
		w.check.recovered(e.Dead, e.Session, e.Table)
		c.RecoveryDone(e.Dead, e.Session, e.Table)
	}
}

func (w *World) drainServer(s *serverNode) {
	s.dirty = true
	rd := s.s.Ready()
	s.s.Advance(rd)
	for _, m := range rd.Messages {
		id, _ := lock.ClerkOf(m)
		i, err := strconv.Atoi(id[1:])
		if err != nil {
			panic(err)
		}
		w.post(endpoint{true, s.id}, endpoint{false, i}, m)
	}
	for _, a := range rd.Actions {
		switch a := a.(type) {
		case lock.FenceRequest:
			w.coord.action(w.between(1, 5), func() error { w.coord.fence(a.Clerk, a.Session); return nil })
		case lock.RecordRecovered:
			w.coord.action(w.between(1, 5), func() error { return w.coord.recordRecovered(a) })
		}
	}
}

// inject draws this tick's faults.
func (w *World) inject() {
	f := w.opts.Faults
	for _, n := range w.nodes {
		switch {
		case n.c == nil:
		case w.chance(f.ClerkCrash):
			w.end(n, "crash", false, w.between(10, 60))
		case w.chance(f.Unmount):
			w.unmount(n)
		}
	}
	for _, s := range w.servers {
		if s.s != nil && w.upServers() > 1 && w.chance(f.ServerCrash) {
			s.s, s.upAt = nil, w.now+w.between(20, 120)
			w.logf("server %d crashes", s.id)
			w.coord.serverDown(s.id)
		}
	}
	if w.chance(f.Partition) {
		w.partition()
	}
	if w.chance(f.Move) {
		w.coord.moveRandom()
	}
}

func (w *World) upServers() int {
	n := 0
	for _, s := range w.servers {
		if s.s != nil {
			n++
		}
	}
	return n
}

func (w *World) restartDue() {
	for _, s := range w.servers {
		if s.s == nil && s.upAt <= w.now {
			w.startServer(s)
			w.coord.serverUp(s.id)
		}
	}
	for _, n := range w.nodes {
		if n.c == nil && n.upAt <= w.now {
			w.mount(n)
		}
	}
}

// heal ends the chaos: partitions and message faults stop, and whatever
// is down comes back at once.
func (w *World) heal() {
	w.net.calm = true
	clear(w.net.cuts)
	for _, s := range w.servers {
		s.upAt = min(s.upAt, w.now+1)
	}
	for _, n := range w.nodes {
		n.upAt = min(n.upAt, w.now+1)
	}
	w.logf("heal")
}

func sortedWishes(m map[wishKey]lock.Mode) []wishKey {
	keys := make([]wishKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmpWish)
	return keys
}

func cmpWish(a, b wishKey) int {
	if c := cmpString(a.table, b.table); c != 0 {
		return c
	}
	switch {
	case a.lock < b.lock:
		return -1
	case a.lock > b.lock:
		return 1
	}
	return 0
}
