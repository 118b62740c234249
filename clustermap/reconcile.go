package clustermap

import (
	"maps"
	"slices"
	"sort"
)

// Reconcile is the coordinator's failure and membership handling as a pure
// function. Given the current map and the set of bricks heard from recently,
// it returns the next map, or nil when nothing needs to change. Rules:
//
//  1. A brick not heard from is down; a down brick heard from again is up.
//  2. A down brick leaves every PG, except that a PG never loses its last
//     in-sync member (its data would have nowhere else to come from).
//  3. The primary is always an in-sync member: in-sync members keep their
//     order and come first.
//  4. A PG short of replicas gets eligible bricks (up, not draining, on a
//     host it does not use yet) as syncing members; the primary backfills
//     them and reports back (MarkSynced).
//  5. A draining brick gets replaced the same way; it leaves a PG once the
//     PG has its full count of in-sync members without it. A primary that
//     leaves first hands the lead to the next in-sync member. A misplaced
//     member (of another class than its volume's, without a label its
//     volume's domain level needs, or sharing a domain with an earlier
//     member: a brick restarted with another --class or --domain) is
//     replaced the same way.
//  6. Balance: while no more than RebalanceMovesMax PGs are syncing, a PG
//     replica moves off a full brick, or from the brick furthest above its
//     target (Balance: its class's replicas shared in proportion to
//     capacity) to one of its class furthest below it when they are two or
//     more replicas apart: the new brick joins as syncing and the old one
//     is marked leaving (it then leaves by rule 5).
//  7. A stripe group's down member is replaced in place by a syncing
//     brick that keeps the profile's rules, while K in-sync members are up
//     (reconcileSG); its leader rebuilds it and reports (MarkSGSynced).
//     A draining member, or one that no longer fits the profile, of a
//     healthy group is replaced the same way, one at a time. Stripe groups
//     are not rebalanced.
//
// Reconcile never appoints a new primary by itself: the caller must only
// declare a brick dead after its primary lease has run out.
func Reconcile(m *Map, alive map[string]bool) *Map {
	n := m.Clone()
	changed := false
	for i := range n.Bricks {
		b := &n.Bricks[i]
		switch {
		case b.State == BrickUp && !alive[b.Name]:
			b.State, changed = BrickDown, true
		case b.State == BrickDown && alive[b.Name]:
			b.State, changed = BrickUp, true
		}
	}
	l := loadOf(n)
	touched := map[[2]int]bool{}
	for vi := range n.Volumes {
		v := &n.Volumes[vi]
		for pi := range v.PGs {
			if reconcilePG(n, l, v, pi) {
				changed = true
				touched[[2]int{vi, pi}] = true
			}
		}
		for gi := range v.SGs {
			if reconcileSG(n, l, v, gi) {
				changed = true
			}
		}
	}
	if rebalance(n, l, touched) {
		changed = true
	}
	if !changed {
		return nil
	}
	n.Epoch++
	return n
}

func reconcilePG(m *Map, l load, v *Volume, pi int) bool {
	p := &v.PGs[pi]
	before := PG{Bricks: slices.Clone(p.Bricks), Syncing: slices.Clone(p.Syncing), Leaving: slices.Clone(p.Leaving)}
	up := func(name string) bool { b := m.Brick(name); return b != nil && b.State == BrickUp }
	r := rulesOf(v)
	misplaced := r.misplaced(m, p)
	draining := func(name string) bool {
		b := m.Brick(name)
		return b != nil && b.Draining || slices.Contains(p.Leaving, name) || misplaced[name]
	}

	// Rule 2: drop down members, keeping at least one in-sync member.
	inSyncUp := 0
	for _, b := range p.InSync() {
		if up(b) {
			inSyncUp++
		}
	}
	var keep []string
	for _, b := range p.Bricks {
		if up(b) || (inSyncUp == 0 && !slices.Contains(p.Syncing, b)) {
			keep = append(keep, b)
		} else {
			l.replicas[b]--
		}
	}
	p.Syncing = slices.DeleteFunc(p.Syncing, func(s string) bool { return !slices.Contains(keep, s) })
	p.Bricks = keep

	// Rule 5: a draining member leaves once enough others are in sync.
	for _, d := range slices.Clone(p.Bricks) {
		if !draining(d) || slices.Contains(p.Syncing, d) {
			continue
		}
		others := 0
		for _, b := range p.InSync() {
			if b != d && !draining(b) && up(b) {
				others++
			}
		}
		if others < v.Replicas {
			continue
		}
		if d == p.Bricks[0] && up(d) {
			// Hand off first: d stays a backup this epoch, so every write the
			// new primary acknowledges still reaches it; it leaves later.
			p.Bricks = append(slices.Clone(p.Bricks[1:]), d)
			continue
		}
		p.Bricks = slices.DeleteFunc(p.Bricks, func(s string) bool { return s == d })
		l.replicas[d]--
	}
	// Never backfill onto a draining brick.
	var drop []string
	for _, s := range p.Syncing {
		if draining(s) {
			drop = append(drop, s)
		}
	}
	p.Syncing = slices.DeleteFunc(p.Syncing, draining)
	p.Bricks = slices.DeleteFunc(p.Bricks, func(s string) bool { return slices.Contains(drop, s) })

	// Rule 4: add replacements until the non-draining members reach Replicas.
	for {
		count := 0
		for _, b := range p.Bricks {
			if !draining(b) {
				count++
			}
		}
		if count >= v.Replicas {
			break
		}
		b := pickReplica(m, l, r, pi, p.Bricks, misplaced)
		if b == "" {
			break
		}
		p.Bricks = append(p.Bricks, b)
		p.Syncing = append(p.Syncing, b)
		l.replicas[b]++
	}

	p.Leaving = slices.DeleteFunc(p.Leaving, func(s string) bool { return !slices.Contains(p.Bricks, s) })
	if len(p.Leaving) == 0 {
		p.Leaving = nil // encodes the same as absent
	}
	if len(p.Syncing) == 0 {
		p.Syncing = nil
	}

	// Rule 3: in-sync members first, order otherwise kept.
	ordered := p.InSync()
	for _, b := range p.Bricks {
		if slices.Contains(p.Syncing, b) {
			ordered = append(ordered, b)
		}
	}
	p.Bricks = ordered
	if slices.Equal(before.Bricks, p.Bricks) && slices.Equal(before.Syncing, p.Syncing) && slices.Equal(before.Leaving, p.Leaving) {
		return false
	}
	p.Since = m.Epoch + 1 // Reconcile's result has epoch m.Epoch+1
	return true
}

// MarkSynced records that brick finished its backfill of a PG, reported by
// the PG's primary for the membership of epoch since (the PG's Since when
// the backfill started). It returns nil if the report does not apply any
// more: another primary, the brick not syncing, or membership changed.
func MarkSynced(m *Map, vol uint64, pg uint32, brick, reporter string, since uint64) *Map {
	v := m.VolumeByID(vol)
	if v == nil || int(pg) >= len(v.PGs) {
		return nil
	}
	p := v.PGs[pg]
	if p.Primary() != reporter || !slices.Contains(p.Syncing, brick) || p.Since != since {
		return nil
	}
	n := m.Clone()
	np := &n.VolumeByID(vol).PGs[pg]
	np.Syncing = slices.DeleteFunc(np.Syncing, func(s string) bool { return s == brick })
	np.Since = m.Epoch + 1
	if r := Reconcile(n, upSet(n)); r != nil { // a draining brick may now leave
		return r // one epoch above m, like n
	}
	n.Epoch++
	return n
}

// upSet returns the bricks the map says are up.
func upSet(m *Map) map[string]bool {
	s := map[string]bool{}
	for _, b := range m.Bricks {
		if b.State == BrickUp {
			s[b.Name] = true
		}
	}
	return s
}

// PGsOn counts the placement groups that list brick as a member.
func PGsOn(m *Map, brick string) int {
	n := 0
	for _, v := range m.Volumes {
		for _, p := range v.PGs {
			if slices.Contains(p.Bricks, brick) {
				n++
			}
		}
	}
	return n
}

// RebalanceMovesMax bounds how many PGs may be syncing before rebalancing
// starts another move, so growth never crowds out repair.
const RebalanceMovesMax = 8

// rebalance is rule 6. It changes n in place and reports whether it did.
// PGs touched by rules 1-5 in this round are left alone until the next.
//
// It ends: a move off a full brick never lands on a full one, and every
// other move lowers the sum of squared deviations from the targets by at
// least two (deviations d_hi ≥ d_lo + 2 become d_hi-1 and d_lo+1).
func rebalance(n *Map, l load, touched map[[2]int]bool) bool {
	syncing := 0
	for _, v := range n.Volumes {
		for _, p := range v.PGs {
			if len(p.Syncing) > 0 {
				syncing++
			}
		}
	}
	moved := false
	for syncing < RebalanceMovesMax && moveOnce(n, l, touched) {
		syncing++
		moved = true
	}
	return moved
}

// moveOnce starts one move of rule 6, class by class, and reports whether
// it found one.
func moveOnce(n *Map, l load, touched map[[2]int]bool) bool {
	for _, pool := range pools(n, l) {
		his := slices.Clone(pool)
		sort.SliceStable(his, func(i, j int) bool {
			a, b := his[i], his[j]
			if a.full != b.full {
				return a.full
			}
			return a.dev > b.dev
		})
		los := slices.DeleteFunc(slices.Clone(pool), func(b brickLoad) bool { return b.full })
		sort.SliceStable(los, func(i, j int) bool { return los[i].dev < los[j].dev })
		for _, hi := range his {
			if l.replicas[hi.name] == 0 {
				continue
			}
			for _, lo := range los {
				if lo.name == hi.name {
					continue
				}
				if !hi.full && hi.dev-lo.dev < 2 {
					break
				}
				if moveOne(n, l, hi.name, lo.name, touched) {
					return true
				}
			}
		}
	}
	return false
}

// brickLoad is one brick's place in its class's balance.
type brickLoad struct {
	name        string
	class       string
	units       int     // PG replicas it holds (leaving ones counted where they go)
	target, dev float64 // its share of its class's replicas by capacity, and units - target
	full        bool
}

// pools groups the bricks that are up and not draining by class, each with
// its target: the class's replicas times its capacity over the class's.
func pools(n *Map, l load) [][]brickLoad {
	byClass := map[string][]brickLoad{}
	for i := range n.Bricks {
		b := &n.Bricks[i]
		if !eligible(b) {
			continue
		}
		c := b.ClassName()
		byClass[c] = append(byClass[c], brickLoad{name: b.Name, class: c, units: l.replicas[b.Name], full: b.Full})
	}
	var out [][]brickLoad
	for _, c := range slices.Sorted(maps.Keys(byClass)) {
		pool := byClass[c]
		var units, weight float64
		for _, b := range pool {
			units += float64(b.units)
			weight += l.weight[b.name]
		}
		for i := range pool {
			pool[i].target = units * l.weight[pool[i].name] / weight
			pool[i].dev = float64(pool[i].units) - pool[i].target
		}
		out = append(out, pool)
	}
	return out
}

// moveOne starts moving one calm PG replica from hi to lo.
func moveOne(n *Map, l load, hi, lo string, touched map[[2]int]bool) bool {
	lb := n.Brick(lo)
	for vi := range n.Volumes {
		v := &n.Volumes[vi]
		r := rulesOf(v)
		if !r.takesNew(lb) {
			continue
		}
		for pi := range v.PGs {
			p := &v.PGs[pi]
			if touched[[2]int{vi, pi}] || len(p.Syncing) > 0 || len(p.Leaving) > 0 || len(p.Bricks) != v.Replicas ||
				!slices.Contains(p.Bricks, hi) || slices.Contains(p.Bricks, lo) {
				continue
			}
			fits := true
			for _, mem := range p.Bricks {
				if mb := n.Brick(mem); mb == nil || mb.State != BrickUp || r.conflicts(mb, lb) {
					fits = false
				}
			}
			if !fits {
				continue
			}
			p.Bricks = append(p.Bricks, lo)
			p.Syncing = append(p.Syncing, lo)
			p.Leaving = append(p.Leaving, hi)
			p.Since = n.Epoch + 1
			l.replicas[lo]++
			l.replicas[hi]--
			return true
		}
	}
	return false
}

// MarkSyncing records that a member missed a change its primary applied
// (reported by the primary): the member becomes syncing, so it is
// backfilled before it counts as a replica or can lead. A member already
// syncing gets a new Since, which voids the backfill pass under way (it
// may have copied the block before the change) so a new pass starts. It
// returns nil if the brick is no longer a member, and ok false if the
// report is not from the primary.
//
// The primary may report itself: its own apply failed while another member
// applied the change. The first other in-sync member then leads, and the
// reporter is backfilled from it. With no other in-sync member nothing
// changes (n nil): the members that hold the change are syncing and are
// overwritten from the primary anyway.
func MarkSyncing(m *Map, vol uint64, pg uint32, brick, reporter string) (n *Map, ok bool) {
	v := m.VolumeByID(vol)
	if v == nil || int(pg) >= len(v.PGs) {
		return nil, false
	}
	p := v.PGs[pg]
	if p.Primary() != reporter {
		return nil, false
	}
	if !slices.Contains(p.Bricks, brick) {
		return nil, true
	}
	n = m.Clone()
	np := &n.VolumeByID(vol).PGs[pg]
	if brick == reporter {
		in := p.InSync()
		if len(in) < 2 {
			return nil, true
		}
		next := in[1]
		rest := slices.DeleteFunc(slices.Clone(np.Bricks), func(s string) bool { return s == next })
		np.Bricks = append([]string{next}, rest...)
	}
	if !slices.Contains(np.Syncing, brick) {
		np.Syncing = append(np.Syncing, brick)
	}
	np.Bricks = append(slices.DeleteFunc(np.Bricks, func(s string) bool { return s == brick }), brick)
	np.Since = m.Epoch + 1
	n.Epoch++
	return n, true
}
