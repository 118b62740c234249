package lock

import "slices"

type sessionKey struct {
	id      string
	session uint64
}

// session is one clerk incarnation as this server sees it.
//
// Life: live → not live when its lease runs out here (expired) or the
// coordinator fences it (fenced): it gets Expired replies, no renewals, no
// grants. It is dead when fenced, expired, and past its horizon: the last
// tick at which it may still believe in a lock of a group this server owns.
// A dead session's holds stay, frozen, until its log is recovered in each
// table it had open. Invariant: held and waiting count its entries in the
// tables it has open.
type session struct {
	key      sessionKey
	idx      uint32
	horizon  int64  // last renewal received, or last group acquired, plus the lease
	renewSeq uint64 // highest renewal sequence seen
	fenced   bool
	expired  bool
	isDead   bool
	tables   []*table // open tables
	held     int      // holder entries, recovery holds included
	waiting  int      // waiter entries
}

func (c *session) live() bool { return !c.fenced && !c.expired }
func (c *session) dead() bool { return c.isDead }

func (c *session) table(name string) *table {
	for _, t := range c.tables {
		if t.name == name {
			return t
		}
	}
	return nil
}

func (s *Server) lookup(id string, sn uint64) *session {
	if i, ok := s.sessions[sessionKey{id, sn}]; ok {
		return s.slots[i]
	}
	return nil
}

func (s *Server) isFenced(id string, sn uint64) bool {
	f, ok := s.fences[id]
	return ok && sn <= f
}

// register starts tracking a session, its lease starting now. Returns nil
// (after a Reject) when a limit forbids it.
func (s *Server) register(id string, sn uint64) *session {
	reason := ReasonNone
	switch {
	case id == "" || len(id) > NameBytesMax:
		reason = ReasonBadName
	case len(s.sessions) >= ClerksMax:
		reason = ReasonClerksMax
	}
	if reason != ReasonNone {
		s.metrics.Rejects++
		s.send(Reject{Clerk: id, Session: sn, Reason: reason})
		return nil
	}
	var idx uint32
	if n := len(s.free); n > 0 {
		idx, s.free = s.free[n-1], s.free[:n-1]
	} else {
		idx = uint32(len(s.slots))
		s.slots = append(s.slots, nil)
	}
	c := &session{key: sessionKey{id, sn}, idx: idx, horizon: s.now + int64(s.cfg.LeaseTicks),
		fenced: s.isFenced(id, sn)}
	s.slots[idx] = c
	s.sessions[c.key] = idx
	return c
}

func (s *Server) forget(c *session) {
	if c.held != 0 || c.waiting != 0 || len(c.tables) != 0 {
		fail("forget %v with %d held, %d waiting, %d tables", c.key, c.held, c.waiting, len(c.tables))
	}
	delete(s.sessions, c.key)
	s.slots[c.idx] = nil
	s.free = append(s.free, c.idx)
}

// registerFromMap makes sure a session in the coordinator's registry is
// known, with its tables, so a rebuild waits for it.
func (s *Server) registerFromMap(r Registered) {
	c := s.lookup(r.Clerk, r.Session)
	if c == nil {
		if c = s.register(r.Clerk, r.Session); c == nil {
			return
		}
	}
	for _, name := range r.Tables {
		s.openFor(c, name)
	}
}

// expire ends the leases that ran out at this tick, and declares dead the
// fenced sessions whose horizon has passed.
func (s *Server) expire() {
	for _, c := range s.slots {
		if c != nil && !c.expired && s.now >= c.horizon {
			s.expireNow(c)
		}
	}
	for _, c := range s.slots {
		s.maybeKill(c)
	}
}

// maybeKill declares c dead if it is fenced, expired and past its horizon.
func (s *Server) maybeKill(c *session) {
	if c != nil && c.fenced && c.expired && !c.isDead && s.now >= c.horizon {
		c.isDead = true
		s.kill(c)
	}
}

// extendHorizons makes every session's horizon at least a lease from now:
// a group acquired now was acknowledged by its former owner until now.
func (s *Server) extendHorizons() {
	for _, c := range s.slots {
		if c != nil && !c.isDead {
			c.horizon = max(c.horizon, s.now+int64(s.cfg.LeaseTicks))
		}
	}
}

// expireNow declares c's lease over: it is asked to be fenced, and once
// fenced it is dead. A session with no tables open goes quietly.
func (s *Server) expireNow(c *session) {
	wasLive := c.live()
	c.expired = true
	s.metrics.Expirations++
	if len(c.tables) == 0 {
		s.forget(c)
		return
	}
	if wasLive {
		s.leaveLive(c)
	}
	if !c.fenced {
		s.act(FenceRequest{Clerk: c.key.id, Session: c.key.session})
	}
	s.maybeKill(c)
}

// leaveLive drops the queued requests of a session that stopped being
// live: nothing is granted to it any more.
func (s *Server) leaveLive(c *session) {
	for _, t := range c.tables {
		s.pumpAll(t, s.dropWaiters(c, t))
	}
}

// dropWaiters removes c's queued requests from t; returns the locks touched.
func (s *Server) dropWaiters(c *session, t *table) []uint64 {
	var hit []uint64
	for lock, ls := range t.locks {
		if i := ls.findWaiter(c.idx); i >= 0 {
			ls.removeWaiter(i)
			c.waiting--
			t.store(lock, ls)
			hit = append(hit, lock)
		}
	}
	slices.Sort(hit)
	return hit
}

// fence records that sessions of id up to sn are fenced, and makes sure
// the server tracks the tables they had open (their logs need recovery).
func (s *Server) fence(m FenceDone) {
	id, sn := m.Clerk, m.Session
	if f, ok := s.fences[id]; !ok || sn > f {
		s.fences[id] = sn
	}
	if len(m.Tables) > 0 {
		c := s.lookup(id, sn)
		if c == nil {
			c = s.register(id, sn)
		}
		for _, name := range m.Tables {
			if c != nil {
				s.openFor(c, name)
			}
		}
	}
	for _, c := range s.slots {
		if c != nil && c.key.id == id && c.key.session <= sn && !c.fenced {
			wasLive := c.live()
			c.fenced = true
			if wasLive {
				s.leaveLive(c)
			}
			s.maybeKill(c)
		}
	}
}

// kill handles a session that just became dead: its waiting requests and
// recovery holds go, its holds freeze until its log is recovered.
func (s *Server) kill(c *session) {
	if !c.dead() {
		fail("kill live session %v", c.key)
	}
	for _, t := range slices.Clone(c.tables) {
		hit := s.strip(c, t, false)
		rec := t.recovFor(c.key.id)
		rec.pending = max(rec.pending, c.key.session)
		s.pumpAll(t, hit)
		s.settle(t, c.key.id)
	}
}

// openFor returns c's open table name, opening it if needed. Returns nil
// (after a Reject) when a limit forbids it.
func (s *Server) openFor(c *session, name string) *table {
	if t := c.table(name); t != nil {
		return t
	}
	t := s.tables[name]
	reason := ReasonNone
	switch {
	case name == "" || len(name) > NameBytesMax:
		reason = ReasonBadName
	case len(c.tables) >= TablesPerClerkMax, t == nil && len(s.tables) >= TablesMax:
		reason = ReasonTablesMax
	}
	if reason != ReasonNone {
		s.reject(c, name, 0, 0, reason)
		return nil
	}
	if t == nil {
		t = newTable(name)
		s.tables[name] = t
		i, _ := slices.BinarySearch(s.names, name)
		s.names = slices.Insert(s.names, i, name)
	}
	c.tables = append(c.tables, t)
	t.open = append(t.open, c.idx)
	if s.rebuilds > 0 && c.live() {
		s.query(c, t)
	}
	if c.dead() { // learnt from the registry: its log here needs recovery too
		rec := t.recovFor(c.key.id)
		rec.pending = max(rec.pending, c.key.session)
		s.settle(t, c.key.id)
	}
	return t
}

func (s *Server) closeTable(c *session, m CloseTable) {
	c.renewSeq = max(c.renewSeq, m.RenewSeq)
	t := c.table(m.Table)
	if t == nil {
		return
	}
	hit := s.strip(c, t, true)
	s.unlink(c, t)
	s.pumpAll(t, hit)
	s.pump(t, LogLock(c.key.id)) // a newer session may wait for the log
	s.gcTable(t)
}

// unlink removes the open-table link between c and t.
func (s *Server) unlink(c *session, t *table) {
	c.tables = slices.DeleteFunc(c.tables, func(x *table) bool { return x == t })
	t.open = slices.DeleteFunc(t.open, func(x uint32) bool { return x == c.idx })
}

func (s *Server) gcTable(t *table) {
	if len(t.open) > 0 || len(t.locks) > 0 || len(t.recov) > 0 {
		return
	}
	delete(s.tables, t.name)
	i, ok := slices.BinarySearch(s.names, t.name)
	if !ok {
		fail("table %q not in names", t.name)
	}
	s.names = slices.Delete(s.names, i, i+1)
}
