package lock

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// CheckInvariants panics if the server's internal state is inconsistent.
// It walks every lock: for tests and debugging, not for production loops.
func (s *Server) CheckInvariants() {
	held := make([]int, len(s.slots))
	waiting := make([]int, len(s.slots))
	if !(slices.IsSorted(s.names) && len(s.names) == len(s.tables)) {
		fail("table names out of step")
	}
	for _, name := range s.names {
		t := s.tables[name]
		if t == nil || t.name != name {
			fail("table %q missing", name)
		}
		for lock, ls := range t.locks {
			s.checkLock(t, lock, &ls, held, waiting)
		}
		for lock := range t.revoking {
			ls := t.locks[lock]
			if !ls.anyRevoking() {
				fail("table %q: lock %x marked revoking", name, lock)
			}
		}
		for id, rec := range t.recov {
			s.checkRecovery(t, id, rec)
		}
	}
	rebuilds := 0
	for _, gs := range s.groups {
		if gs.rebuild != nil {
			rebuilds++
		}
	}
	if rebuilds != s.rebuilds {
		fail("rebuilds %d, counted %d", s.rebuilds, rebuilds)
	}
	for i, c := range s.slots {
		if c == nil {
			continue
		}
		if !(c.idx == uint32(i) && s.sessions[c.key] == c.idx) {
			fail("session %v index", c.key)
		}
		if c.held != held[i] || c.waiting != waiting[i] {
			fail("session %v counts %d/%d, found %d/%d", c.key, c.held, c.waiting, held[i], waiting[i])
		}
	}
}

func (s *Server) checkLock(t *table, lock uint64, ls *lockState, held, waiting []int) {
	if ls.empty() {
		fail("table %q: empty lock %x stored", t.name, lock)
	}
	ls.check(lock)
	if !s.groups[s.group(t, lock)].owned {
		fail("table %q: lock %x in a group not owned", t.name, lock)
	}
	_, marked := t.revoking[lock]
	if marked != ls.anyRevoking() {
		fail("table %q: lock %x revoking mark", t.name, lock)
	}
	for i := range ls.holders() {
		h := ls.holder(i)
		s.checkMember(t, h.clerk)
		held[h.clerk]++
		dead := s.slots[h.clerk].dead()
		if h.revoking() && dead {
			fail("table %q: revoke outstanding to dead session on %x", t.name, lock)
		}
		if h.recovery() && dead {
			fail("table %q: dead session recovers on %x", t.name, lock)
		}
	}
	if ws := ls.waiters(); len(ws) > 0 && s.serving(s.group(t, lock)) {
		if s.grantable(t, lock, ls, ws[0]) {
			fail("table %q: lock %x could grant its head waiter", t.name, lock)
		}
	}
	for _, w := range ls.waiters() {
		s.checkMember(t, w.clerk)
		if !s.slots[w.clerk].live() {
			fail("table %q: session not live waits on %x", t.name, lock)
		}
		waiting[w.clerk]++
	}
}

func (s *Server) checkMember(t *table, idx uint32) {
	if int(idx) >= len(s.slots) || s.slots[idx] == nil {
		fail("table %q: unknown session %d", t.name, idx)
	}
	if !slices.Contains(t.open, idx) {
		fail("table %q: session %v not open", t.name, s.slots[idx].key)
	}
}

func (s *Server) checkRecovery(t *table, id string, rec *recovery) {
	if rec.recoverer == 0 {
		return
	}
	ls := t.locks[LogLock(id)]
	i := ls.find(rec.recoverer)
	if i < 0 || !ls.holder(i).recovery() {
		fail("table %q: recoverer of %q has no recovery hold", t.name, id)
	}
	if s.slots[rec.recoverer].dead() {
		fail("table %q: dead recoverer of %q", t.name, id)
	}
}

// DebugString describes the whole state: rebuilding groups, every lock
// with its holders and waiters, recoveries, sessions. For diagnosis only.
// lockName may name lock ids (nil prints them in decimal).
func (s *Server) DebugString(lockName func(uint64) string) string {
	if lockName == nil {
		lockName = func(l uint64) string { return strconv.FormatUint(l, 10) }
	}
	var b strings.Builder
	for g, gs := range s.groups {
		if gs.rebuild != nil {
			fmt.Fprintf(&b, "group %d rebuilding since %d (epoch %d)\n", g, gs.rebuild.since, gs.epoch)
		}
	}
	for _, name := range s.names {
		t := s.tables[name]
		for _, l := range sortedKeys(t.locks) {
			ls := t.locks[l]
			fmt.Fprintf(&b, "%s/%s:", name, lockName(l))
			for i := range ls.holders() {
				h := ls.holder(i)
				fmt.Fprintf(&b, " %s=%v", s.slots[h.clerk].name(), h.mode)
				if h.recovery() {
					b.WriteString("(recovery)")
				}
				if h.revoking() {
					fmt.Fprintf(&b, "(revoke→%v)", h.target)
				}
			}
			for _, w := range ls.waiters() {
				fmt.Fprintf(&b, " wait:%s=%v", s.slots[w.clerk].name(), w.mode)
			}
			b.WriteString("\n")
		}
		for _, id := range sortedKeys(t.recov) {
			r := t.recov[id]
			fmt.Fprintf(&b, "%s recovery of %s: pending=%d recovered=%d running=%v done=%v\n",
				name, id, r.pending, r.recovered, r.recoverer != 0, r.done)
		}
	}
	for _, c := range s.slots {
		if c != nil {
			names := make([]string, len(c.tables))
			for i, t := range c.tables {
				names[i] = t.name
			}
			fmt.Fprintf(&b, "session %s live=%v fenced=%v expired=%v held=%d waiting=%d tables=%v\n",
				c.name(), c.live(), c.fenced, c.expired, c.held, c.waiting, names)
		}
	}
	return b.String()
}

func (c *session) name() string {
	if c.key.session == 1 {
		return c.key.id
	}
	return c.key.id + "/" + strconv.FormatUint(c.key.session, 10)
}
