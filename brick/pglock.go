package brick

import (
	"cmp"
	"slices"
	"sync"
)

// pgLock orders a PG's work at a brick. Whole-PG work (backfill batches,
// inventories, reconciliation, dropping an orphaned PG) takes the PG
// exclusively and waits for everything else. Client requests and
// replicated changes take the PG shared and then a range of its blocks:
// exclusive for changes, shared for reads. So:
//   - a request takes a set of block ranges at once (a client's WriteV
//     gathers writes scattered over the PG), with one ticket;
//   - changes to disjoint blocks of one PG are under way at once, at the
//     primary and at the backups, and their store batches share fsyncs (a
//     PG used to apply one change at a time: 4 KiB random writes ran at
//     64 PGs / one replicated round trip);
//   - a read never sees a change that is not yet on every replica (it waits
//     for the changes in flight on its blocks), and a change that merges a
//     partial block reads a base no other change is writing;
//   - requests whose blocks overlap run in arrival order (tickets), so a
//     change is never overtaken by a later one to the same block: the
//     primary's seq order and its store's order agree per block, and the
//     backups see them in that order too (the primary forwards a change only
//     once the one before it on the same blocks is acknowledged);
//   - whole-PG work sees no change half done: its horizon (the highest seq
//     assigned) covers every change applied anywhere.
type pgLock struct {
	rw     sync.RWMutex
	mu     sync.Mutex
	cond   *sync.Cond
	ticket uint64
	held   []blockRange // requests holding or waiting for a range, in ticket order
}

type blockRange struct {
	ticket uint64
	spans  []span // sorted, disjoint, not adjacent
	excl   bool
}

// span is the blocks [lo, hi) of a PG.
type span struct{ lo, hi uint64 }

// normalize sorts spans and merges those that overlap or touch (in place).
func normalize(spans []span) []span {
	spans = slices.DeleteFunc(spans, func(s span) bool { return s.lo >= s.hi })
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	out := spans[:0]
	for _, s := range spans {
		if n := len(out); n > 0 && s.lo <= out[n-1].hi {
			out[n-1].hi = max(out[n-1].hi, s.hi)
			continue
		}
		out = append(out, s)
	}
	return out
}

// overlap reports whether two normalized span lists share a block.
func overlap(a, b []span) bool {
	for len(a) > 0 && len(b) > 0 {
		switch {
		case a[0].hi <= b[0].lo:
			a = a[1:]
		case b[0].hi <= a[0].lo:
			b = b[1:]
		default:
			return true
		}
	}
	return false
}

func newPGLock() *pgLock {
	l := &pgLock{}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// lockRanges takes the PG shared and the blocks of spans (exclusive or
// shared) once no earlier request holds or waits for an overlapping block
// in a conflicting mode; it returns the unlock. It may reorder spans.
func (l *pgLock) lockRanges(spans []span, excl bool) func() {
	l.rw.RLock()
	l.mu.Lock()
	l.ticket++
	me := blockRange{l.ticket, normalize(spans), excl}
	l.held = append(l.held, me)
	for l.blocked(me) {
		l.cond.Wait()
	}
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		for i, r := range l.held {
			if r.ticket == me.ticket {
				l.held = append(l.held[:i], l.held[i+1:]...)
				break
			}
		}
		l.cond.Broadcast()
		l.mu.Unlock()
		l.rw.RUnlock()
	}
}

// blocked reports whether an earlier request conflicts with me.
func (l *pgLock) blocked(me blockRange) bool {
	for _, r := range l.held {
		if r.ticket >= me.ticket {
			return false
		}
		if (r.excl || me.excl) && overlap(r.spans, me.spans) {
			return true
		}
	}
	return false
}
