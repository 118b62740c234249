package locktest

import (
	"fmt"
	"slices"

	"github.com/plumeria-fs/plumeria/lock"
)

type sessKey struct {
	id      string
	session uint64
}

// coordinator plays the cluster map: lock group owners with an epoch,
// fences, the registry of mounted sessions and their tables, and recorded
// recoveries. It reaches servers over a reliable FIFO channel with delay.
type coordinator struct {
	w        *World
	epoch    uint64
	owner    []int // group → server, -1 none
	fences   map[string]uint64
	latest   map[string]uint64
	registry map[sessKey][]string
	queue    []queued // by time; FIFO per server
	lastAt   []int64  // per server: time of its last queued message
	moves    int

	fenceCount int
}

type queued struct {
	at     int64
	server int          // -1: a coordinator action
	m      lock.Message // to server
	act    func() error
}

func newCoordinator(w *World) *coordinator {
	c := &coordinator{w: w, owner: make([]int, w.opts.Groups), fences: map[string]uint64{},
		latest: map[string]uint64{}, registry: map[sessKey][]string{}, lastAt: make([]int64, w.opts.Servers)}
	for g := range c.owner {
		c.owner[g] = -1
	}
	return c
}

func (c *coordinator) up(s int) bool { return c.w.servers[s].s != nil }

// later queues m for server s, after what is already queued for it.
func (c *coordinator) later(s int, m lock.Message) {
	at := max(c.w.now+c.w.between(1, 3), c.lastAt[s])
	c.lastAt[s] = at
	c.insert(queued{at: at, server: s, m: m})
}

func (c *coordinator) action(delay int64, f func() error) {
	c.insert(queued{at: c.w.now + delay, server: -1, act: f})
}

func (c *coordinator) insert(q queued) {
	i := len(c.queue)
	for i > 0 && c.queue[i-1].at > q.at {
		i--
	}
	c.queue = slices.Insert(c.queue, i, q)
}

func (c *coordinator) deliverDue() error {
	for len(c.queue) > 0 && c.queue[0].at <= c.w.now {
		q := c.queue[0]
		c.queue = c.queue[1:]
		if q.server < 0 {
			if err := q.act(); err != nil {
				return c.w.report(err)
			}
			continue
		}
		s := c.w.servers[q.server]
		if s.s == nil {
			continue
		}
		if c.w.verbose {
			c.w.logf("coord→%d %T%+v", q.server, q.m, q.m)
		}
		if err := s.s.Step(q.m); err != nil {
			return c.w.report(fmt.Errorf("server %d step %T: %w", s.id, q.m, err))
		}
		c.w.drainServer(s)
		if err := c.w.step(); err != nil {
			return err
		}
	}
	return nil
}

func (c *coordinator) broadcast(m lock.Message) {
	for s := range c.w.servers {
		if c.up(s) {
			c.later(s, m)
		}
	}
}

// mount hands out a new session for id, fencing the older ones, and
// registers it with its tables.
func (c *coordinator) mount(id string, tables []string) uint64 {
	sn := max(c.latest[id], c.fences[id]) + 1
	c.latest[id] = sn
	if sn > 1 {
		c.fence(id, sn-1)
	}
	c.registry[sessKey{id, sn}] = slices.Clone(tables)
	return sn
}

func (c *coordinator) fence(id string, sn uint64) {
	if sn <= c.fences[id] {
		return
	}
	c.fences[id] = sn
	c.fenceCount++
	c.w.logf("coord: fence %s up to %d", id, sn)
	c.broadcast(c.fenceDone(id))
}

// fenceDone is the fence of id with the registered tables of its fenced
// sessions.
func (c *coordinator) fenceDone(id string) lock.FenceDone {
	f := lock.FenceDone{Clerk: id, Session: c.fences[id]}
	for k, tables := range c.registry {
		if k.id == id && k.session <= f.Session {
			for _, t := range tables {
				if !slices.Contains(f.Tables, t) {
					f.Tables = append(f.Tables, t)
				}
			}
		}
	}
	slices.Sort(f.Tables)
	return f
}

func (c *coordinator) recordRecovered(a lock.RecordRecovered) error {
	if done := c.w.check.recDone[recKey{a.Clerk, a.Table}]; done < a.Session {
		return fmt.Errorf("recovery of %s/%d in %s recorded, but no clerk finished it (done up to %d)",
			a.Clerk, a.Session, a.Table, done)
	}
	if a.Session > c.fences[a.Clerk] {
		return fmt.Errorf("recovery of %s/%d recorded before it was fenced", a.Clerk, a.Session)
	}
	for k, tables := range c.registry {
		if k.id == a.Clerk && k.session <= a.Session {
			if tables = slices.DeleteFunc(tables, func(t string) bool { return t == a.Table }); len(tables) == 0 {
				delete(c.registry, k)
			} else {
				c.registry[k] = tables
			}
		}
	}
	c.w.logf("coord: recovered %s/%d in %s", a.Clerk, a.Session, a.Table)
	c.broadcast(lock.Recovered(a))
	return nil
}

// serverDown notices a crashed server after a delay, then moves its groups.
func (c *coordinator) serverDown(s int) {
	c.action(c.w.between(3, 15), func() error {
		if !c.up(s) {
			for g, o := range c.owner {
				if o == s {
					c.owner[g] = -1
				}
			}
			c.rebalance()
		}
		return nil
	})
}

// serverUp gives a restarted server a fair share of groups.
func (c *coordinator) serverUp(s int) {
	up, mine := 0, 0
	for i := range c.w.servers {
		if c.up(i) {
			up++
		}
	}
	for g := range c.owner {
		if mine < len(c.owner)/up && c.owner[g] != s && c.w.chance(0.5) {
			c.owner[g] = s
			mine++
			c.moves++
		}
	}
	c.rebalance()
}

func (c *coordinator) moveRandom() {
	g, s := c.w.rng.IntN(len(c.owner)), c.w.rng.IntN(len(c.w.servers))
	if !c.up(s) || c.owner[g] == s || c.owner[g] < 0 {
		return
	}
	c.w.logf("coord: move group %d from %d to %d", g, c.owner[g], s)
	c.owner[g] = s
	c.moves++
	c.rebalance()
}

// rebalance gives unowned groups to the least loaded live servers and
// publishes a new epoch. Servers that lose groups learn it at once (their
// ownership lease ends before anyone else's starts); the rest later.
func (c *coordinator) rebalance() {
	load := make([]int, len(c.w.servers))
	for _, o := range c.owner {
		if o >= 0 && c.up(o) {
			load[o]++
		}
	}
	for g, o := range c.owner {
		if o >= 0 && c.up(o) {
			continue
		}
		best := -1
		for s := range c.w.servers {
			if c.up(s) && (best < 0 || load[s] < load[best]) {
				best = s
			}
		}
		c.owner[g] = best
		if best >= 0 {
			load[best]++
		}
	}
	c.epoch++
	for s, srv := range c.w.servers {
		if srv.s == nil {
			continue
		}
		m := c.assignment(s)
		if srv.lostGroups(m.Groups) {
			if c.w.verbose {
				c.w.logf("coord→%d now %T%+v", s, m, m)
			}
			if err := srv.s.Step(m); err != nil {
				panic(err) // assignments are well formed
			}
			srv.owned = m.Groups
			c.w.drainServer(srv)
			continue
		}
		srv.owned = m.Groups
		c.later(s, m)
	}
}

func (c *coordinator) assignment(s int) lock.AssignGroups {
	m := lock.AssignGroups{Epoch: c.epoch}
	for g, o := range c.owner {
		if o == s {
			m.Groups = append(m.Groups, g)
		}
	}
	for _, id := range sortedIDs(c.fences) {
		m.Fences = append(m.Fences, c.fenceDone(id))
	}
	if !c.w.opts.NoRegistry {
		keys := make([]sessKey, 0, len(c.registry))
		for k := range c.registry {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b sessKey) int {
			if a.id != b.id {
				return cmpString(a.id, b.id)
			}
			return int(a.session) - int(b.session)
		})
		for _, k := range keys {
			m.Sessions = append(m.Sessions, lock.Registered{Clerk: k.id, Session: k.session, Tables: slices.Clone(c.registry[k])})
		}
	}
	return m
}

func sortedIDs(m map[string]uint64) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
