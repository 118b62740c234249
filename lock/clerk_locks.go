package lock

import "fmt"

// Acquire asks for lock in mode (Write covers Read). It returns true when
// the clerk already holds lock that strongly under a valid lease, and marks
// it used (so it is not released as idle). Otherwise a request is sent, if
// none is outstanding, and a Granted event follows. Errors: ErrLeaseLost,
// ErrNotOpen, ErrBadMode, ErrReservedLock (a log lock other than
// LogLock(ID)), ErrLimit (PendingRequestsMax requests outstanding, or
// LocksPerClerkMax locks held or requested, in all tables together).
func (c *Clerk) Acquire(table string, lock uint64, mode Mode) (bool, error) {
	t, err := c.checkUse(table, lock, mode)
	if err != nil {
		return false, err
	}
	e := t.locks[lock]
	switch {
	case e != nil && e.mode >= mode:
		e.used = c.now
		return c.valid(c.group(table, lock)), nil
	case e != nil && e.want >= mode:
		return false, nil
	}
	if _, ok := t.pending[lock]; !ok {
		if n := c.pendingN(); n >= PendingRequestsMax {
			return false, fmt.Errorf("%w: %d requests pending", ErrLimit, n)
		}
	}
	if e == nil {
		if n := c.locksN(); n >= LocksPerClerkMax {
			return false, fmt.Errorf("%w: %d locks held or requested", ErrLimit, n)
		}
		e = &entry{}
		t.locks[lock] = e
	}
	c.nextReq++
	c.metrics.Requests++
	e.want, e.wantReq = mode, c.nextReq
	t.pending[lock] = struct{}{}
	c.sendRequest(t, lock, e)
	return false, nil
}

// pendingN counts the requests outstanding, locksN the locks held or
// requested, in all tables (at most TablesPerClerkMax).
func (c *Clerk) pendingN() (n int) {
	for _, t := range c.tables {
		n += len(t.pending)
	}
	return n
}

func (c *Clerk) locksN() (n int) {
	for _, t := range c.tables {
		n += len(t.locks)
	}
	return n
}

func (c *Clerk) checkUse(table string, lock uint64, mode Mode) (*ctable, error) {
	t := c.tables[table]
	switch {
	case c.lost:
		return nil, ErrLeaseLost
	case t == nil:
		return nil, fmt.Errorf("%w: %q", ErrNotOpen, table)
	case !mode.valid():
		return nil, fmt.Errorf("%w: %v", ErrBadMode, mode)
	case IsLogLock(lock) && lock != LogLock(c.cfg.ID):
		return nil, fmt.Errorf("%w: %x", ErrReservedLock, lock)
	}
	return t, nil
}

// Holds returns the mode in which the clerk may use lock now: None unless
// it holds the lock and its lease for the lock's group is valid. A running
// recovery holds the dead clerk's log lock in Write mode.
func (c *Clerk) Holds(table string, lock uint64) Mode {
	t := c.tables[table]
	if c.lost || t == nil || !c.valid(c.group(table, lock)) {
		return None
	}
	if IsLogLock(lock) {
		for d := range t.recovering {
			if LogLock(d.Clerk) == lock {
				return Write
			}
		}
	}
	if e := t.locks[lock]; e != nil {
		return e.mode
	}
	return None
}

// EachHeld calls fn for every lock the clerk may use now, as Holds would
// report it, recoveries excluded (see Recovering). Order is unspecified.
func (c *Clerk) EachHeld(fn func(table string, lock uint64, mode Mode)) {
	if c.lost {
		return
	}
	for _, t := range c.tables {
		for l, e := range t.locks {
			if e.mode != None && c.valid(c.group(t.name, l)) {
				fn(t.name, l, e.mode)
			}
		}
	}
}

// Flushed tells the clerk the owner's cache for lock is now consistent with
// holding only to (None: nothing cached; Read: nothing dirty), answering a
// Flush event. The clerk then releases or downgrades the lock.
func (c *Clerk) Flushed(table string, lock uint64, to Mode) {
	t := c.tables[table]
	if c.lost || t == nil {
		return
	}
	e := t.locks[lock]
	if e == nil || e.mode == None || !e.asked {
		return
	}
	e.flushing = false
	if to < e.mode {
		c.lower(t, lock, e, to)
	}
	if e.mode > e.target {
		e.flushing = true // asked for less while the owner flushed
		c.event(Flush{Table: table, Lock: lock, To: e.target})
	} else {
		e.asked = false
	}
}

// Release gives up lock at once; the owner must have flushed it.
func (c *Clerk) Release(table string, lock uint64) {
	t := c.tables[table]
	if c.lost || t == nil {
		return
	}
	if e := t.locks[lock]; e != nil && e.mode != None {
		e.asked, e.flushing = false, false
		c.lower(t, lock, e, None)
	}
}

// Downgrade lowers a Write grant on lock to Read at once and tells the
// server; the owner must have written back what it dirtied under the lock.
// No-op unless the lock is held in Write. A revoke or idleness that asked
// for Read is thereby answered; one that asked for None still runs (the
// owner's Flushed then releases the Read grant).
func (c *Clerk) Downgrade(table string, lock uint64) {
	t := c.tables[table]
	if c.lost || t == nil {
		return
	}
	e := t.locks[lock]
	if e == nil || e.mode != Write {
		return
	}
	c.metrics.Downgrades++
	c.lower(t, lock, e, Read)
	if e.asked && e.target >= Read {
		e.asked, e.flushing = false, false
	}
}

// lower releases (to None) or downgrades (to Read) the held grant. The
// clerk stops believing before the message leaves.
func (c *Clerk) lower(t *ctable, lock uint64, e *entry, to Mode) {
	m := Release{Clerk: c.cfg.ID, Session: c.cfg.Session, Table: t.name, Lock: lock, ReqID: e.req}
	if to == Read {
		e.mode = Read
		c.send(Downgrade(m))
		return
	}
	e.mode = None
	c.unhold(c.group(t.name, lock))
	if e.want == None {
		delete(t.locks, lock)
	}
	c.send(m)
}

func (c *Clerk) grant(m Grant) {
	t := c.tables[m.Table]
	if t == nil {
		c.sendClose(m.Table)
		return
	}
	g := c.group(m.Table, m.Lock)
	if !c.accept(g, m.Epoch) {
		return // from a former owner of the group
	}
	e := t.locks[m.Lock]
	switch {
	case e != nil && e.want != None && e.wantReq == m.ReqID:
	case e != nil && e.mode != None && e.req == m.ReqID:
		return // duplicate
	default:
		c.sendRelease(m.Table, m.Lock, m.ReqID) // not wanted (any more)
		return
	}
	if e.mode == None {
		c.hold(g)
	}
	e.mode, e.req, e.used = m.Mode, m.ReqID, c.now
	e.want, e.wantReq = None, 0
	e.asked, e.flushing = false, false // revokes of the older grant are void
	delete(t.pending, m.Lock)
	c.metrics.Grants++
	c.event(Granted{Table: m.Table, Lock: m.Lock, Mode: m.Mode})
}

func (c *Clerk) revoke(m Revoke) {
	t := c.tables[m.Table]
	if t == nil {
		c.sendClose(m.Table)
		return
	}
	if !c.accept(c.group(m.Table, m.Lock), m.Epoch) {
		return
	}
	e := t.locks[m.Lock]
	switch {
	case e != nil && e.mode != None && e.req == m.ReqID:
		if e.mode <= m.To { // done before; the answer was lost
			if m.To == Read {
				c.send(Downgrade{Clerk: c.cfg.ID, Session: c.cfg.Session, Table: m.Table, Lock: m.Lock, ReqID: e.req})
			}
			return
		}
		if !e.asked || m.To < e.target {
			c.metrics.Revokes++
		}
		c.ask(t, m.Lock, e, m.To)
	case e != nil && e.want != None && e.wantReq == m.ReqID:
		// The grant is still on its way; the server will ask again.
	default:
		c.sendRelease(m.Table, m.Lock, m.ReqID) // not held: the Release was lost
	}
}

// ask has the owner flush lock before it goes down to `to`.
func (c *Clerk) ask(t *ctable, lock uint64, e *entry, to Mode) {
	if !e.asked || to < e.target {
		e.target = to
	}
	e.asked = true
	if !e.flushing {
		e.flushing = true
		c.event(Flush{Table: t.name, Lock: lock, To: e.target})
	}
}

func (c *Clerk) rejected(m Reject) {
	if m.ReqID == 0 {
		c.event(Rejected{Table: m.Table, Reason: m.Reason})
		return
	}
	t := c.tables[m.Table]
	if t == nil {
		return
	}
	if e := t.locks[m.Lock]; e != nil && e.want != None && e.wantReq == m.ReqID {
		e.want, e.wantReq = None, 0
		delete(t.pending, m.Lock)
		if e.mode == None {
			delete(t.locks, m.Lock)
		}
		c.event(Rejected{Table: m.Table, Lock: m.Lock, Reason: m.Reason})
	}
}

func (c *Clerk) sendRequest(t *ctable, lock uint64, e *entry) {
	c.send(Request{Clerk: c.cfg.ID, Session: c.cfg.Session, Table: t.name, Lock: lock,
		Mode: e.want, ReqID: e.wantReq})
}

func (c *Clerk) sendRelease(table string, lock, req uint64) {
	c.send(Release{Clerk: c.cfg.ID, Session: c.cfg.Session, Table: table, Lock: lock, ReqID: req})
}

func (c *Clerk) resendPending() {
	for _, t := range c.sortedTables() {
		for _, l := range sortedKeys(t.pending) {
			c.sendRequest(t, l, t.locks[l])
		}
	}
}

// dropIdle starts the voluntary release of locks unused for IdleTicks.
func (c *Clerk) dropIdle() {
	idle := int64(c.cfg.IdleTicks)
	for _, t := range c.sortedTables() {
		for _, l := range sortedLocks(t, func(e *entry) bool {
			return e.mode != None && e.want == None && !e.asked && c.now-e.used >= idle
		}) {
			c.metrics.IdleReleases++
			c.ask(t, l, t.locks[l], None)
		}
	}
}
