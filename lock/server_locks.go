package lock

import "slices"

// table is one lock table at one server: the locks of its owned groups.
type table struct {
	name     string
	locks    map[uint64]lockState // by value; absent when no holders and no waiters
	open     []uint32             // sessions with the table open, in arrival order
	revoking map[uint64]struct{}  // locks with an outstanding revoke
	recov    map[string]*recovery // by dead clerk id: logs awaiting recovery
}

func newTable(name string) *table {
	return &table{
		name:     name,
		locks:    map[uint64]lockState{},
		revoking: map[uint64]struct{}{},
		recov:    map[string]*recovery{},
	}
}

// store writes ls back (locks are kept by value) and keeps revoking in step.
func (t *table) store(lock uint64, ls lockState) {
	if ls.empty() {
		delete(t.locks, lock)
		delete(t.revoking, lock)
		return
	}
	t.locks[lock] = ls
	if ls.anyRevoking() {
		t.revoking[lock] = struct{}{}
	} else {
		delete(t.revoking, lock)
	}
}

// logBusy reports whether the log guarded by lock awaits or undergoes
// recovery: then nobody else may have the log lock.
func (t *table) logBusy(lock uint64) bool {
	for id, rec := range t.recov {
		if LogLock(id) == lock && (rec.pending > rec.recovered || rec.recoverer != 0) {
			return true
		}
	}
	return false
}

func (s *Server) request(c *session, m Request) {
	t := s.openFor(c, m.Table)
	if t == nil {
		return
	}
	if r := checkRequest(c, m); r != ReasonNone {
		s.reject(c, m.Table, m.Lock, m.ReqID, r)
		return
	}
	g := s.group(t, m.Lock)
	if !s.groups[g].owned {
		return // routed with an old map; the clerk retries
	}
	ls := t.locks[m.Lock]
	if s.requestAgain(c, t, m, &ls, g) {
		return
	}
	if r := checkLimits(c, &ls); r != ReasonNone {
		s.reject(c, m.Table, m.Lock, m.ReqID, r)
		return
	}
	w := waiter{req: m.ReqID, since: s.now, clerk: c.idx, mode: m.Mode}
	c.waiting++
	if len(ls.waiters()) == 0 && s.serving(g) && s.grantable(t, m.Lock, &ls, w) {
		s.grant(t, m.Lock, &ls, w, g) // the common case: no queue at all
		t.store(m.Lock, ls)
		return
	}
	ls.addWaiter(w)
	t.store(m.Lock, ls)
	s.pump(t, m.Lock)
	if ls := t.locks[m.Lock]; ls.findWaiter(c.idx) >= 0 {
		s.metrics.Waits++
	}
}

// requestAgain handles a request from a clerk that already holds or waits
// for the lock: a duplicate, a stale copy, or a newer request (an upgrade,
// or a re-request overtaking its own release). It reports whether the
// request is dealt with; if not, it queues like any other.
func (s *Server) requestAgain(c *session, t *table, m Request, ls *lockState, g int) bool {
	if i := ls.find(c.idx); i >= 0 {
		h := ls.holder(i)
		if m.ReqID < h.req || h.recovery() {
			return true // stale
		}
		if m.ReqID == h.req {
			if s.serving(g) {
				s.sendGrant(t, m.Lock, c, *h, g) // the grant may have been lost
			}
			return true
		}
	}
	i := ls.findWaiter(c.idx)
	if i < 0 {
		return false
	}
	if w := &ls.extra.waiters[i]; m.ReqID > w.req { // a newer request replaces the old in place
		w.req, w.mode = m.ReqID, m.Mode
		t.store(m.Lock, *ls)
	}
	s.pump(t, m.Lock) // cheap, and heals a missed wake-up
	return true
}

func checkRequest(c *session, m Request) Reason {
	switch {
	case !m.Mode.valid():
		return ReasonBadMode
	case IsLogLock(m.Lock) && m.Lock != LogLock(c.key.id):
		return ReasonReservedLock
	}
	return ReasonNone
}

func checkLimits(c *session, ls *lockState) Reason {
	switch {
	case c.held+c.waiting >= LocksPerClerkMax:
		return ReasonLocksPerClerk
	case c.waiting >= PendingRequestsMax:
		return ReasonPendingMax
	case len(ls.waiters()) >= LockWaitersMax:
		return ReasonWaitersMax
	}
	return ReasonNone
}

// release handles Release (to None) and Downgrade (to Read) of grant req.
func (s *Server) release(c *session, table string, lock, req uint64, to Mode) {
	t := c.table(table)
	if t == nil {
		return
	}
	ls, ok := t.locks[lock]
	i := ls.find(c.idx)
	if !ok || i < 0 {
		return
	}
	h := ls.holder(i)
	if h.req != req || h.recovery() {
		return // stale: names an older grant
	}
	if to == None {
		ls.removeHolder(i)
		c.held--
	} else {
		h.mode = min(h.mode, Read)
		if h.revoking() && h.target == Read {
			h.flags &^= holderRevoking
		}
	}
	t.store(lock, ls)
	s.pump(t, lock)
}

// pump grants waiters in FIFO order while the head is compatible, then
// revokes what blocks the head. A later request never overtakes an earlier
// one, so readers cannot starve a writer.
func (s *Server) pump(t *table, lock uint64) {
	g := s.group(t, lock)
	ls, ok := t.locks[lock]
	if !ok || !s.serving(g) {
		return
	}
	for len(ls.waiters()) > 0 {
		w := ls.waiters()[0]
		if !s.grantable(t, lock, &ls, w) {
			s.revokeFor(t, lock, &ls, w, g)
			break
		}
		ls.removeWaiter(0)
		s.grant(t, lock, &ls, w, g)
	}
	ls.check(lock)
	t.store(lock, ls)
}

func (s *Server) pumpAll(t *table, locks []uint64) {
	for _, l := range locks {
		s.pump(t, l)
	}
}

func (s *Server) grantable(t *table, lock uint64, ls *lockState, w waiter) bool {
	for i := range ls.holders() {
		h := ls.holder(i)
		if h.clerk == w.clerk && !h.recovery() {
			continue // an upgrade does not conflict with itself
		}
		if !compatible(h.mode, w.mode) {
			return false
		}
	}
	return !IsLogLock(lock) || s.logFree(t, lock, s.slots[w.clerk])
}

// logFree reports whether session c may have its log lock: not while the log
// awaits or undergoes recovery, nor while an older session of the same clerk
// still has the table open here (its log must be recovered first).
func (s *Server) logFree(t *table, lock uint64, c *session) bool {
	if t.logBusy(lock) {
		return false
	}
	for _, idx := range t.open {
		if o := s.slots[idx]; o.key.id == c.key.id && o.key.session < c.key.session {
			return false
		}
	}
	return true
}

func (s *Server) grant(t *table, lock uint64, ls *lockState, w waiter, g int) {
	c := s.slots[w.clerk]
	if !c.live() {
		fail("grant to %s/%d, not live", c.key.id, c.key.session)
	}
	c.waiting--
	var h *holder
	if i := ls.find(w.clerk); i >= 0 {
		h = ls.holder(i)
		if h.recovery() {
			fail("grant over a recovery hold on %x", lock)
		}
		h.req, h.mode, h.flags = w.req, w.mode, 0
	} else {
		ls.addHolder(holder{req: w.req, clerk: w.clerk, mode: w.mode})
		h = ls.holder(ls.find(w.clerk))
		c.held++
	}
	s.metrics.Grants++
	s.metrics.observeWait(s.now - w.since)
	s.sendGrant(t, lock, c, *h, g)
}

// revokeFor asks the live holders that block w to go down: to Read when
// readers are all that wait, else to None. Dead holders stay frozen until
// their log is recovered; recovery holds are never revoked.
func (s *Server) revokeFor(t *table, lock uint64, ls *lockState, w waiter, g int) {
	to := None
	if w.mode == Read && !ls.writerWaiting() {
		to = Read
	}
	for i := range ls.holders() {
		h := ls.holder(i)
		if h.clerk == w.clerk || compatible(h.mode, w.mode) || h.recovery() {
			continue
		}
		c := s.slots[h.clerk]
		if !c.live() || (h.revoking() && h.target <= to) {
			continue
		}
		h.flags |= holderRevoking
		h.target = to
		s.metrics.Revokes++
		s.sendRevoke(t, lock, c, *h, g)
	}
}

func (s *Server) sendGrant(t *table, lock uint64, c *session, h holder, g int) {
	s.send(Grant{Clerk: c.key.id, Session: c.key.session, Table: t.name, Lock: lock,
		Mode: h.mode, ReqID: h.req, Epoch: s.groups[g].epoch})
}

func (s *Server) sendRevoke(t *table, lock uint64, c *session, h holder, g int) {
	s.send(Revoke{Clerk: c.key.id, Session: c.key.session, Table: t.name, Lock: lock,
		ReqID: h.req, To: h.target, Epoch: s.groups[g].epoch})
}

func (s *Server) retryRevokes() {
	for _, name := range s.names {
		t := s.tables[name]
		for _, lock := range sortedKeys(t.revoking) {
			ls := t.locks[lock]
			g := s.group(t, lock)
			for i := range ls.holders() {
				h := ls.holder(i)
				if c := s.slots[h.clerk]; h.revoking() && c.live() {
					s.sendRevoke(t, lock, c, *h, g)
				}
			}
		}
	}
}

// strip removes from t what c has there: its waiters, its recovery holds,
// and its other holds if all is set (else just their revoke marks).
// Returns the locks touched, sorted.
func (s *Server) strip(c *session, t *table, all bool) []uint64 {
	var hit []uint64
	for lock, ls := range t.locks {
		changed := false
		if i := ls.findWaiter(c.idx); i >= 0 {
			ls.removeWaiter(i)
			c.waiting--
			changed = true
		}
		if i := ls.find(c.idx); i >= 0 {
			h := ls.holder(i)
			switch {
			case all || h.recovery():
				if h.recovery() {
					t.recoveryHoldGone(lock, c.idx)
				}
				ls.removeHolder(i)
				c.held--
				changed = true
			case h.revoking():
				h.flags &^= holderRevoking
				changed = true
			}
		}
		if changed {
			t.store(lock, ls)
			hit = append(hit, lock)
		}
	}
	slices.Sort(hit)
	return hit
}

func sortedKeys[K interface{ ~uint64 | ~string }, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
