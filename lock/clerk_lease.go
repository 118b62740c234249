package lock

import (
	"cmp"
	"fmt"
	"slices"
)

// Lease rules at the clerk. A renewal acknowledged by the owner of group g
// extends the clerk's belief in its locks in g to LeaseTicks-LeaseMargin
// ticks after the renewal was SENT; the server's lease runs LeaseTicks
// after it was RECEIVED. Only acknowledgements at the group epoch the clerk
// has accepted count, and accepting a new epoch starts the lease over: the
// new owner's promise is the only one that covers the group.
//
// A clerk accepts a new epoch for g from QueryHeld (it then reports what it
// holds in g), or from any message when it holds nothing in g. When its
// belief in a group where it holds something runs out, the session is lost.

func (c *Clerk) valid(g int) bool {
	return c.now < c.lease[g]+int64(c.cfg.LeaseTicks-c.cfg.LeaseMarginTicks)
}

// accept reports whether a message of group g at epoch e is to be
// believed, adopting e when nothing the clerk holds in g could be unknown
// to a server at e.
func (c *Clerk) accept(g int, e uint64) bool {
	switch {
	case e == c.epoch[g]:
		return true
	case c.epoch[g] == 0 || (e > c.epoch[g] && c.count[g] == 0):
		c.adopt(g, e)
		return true
	}
	return false
}

func (c *Clerk) adopt(g int, e uint64) {
	c.epoch[g] = e
	c.lease[g] = leaseNever
	c.lapseBase[g] = c.now
}

// hold counts one more lock or recovery in g.
func (c *Clerk) hold(g int) {
	if c.count[g] == 0 && !c.valid(g) {
		c.lapseBase[g] = c.now // give it a lease's time to be acknowledged
	}
	c.count[g]++
}

func (c *Clerk) unhold(g int) {
	c.count[g]--
	if c.count[g] < 0 {
		fail("group %d count %d", g, c.count[g])
	}
}

func (c *Clerk) renew() {
	c.renewSeq++
	c.renewAt = c.now + int64(c.cfg.renewTicks())
	c.sent[c.renewSeq%renewRingN] = sentRenew{seq: c.renewSeq, tick: c.now}
	c.send(Renew{Clerk: c.cfg.ID, Session: c.cfg.Session, Seq: c.renewSeq, Tables: sortedKeys(c.tables)})
}

func (c *Clerk) renewAck(m RenewAck) {
	s := c.sent[m.Seq%renewRingN]
	if m.Seq == 0 || s.seq != m.Seq {
		return // too old to remember when it was sent
	}
	c.metrics.Renewals++
	for _, ge := range m.Groups {
		g := ge.Group
		if g < 0 || g >= len(c.epoch) || !c.accept(g, ge.Epoch) {
			continue
		}
		if s.tick > c.lease[g] {
			c.lease[g] = s.tick
			c.lapseBase[g] = max(c.lapseBase[g], s.tick)
		}
	}
}

// LeaseLeft reports for how many more ticks the clerk may believe in every
// lock it holds: the least, over the groups where it holds something, of
// what their leases have left (LeaseTicks-LeaseMarginTicks when it holds
// nothing; 0 once the session is lost). A cache that the holder of a lock
// cannot drop on its own when its lease runs out (the kernel's, through
// FUSE timeouts) must expire by then.
func (c *Clerk) LeaseLeft() int64 {
	if c.lost {
		return 0
	}
	end := int64(c.cfg.LeaseTicks - c.cfg.LeaseMarginTicks)
	left := end
	for g, n := range c.count {
		if n > 0 {
			left = min(left, c.lease[g]+end-c.now)
		}
	}
	return max(left, 0)
}

// checkLease ends the session when its belief in a group where it holds
// something has run out.
func (c *Clerk) checkLease() {
	end := int64(c.cfg.LeaseTicks - c.cfg.LeaseMarginTicks)
	for g, n := range c.count {
		if n > 0 && c.now >= c.lapseBase[g]+end {
			c.loseLease(fmt.Sprintf("lease of lock group %d not renewed", g))
			return
		}
	}
}

// queryHeld answers a new group owner with what the clerk has in its groups.
func (c *Clerk) queryHeld(m QueryHeld) {
	t := c.tables[m.Table]
	if t == nil {
		c.sendClose(m.Table)
		return
	}
	in := map[int]bool{}
	var gs []int
	for _, g := range m.Groups {
		if g < 0 || g >= len(c.epoch) || m.Epoch < c.epoch[g] || in[g] {
			continue
		}
		if m.Epoch > c.epoch[g] {
			c.adopt(g, m.Epoch)
			c.renewAt = c.now // the new owner's acknowledgement restores belief
		}
		in[g] = true
		gs = append(gs, g)
	}
	if len(gs) == 0 {
		return
	}
	h := Held{Clerk: c.cfg.ID, Session: c.cfg.Session, Table: t.name, Epoch: m.Epoch, Groups: gs}
	for _, l := range sortedLocks(t, func(*entry) bool { return true }) {
		if e := t.locks[l]; in[c.group(t.name, l)] {
			if e.mode != None {
				h.Locks = append(h.Locks, HeldLock{Lock: l, Mode: e.mode, ReqID: e.req})
			}
			if e.want != None {
				h.Pending = append(h.Pending, HeldLock{Lock: l, Mode: e.want, ReqID: e.wantReq})
			}
		}
	}
	for _, d := range sortedDead(t.recovering) {
		if in[c.group(t.name, LogLock(d.Clerk))] {
			h.Recovering = append(h.Recovering, d)
		}
	}
	c.send(h)
}

func (c *Clerk) recover(m Recover) {
	t := c.tables[m.Table]
	if t == nil {
		c.sendClose(m.Table)
		return
	}
	g := c.group(m.Table, LogLock(m.Dead))
	if !c.accept(g, m.Epoch) {
		return
	}
	d := DeadSession{Clerk: m.Dead, Session: m.DeadSession}
	switch {
	case c.recentlyDone(t.name, d):
		c.sendRecoveryDone(t.name, d)
	case !t.recovering[d]:
		t.recovering[d] = true
		c.hold(g)
		c.metrics.Recoveries++
		c.event(RunRecovery{Dead: d.Clerk, Session: d.Session, Table: t.name})
	}
}

// RecoveryDone tells the clerk the owner finished a RunRecovery: the log of
// dead is replayed up to session in table.
func (c *Clerk) RecoveryDone(dead string, session uint64, table string) {
	t := c.tables[table]
	d := DeadSession{Clerk: dead, Session: session}
	if c.lost || t == nil || !t.recovering[d] {
		return
	}
	delete(t.recovering, d)
	c.metrics.RecoveriesDone++
	c.unhold(c.group(table, LogLock(dead)))
	if len(c.done) == recentRecoveriesN {
		c.done = c.done[1:]
	}
	c.done = append(c.done, recoveryKey{table: table, dead: d})
	c.sendRecoveryDone(table, d)
}

func (c *Clerk) recentlyDone(table string, d DeadSession) bool {
	for _, k := range c.done {
		if k.table == table && k.dead == d {
			return true
		}
	}
	return false
}

func (c *Clerk) sendRecoveryDone(table string, d DeadSession) {
	c.send(RecoveryDone{Clerk: c.cfg.ID, Session: c.cfg.Session, Table: table,
		Dead: d.Clerk, DeadSession: d.Session})
}

// Recovering lists the recoveries in table the clerk runs under a valid
// lease, i.e. whose log lock it may use now.
func (c *Clerk) Recovering(table string) []DeadSession {
	t := c.tables[table]
	if c.lost || t == nil {
		return nil
	}
	var out []DeadSession
	for _, d := range sortedDead(t.recovering) {
		if c.valid(c.group(table, LogLock(d.Clerk))) {
			out = append(out, d)
		}
	}
	return out
}

func sortedDead(m map[DeadSession]bool) []DeadSession {
	var ds []DeadSession
	for d := range m {
		ds = append(ds, d)
	}
	slices.SortFunc(ds, func(a, b DeadSession) int {
		return cmp.Or(cmp.Compare(a.Clerk, b.Clerk), cmp.Compare(a.Session, b.Session))
	})
	return ds
}
