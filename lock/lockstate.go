package lock

// holder is one clerk session's grant on a lock. 16 bytes.
type holder struct {
	req    uint64 // the clerk's ReqID of the grant; 0 for a recovery hold
	clerk  uint32 // session index; 0 means "no holder" (see lockState.first)
	mode   Mode
	flags  uint8
	target Mode // of the outstanding revoke, when flags&holderRevoking
}

const (
	holderRevoking = 1 << iota // a Revoke to target is outstanding
	holderRecovery             // the implicit log-lock grant of a recovery
)

func (h *holder) revoking() bool { return h.flags&holderRevoking != 0 }
func (h *holder) recovery() bool { return h.flags&holderRecovery != 0 }

// waiter is one queued request. 24 bytes.
type waiter struct {
	req   uint64
	since int64 // tick of arrival, for Metrics.WaitTicks
	clerk uint32
	mode  Mode
}

// lockState is a lock with holders or waiters; a lock with neither is not
// stored. Tables keep it by value: 16 bytes of first holder plus a pointer,
// nil for the common case of one holder and no queue.
//
// Invariants: holders are compatible with each other, except that a
// recovery hold coexists with the frozen holds of the clerk it recovers;
// a session appears at most once among holders and at most once among
// waiters; first.clerk == 0 only if there are no holders.
type lockState struct {
	first holder
	extra *lockExtra
}

type lockExtra struct {
	more    []holder // holders after first
	waiters []waiter // FIFO
}

func (ls *lockState) holders() int {
	if ls.first.clerk == 0 {
		return 0
	}
	if ls.extra == nil {
		return 1
	}
	return 1 + len(ls.extra.more)
}

// holder returns the i-th holder, i < holders().
func (ls *lockState) holder(i int) *holder {
	if i == 0 {
		return &ls.first
	}
	return &ls.extra.more[i-1]
}

// find returns the index of clerk's holder entry, or -1.
func (ls *lockState) find(clerk uint32) int {
	for i := range ls.holders() {
		if ls.holder(i).clerk == clerk {
			return i
		}
	}
	return -1
}

func (ls *lockState) addHolder(h holder) {
	if h.clerk == 0 {
		fail("holder without clerk")
	}
	if ls.first.clerk == 0 {
		ls.first = h
		return
	}
	ls.ext().more = append(ls.extra.more, h)
}

func (ls *lockState) removeHolder(i int) {
	n := ls.holders()
	if i < 0 || i >= n {
		fail("remove holder %d of %d", i, n)
	}
	if n > 1 {
		last := ls.extra.more[n-2]
		*ls.holder(i) = last
		ls.extra.more = ls.extra.more[:n-2]
	} else {
		ls.first = holder{}
	}
	ls.shrink()
}

func (ls *lockState) waiters() []waiter {
	if ls.extra == nil {
		return nil
	}
	return ls.extra.waiters
}

func (ls *lockState) findWaiter(clerk uint32) int {
	for i, w := range ls.waiters() {
		if w.clerk == clerk {
			return i
		}
	}
	return -1
}

func (ls *lockState) addWaiter(w waiter) {
	ls.ext().waiters = append(ls.extra.waiters, w)
}

func (ls *lockState) removeWaiter(i int) {
	ws := ls.extra.waiters
	copy(ws[i:], ws[i+1:])
	ls.extra.waiters = ws[:len(ws)-1]
	ls.shrink()
}

func (ls *lockState) ext() *lockExtra {
	if ls.extra == nil {
		ls.extra = &lockExtra{}
	}
	return ls.extra
}

// shrink drops extra when it is empty, and refills first from more.
func (ls *lockState) shrink() {
	e := ls.extra
	if e == nil {
		return
	}
	if ls.first.clerk == 0 && len(e.more) > 0 {
		ls.first = e.more[len(e.more)-1]
		e.more = e.more[:len(e.more)-1]
	}
	if len(e.more) == 0 && len(e.waiters) == 0 {
		ls.extra = nil
	}
}

func (ls *lockState) empty() bool { return ls.first.clerk == 0 && ls.extra == nil }

func (ls *lockState) anyRevoking() bool {
	for i := range ls.holders() {
		if ls.holder(i).revoking() {
			return true
		}
	}
	return false
}

// writerWaiting reports whether a waiter wants Write.
func (ls *lockState) writerWaiting() bool {
	for _, w := range ls.waiters() {
		if w.mode == Write {
			return true
		}
	}
	return false
}

// check asserts the invariants of ls.
func (ls *lockState) check(lock uint64) {
	n := ls.holders()
	for i := range n {
		hi := ls.holder(i)
		if hi.clerk == 0 || !hi.mode.valid() {
			fail("lock %x: holder %d = %+v", lock, i, *hi)
		}
		for j := i + 1; j < n; j++ {
			hj := ls.holder(j)
			if hi.clerk == hj.clerk {
				fail("lock %x: clerk %d holds twice", lock, hi.clerk)
			}
			// A recovery hold overrides the frozen holds of the dead
			// clerk; the server checks that when it starts a recovery.
			ok := compatible(hi.mode, hj.mode) || hi.recovery() || hj.recovery()
			if !ok {
				fail("lock %x: %v and %v held at once", lock, hi.mode, hj.mode)
			}
		}
	}
	ws := ls.waiters()
	for i := range ws {
		for j := i + 1; j < len(ws); j++ {
			if ws[i].clerk == ws[j].clerk {
				fail("lock %x: clerk %d waits twice", lock, ws[i].clerk)
			}
		}
	}
}
