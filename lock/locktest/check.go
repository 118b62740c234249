package locktest

import (
	"fmt"
	"slices"

	"github.com/plumeria-fs/plumeria/lock"
)

// checker asserts, after every step:
//   - safety: on each lock, among all clerks that believe they hold it
//     under a lease valid from their own point of view, never two writers
//     and never a writer with a reader. A running recovery counts as a
//     Write hold of the dead clerk's log lock, so recoveries of one log
//     never overlap each other or the log's owner;
//   - recovery order: what a session believed when it died (crash or lost
//     lease) is not held in a conflicting mode by anyone else until some
//     clerk finished recovering that session's log in the table;
//
// and at the end of a run (final):
//   - every dead session's log was recovered (the registry holds only the
//     live sessions);
//   - liveness: every wish made before the quiet end of the calm phase was
//     granted.
type checker struct {
	w       *World
	all     []belief          // every belief at this step, sorted by key
	last    [][]belief        // per node: its beliefs at the last check
	dead    []deadSession     // ended sessions whose beliefs await recovery
	recDone map[recKey]uint64 // (clerk id, table) → highest session recovered

	sessions, recoveriesDone, granted, downgrades int
}

type belief struct {
	node     int
	key      wishKey
	mode     lock.Mode
	recovers string // dead clerk id when the belief comes from a recovery
}

type deadSession struct {
	id      string
	session uint64
	beliefs []belief
}

type recKey struct{ id, table string }

func (k *checker) init(w *World) {
	k.w = w
	k.last = make([][]belief, len(w.nodes))
	k.recDone = map[recKey]uint64{}
}

func (k *checker) after() error {
	k.all = k.all[:0]
	for _, n := range k.w.nodes {
		k.last[n.idx] = k.beliefs(n, k.last[n.idx][:0])
		k.all = append(k.all, k.last[n.idx]...)
	}
	slices.SortFunc(k.all, func(a, b belief) int { return cmpWish(a.key, b.key) })
	for i := 0; i < len(k.all); {
		j := i + 1
		for j < len(k.all) && k.all[j].key == k.all[i].key {
			j++
		}
		if err := exclusive(k.all[i].key, k.all[i:j]); err != nil {
			return err
		}
		i = j
	}
	if k.w.opts.NoRegistry {
		return nil // a new group owner cannot know dead clerks it never heard of
	}
	return k.checkDead()
}

// beliefs lists what node n may use now.
func (k *checker) beliefs(n *clerkNode, out []belief) []belief {
	if n.c == nil || n.c.Lost() {
		return out
	}
	n.c.EachHeld(func(t string, l uint64, m lock.Mode) {
		out = append(out, belief{node: n.idx, key: wishKey{t, l}, mode: m})
	})
	for _, t := range k.w.opts.Tables {
		for _, d := range n.c.Recovering(t) {
			out = append(out, belief{node: n.idx, key: wishKey{t, lock.LogLock(d.Clerk)}, mode: lock.Write, recovers: d.Clerk})
		}
	}
	return out
}

func exclusive(key wishKey, bs []belief) error {
	for i, a := range bs {
		for _, b := range bs[i+1:] {
			if a.mode == lock.Write || b.mode == lock.Write {
				return fmt.Errorf("SAFETY: %s/%x held by n%d (%v%s) and n%d (%v%s)", key.table, key.lock,
					a.node, a.mode, recovering(a), b.node, b.mode, recovering(b))
			}
		}
	}
	return nil
}

func recovering(b belief) string {
	if b.recovers != "" {
		return ", recovering " + b.recovers
	}
	return ""
}

// ended freezes what a dying session believed last.
func (k *checker) ended(n *clerkNode) {
	var bs []belief
	for _, b := range k.last[n.idx] {
		if b.recovers == "" {
			bs = append(bs, b)
		}
	}
	k.last[n.idx] = nil
	if len(bs) > 0 {
		k.dead = append(k.dead, deadSession{id: n.id, session: n.session, beliefs: bs})
	}
}

// checkDead asserts that no lock a dead session believed in is held in a
// conflicting mode before its log is recovered; the recoverer's hold on
// the dead clerk's log lock is the exception that makes recovery possible.
func (k *checker) checkDead() error {
	keep := k.dead[:0]
	for _, d := range k.dead {
		var pending []belief
		for _, b := range d.beliefs {
			if k.recDone[recKey{d.id, b.key.table}] >= d.session {
				continue
			}
			pending = append(pending, b)
			for _, o := range k.holding(b.key) {
				if o.recovers == d.id || (b.mode != lock.Write && o.mode != lock.Write) {
					continue
				}
				return fmt.Errorf("RECOVERY ORDER: %s/%x (%v) of dead %s/%d held by n%d (%v) before recovery",
					b.key.table, b.key.lock, b.mode, d.id, d.session, o.node, o.mode)
			}
		}
		if len(pending) > 0 {
			d.beliefs = pending
			keep = append(keep, d)
		}
	}
	k.dead = keep
	return nil
}

// holding returns the beliefs on key at this step.
func (k *checker) holding(key wishKey) []belief {
	i, _ := slices.BinarySearchFunc(k.all, key, func(b belief, key wishKey) int { return cmpWish(b.key, key) })
	j := i
	for j < len(k.all) && k.all[j].key == key {
		j++
	}
	return k.all[i:j]
}

// recovered notes that an owner finished recovering id up to session.
func (k *checker) recovered(id string, session uint64, table string) {
	key := recKey{id, table}
	k.recDone[key] = max(k.recDone[key], session)
	k.recoveriesDone++
}

// final checks the end of a run: all recovered, all wishes granted.
func (k *checker) final() error {
	w := k.w
	var keys []sessKey
	for key := range w.coord.registry {
		keys = append(keys, key)
	}
	slices.SortFunc(keys, func(a, b sessKey) int { return cmpString(a.id, b.id) })
	for _, key := range keys {
		n := w.nodes[slices.IndexFunc(w.nodes, func(n *clerkNode) bool { return n.id == key.id })]
		if n.c == nil || n.session != key.session {
			return fmt.Errorf("LIVENESS: dead session %s/%d never recovered in %v", key.id, key.session, w.coord.registry[key])
		}
	}
	for _, n := range w.nodes {
		switch {
		case n.c == nil || n.c.Lost():
			return fmt.Errorf("LIVENESS: %s not mounted at the end", n.id)
		case len(n.wishes) > 0:
			return fmt.Errorf("LIVENESS: %s still waits for %v", n.id, sortedWishes(n.wishes))
		}
	}
	return nil
}
