package lock

import (
	"fmt"
	"slices"
)

// Lock server failover (Frangipani §6, "reassignment occurs in two
// phases"): a server that loses a group drops its locks; a server that
// gains one asks every clerk session with a table open what it holds there
// (QueryHeld/Held) and grants nothing in the group until
//   - RebuildGraceTicks have passed,
//   - every session it knows with a table open has answered, and
//   - every such session that died without answering has had its log
//     recovered (its holdings are unknown, so all of them are presumed).
// Clerks learn the new group epoch from QueryHeld, answer with their
// holdings, and from then on ignore grants and revokes of older epochs.

func (s *Server) assign(m AssignGroups) error {
	if m.Epoch < s.epoch {
		return nil // stale
	}
	want := make([]bool, s.cfg.Groups)
	for _, g := range m.Groups {
		if g < 0 || g >= s.cfg.Groups {
			return fmt.Errorf("%w: group %d of %d", ErrBadGroup, g, s.cfg.Groups)
		}
		want[g] = true
	}
	s.started, s.epoch = true, m.Epoch
	for _, f := range m.Fences {
		s.fence(f)
	}
	for _, r := range m.Sessions {
		s.registerFromMap(r)
	}
	gained := false
	for g, w := range want {
		switch gs := &s.groups[g]; {
		case gs.owned && !w:
			s.dropGroup(g)
		case !gs.owned && w:
			*gs = groupState{owned: true, epoch: m.Epoch,
				rebuild: &rebuild{since: s.now, answered: map[answerKey]struct{}{}}}
			s.rebuilds++
			gained = true
		}
	}
	if gained {
		s.extendHorizons()
	}
	s.owned = nil
	for g, gs := range s.groups {
		if gs.owned {
			s.owned = append(s.owned, GroupEpoch{Group: g, Epoch: gs.epoch})
		}
	}
	if s.rebuilds > 0 {
		s.queryAll()
	}
	return nil
}

// dropGroup forgets every lock of group g: its new owner rebuilds them.
func (s *Server) dropGroup(g int) {
	for _, name := range s.names {
		t := s.tables[name]
		for lock, ls := range t.locks {
			if s.group(t, lock) != g {
				continue
			}
			for i := range ls.holders() {
				h := ls.holder(i)
				s.slots[h.clerk].held--
				if h.recovery() {
					t.recoveryHoldGone(lock, h.clerk)
				}
			}
			for _, w := range ls.waiters() {
				s.slots[w.clerk].waiting--
			}
			delete(t.locks, lock)
			delete(t.revoking, lock)
		}
	}
	if s.groups[g].rebuild != nil {
		s.rebuilds--
	}
	s.groups[g] = groupState{}
	for _, name := range append([]string(nil), s.names...) {
		s.gcTable(s.tables[name])
	}
}

func (s *Server) queryAll() {
	for _, c := range s.slots {
		if c != nil && c.live() {
			for _, t := range c.tables {
				s.query(c, t)
			}
		}
	}
}

// query sends c a QueryHeld for the groups being rebuilt that it has not
// answered for t, one message per acquisition epoch.
func (s *Server) query(c *session, t *table) {
	key := answerKey{c.key, t.name}
	var epochs []uint64
	var groups [][]int
	for g, gs := range s.groups {
		if gs.rebuild == nil {
			continue
		}
		if _, ok := gs.rebuild.answered[key]; ok {
			continue
		}
		i := 0
		for i < len(epochs) && epochs[i] != gs.epoch {
			i++
		}
		if i == len(epochs) {
			epochs, groups = append(epochs, gs.epoch), append(groups, nil)
		}
		groups[i] = append(groups[i], g)
	}
	for i, e := range epochs {
		s.send(QueryHeld{Clerk: c.key.id, Session: c.key.session, Table: t.name, Epoch: e, Groups: groups[i]})
	}
}

// held takes a clerk's report for the groups it names that are being
// rebuilt at the epoch it names.
func (s *Server) held(c *session, m Held) error {
	t := s.openFor(c, m.Table)
	if t == nil {
		return nil
	}
	// Only the first answer per group counts: a clerk's holdings in a group
	// being rebuilt only shrink, and a later copy of an older answer must
	// not bring back what was released since.
	acc := map[int]bool{}
	key := answerKey{c.key, t.name}
	for _, g := range m.Groups {
		if g < 0 || g >= len(s.groups) || s.groups[g].rebuild == nil || s.groups[g].epoch != m.Epoch {
			continue
		}
		if _, dup := s.groups[g].rebuild.answered[key]; !dup {
			acc[g] = true
			s.groups[g].rebuild.answered[key] = struct{}{}
		}
	}
	for _, hl := range m.Locks {
		if !acc[s.group(t, hl.Lock)] {
			continue
		}
		if err := s.claim(c, t, hl); err != nil {
			s.expireNow(c) // its word is worthless: fence it, recover its log
			return err
		}
	}
	for _, p := range m.Pending {
		if acc[s.group(t, p.Lock)] {
			s.request(c, Request{Clerk: c.key.id, Session: c.key.session, Table: t.name,
				Lock: p.Lock, Mode: p.Mode, ReqID: p.ReqID})
		}
	}
	for _, d := range m.Recovering {
		if acc[s.group(t, LogLock(d.Clerk))] {
			s.claimRecovery(c, t, d)
		}
	}
	return nil
}

// claim installs a hold a clerk reports.
func (s *Server) claim(c *session, t *table, hl HeldLock) error {
	if !hl.Mode.valid() || (IsLogLock(hl.Lock) && hl.Lock != LogLock(c.key.id)) {
		return fmt.Errorf("%w: %s/%d claims %v on %x", ErrConflictClaim, c.key.id, c.key.session, hl.Mode, hl.Lock)
	}
	ls := t.locks[hl.Lock]
	if i := ls.find(c.idx); i >= 0 {
		if h := ls.holder(i); !h.recovery() && hl.ReqID > h.req {
			h.req, h.mode = hl.ReqID, hl.Mode
		}
		t.store(hl.Lock, ls)
		return nil
	}
	for i := range ls.holders() {
		h := ls.holder(i)
		if h.recovery() {
			return nil // revoked for the recovery already: the claim is stale
		}
		if !compatible(h.mode, hl.Mode) {
			return fmt.Errorf("%w: %s/%d claims %v on %x, %s/%d holds %v", ErrConflictClaim,
				c.key.id, c.key.session, hl.Mode, hl.Lock, s.slots[h.clerk].key.id, s.slots[h.clerk].key.session, h.mode)
		}
	}
	ls.addHolder(holder{req: hl.ReqID, clerk: c.idx, mode: hl.Mode})
	c.held++
	t.store(hl.Lock, ls)
	return nil
}

// claimRecovery installs a recovery a clerk reports it is running.
func (s *Server) claimRecovery(c *session, t *table, d DeadSession) {
	rec := t.recovFor(d.Clerk)
	if d.Session <= rec.recovered || (rec.recoverer != 0 && rec.recoverer != c.idx) {
		return
	}
	rec.pending = max(rec.pending, d.Session)
	rec.target = max(rec.target, d.Session)
	if rec.recoverer == c.idx {
		return
	}
	rec.recoverer = c.idx
	lock := LogLock(d.Clerk)
	ls := t.locks[lock]
	ls.addHolder(holder{clerk: c.idx, mode: Write, flags: holderRecovery})
	c.held++
	t.store(lock, ls)
}

func (s *Server) checkRebuilds() {
	for g := range s.groups {
		rb := s.groups[g].rebuild
		if rb == nil || s.now < rb.since+int64(s.cfg.RebuildGraceTicks) || !s.quorum(g, true) {
			continue
		}
		s.groups[g].rebuild = nil
		s.rebuilds--
		s.pumpGroup(g)
	}
}

// quorum reports whether every session with a table open has answered for
// group g. Unless strict, a dead session counts as answered once a lease
// has passed since the group was acquired: the former owner may have
// acknowledged its renewals until then, so it may believe in its locks in
// g (its log lock among them) until then.
func (s *Server) quorum(g int, strict bool) bool {
	rb := s.groups[g].rebuild
	deadDone := !strict && s.now >= rb.since+int64(s.cfg.LeaseTicks)
	for _, name := range s.names {
		for _, idx := range s.tables[name].open {
			c := s.slots[idx]
			if _, ok := rb.answered[answerKey{c.key, name}]; ok || (deadDone && c.dead()) {
				continue
			}
			return false
		}
	}
	return true
}

func (s *Server) pumpGroup(g int) {
	for _, name := range s.names {
		t := s.tables[name]
		var locks []uint64
		for lock := range t.locks {
			if s.group(t, lock) == g {
				locks = append(locks, lock)
			}
		}
		slices.Sort(locks)
		s.pumpAll(t, locks)
	}
}
