package lock

import "slices"

// Recovery of a dead clerk's log (Frangipani §6, with the hazard closed by
// fencing). For each table a dead session had open:
//  1. Its lease ran out here and the coordinator fenced it (FenceRequest,
//     FenceDone): it can no longer write, and it no longer believes in its
//     locks (its own lease view ends before ours).
//  2. The owner of the log lock's group picks a live clerk with the table
//     open, grants it the log lock (a recovery hold) and sends Recover.
//     The log lock is exclusive, so one recovery runs at a time; a newer
//     live session of the same clerk is revoked off its log lock first.
//  3. The clerk replays the log and sends RecoveryDone; the server asks the
//     coordinator to record it (RecordRecovered).
//  4. Every server, on Recovered, frees the dead session's frozen locks.
// A recoverer that dies loses its recovery hold, and another clerk is
// picked. If no live clerk has the table open, recovery waits for one.

// recovery is the state of one clerk's log in one table.
type recovery struct {
	pending   uint64 // highest dead session awaiting recovery
	recovered uint64 // highest session Recovered reported; 0 for none
	target    uint64 // session the running recovery covers
	recoverer uint32 // session holding the recovery hold; 0 for none
	done      bool   // recoverer reported RecoveryDone for target
}

func (t *table) recovFor(id string) *recovery {
	rec := t.recov[id]
	if rec == nil {
		rec = &recovery{}
		t.recov[id] = rec
	}
	return rec
}

// recoveryHoldGone notes that the recovery hold of session idx on lock is
// being removed.
func (t *table) recoveryHoldGone(lock uint64, idx uint32) {
	for id, rec := range t.recov {
		if LogLock(id) == lock && rec.recoverer == idx {
			rec.recoverer = 0
		}
	}
}

// drive starts the recoveries this server is responsible for and may start.
func (s *Server) drive() {
	for _, name := range s.names {
		t := s.tables[name]
		if len(t.recov) == 0 {
			continue
		}
		for _, id := range sortedKeys(t.recov) {
			rec := t.recov[id]
			if rec.pending <= rec.recovered || rec.recoverer != 0 || rec.done {
				continue
			}
			g := s.group(t, LogLock(id))
			if s.groups[g].owned && s.mayRecover(g) {
				s.startRecovery(t, id, rec, g)
			}
		}
	}
}

// mayRecover reports whether a recovery in group g cannot collide with one
// a clerk is already running: every live session has reported (Held lists
// running recoveries), and dead ones are fenced and lost their lease.
func (s *Server) mayRecover(g int) bool {
	rb := s.groups[g].rebuild
	return rb == nil || (s.now >= rb.since+int64(s.cfg.RebuildGraceTicks) && s.quorum(g, false))
}

func (s *Server) startRecovery(t *table, id string, rec *recovery, g int) {
	lock := LogLock(id)
	ls := t.locks[lock]
	blocked := false
	for i := range ls.holders() {
		h := ls.holder(i)
		c := s.slots[h.clerk]
		if c.dead() {
			continue // a dead session of id: its hold is what we recover
		}
		blocked = true
		if c.live() && !(h.revoking() && h.target == None) {
			h.flags |= holderRevoking
			h.target = None
			s.metrics.Revokes++
			s.sendRevoke(t, lock, c, *h, g)
		}
	}
	r := s.pickRecoverer(t)
	if blocked || r == nil {
		t.store(lock, ls)
		return
	}
	ls.addHolder(holder{clerk: r.idx, mode: Write, flags: holderRecovery})
	r.held++
	ls.check(lock)
	t.store(lock, ls)
	rec.recoverer, rec.target = r.idx, rec.pending
	s.metrics.Recoveries++
	s.sendRecover(t, id, rec, g)
}

func (s *Server) pickRecoverer(t *table) *session {
	for _, idx := range t.open {
		if c := s.slots[idx]; c.live() {
			return c
		}
	}
	return nil
}

func (s *Server) sendRecover(t *table, id string, rec *recovery, g int) {
	c := s.slots[rec.recoverer]
	s.send(Recover{Clerk: c.key.id, Session: c.key.session, Table: t.name,
		Dead: id, DeadSession: rec.target, Epoch: s.groups[g].epoch})
}

func (s *Server) recoveryDone(c *session, m RecoveryDone) {
	t := c.table(m.Table)
	if t == nil {
		return
	}
	rec := t.recov[m.Dead]
	if rec == nil || rec.recoverer != c.idx || rec.target != m.DeadSession {
		return // stale
	}
	if !rec.done {
		rec.done = true
		s.metrics.RecoveriesDone++
	}
	s.act(RecordRecovered{Clerk: m.Dead, Session: rec.target, Table: t.name})
}

// recovered applies the coordinator's record that a log is recovered.
func (s *Server) recovered(m Recovered) {
	s.fence(FenceDone{Clerk: m.Clerk, Session: m.Session}) // recovered implies fenced
	t := s.tables[m.Table]
	if t == nil {
		return
	}
	if t.recov[m.Clerk] == nil && !s.hasOlder(t, m.Clerk, m.Session) {
		return
	}
	rec := t.recovFor(m.Clerk)
	rec.recovered = max(rec.recovered, m.Session)
	s.settle(t, m.Clerk)
	s.gcTable(t)
}

// settle frees the dead sessions of id that are recovered, ends a finished
// recovery, and forgets the record once nothing depends on it.
func (s *Server) settle(t *table, id string) {
	rec := t.recov[id]
	if rec == nil {
		return
	}
	var hit []uint64
	for _, idx := range slices.Clone(t.open) {
		c := s.slots[idx]
		if c.key.id != id || c.key.session > rec.recovered || !c.dead() {
			continue
		}
		hit = append(hit, s.strip(c, t, true)...)
		s.unlink(c, t)
		if len(c.tables) == 0 {
			s.forget(c)
		}
	}
	if rec.target != 0 && rec.target <= rec.recovered {
		if rec.recoverer != 0 {
			hit = append(hit, s.dropRecoveryHold(t, id, rec))
		}
		rec.done, rec.target = false, 0
	}
	if rec.pending <= rec.recovered && rec.recoverer == 0 && !s.hasOlder(t, id, rec.recovered) {
		delete(t.recov, id)
	}
	// The log may be free now: its own clerk may be waiting for it.
	hit = append(hit, LogLock(id))
	slices.Sort(hit)
	s.pumpAll(t, slices.Compact(hit))
}

func (s *Server) dropRecoveryHold(t *table, id string, rec *recovery) uint64 {
	lock := LogLock(id)
	ls := t.locks[lock]
	i := ls.find(rec.recoverer)
	if i < 0 || !ls.holder(i).recovery() {
		fail("recoverer %d has no recovery hold on %x", rec.recoverer, lock)
	}
	ls.removeHolder(i)
	s.slots[rec.recoverer].held--
	rec.recoverer = 0
	t.store(lock, ls)
	return lock
}

// hasOlder reports whether a session of id up to sn still has t open.
func (s *Server) hasOlder(t *table, id string, sn uint64) bool {
	for _, idx := range t.open {
		if c := s.slots[idx]; c.key.id == id && c.key.session <= sn {
			return true
		}
	}
	return false
}

func (s *Server) retryRecoveries() {
	for _, name := range s.names {
		t := s.tables[name]
		for _, id := range sortedKeys(t.recov) {
			rec := t.recov[id]
			g := s.group(t, LogLock(id))
			switch {
			case !s.groups[g].owned || rec.target == 0:
			case rec.done:
				s.act(RecordRecovered{Clerk: id, Session: rec.target, Table: t.name})
			case rec.recoverer != 0:
				s.sendRecover(t, id, rec, g)
			}
		}
	}
}
