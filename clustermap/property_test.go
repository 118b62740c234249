package clustermap_test

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/plumeria-fs/plumeria/clustermap"
)

var (
	propSeed  = flag.Uint64("clustermap.seed", 0, "run TestPropertyRandomOps with this seed only")
	propSeeds = flag.Int("clustermap.seeds", 64, "number of seeds TestPropertyRandomOps runs")
	propSteps = flag.Int("clustermap.steps", 200, "steps per seed in TestPropertyRandomOps")
)

// TestPropertyRandomOps runs random sequences of membership changes through
// AddVolume, Reconcile and MarkSynced and checks every map on the way.
// A failure names its seed; rerun it with -clustermap.seed=N -v.
func TestPropertyRandomOps(t *testing.T) {
	seeds := make([]uint64, 0, *propSeeds)
	if *propSeed != 0 {
		seeds = append(seeds, *propSeed)
	} else {
		n := *propSeeds
		if testing.Short() {
			n = 20
		}
		for i := range n {
			seeds = append(seeds, uint64(i+1))
		}
	}
	var mu sync.Mutex
	total := map[string]int{}
	t.Cleanup(func() {
		// The generator must reach the interesting states, or the checks
		// above prove little.
		t.Logf("events over %d seeds: %v", len(seeds), total)
		if len(seeds) < 20 {
			return
		}
		for _, e := range []string{"all in-sync down", "draining brick left", "primary moved",
			"degraded", "AddVolume refused", "same-domain volume", "brick returned to pg",
			"volume with class or domain", "fullness changed", "class changed", "profile added", "profile refused",
			"stripe member replaced", "stripe member synced", "stripe member moved off"} {
			if total[e] == 0 {
				t.Errorf("no run reached %q", e)
			}
		}
	})
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, seed)
			for step := range *propSteps {
				w.step(step)
			}
			w.logf("done: epoch %d, %d bricks, %d volumes", w.m.Epoch, len(w.m.Bricks), len(w.m.Volumes))
			mu.Lock()
			defer mu.Unlock()
			for k, v := range w.events {
				total[k] += v
			}
		})
	}
}

// world is the state of one random run: the map and which bricks are
// really alive (the coordinator's view of heartbeats).
type world struct {
	t      *testing.T
	rng    *rand.Rand
	seed   uint64
	m      *clustermap.Map
	live   map[string]bool
	hosts  int // hosts made so far
	nextB  int
	trace  []string
	events map[string]int  // how often each interesting situation arose
	seen   map[string]bool // "vol/pg/brick" memberships ever seen
}

func newWorld(t *testing.T, seed uint64) *world {
	w := &world{t: t, rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), seed: seed,
		m: &clustermap.Map{Epoch: 1, NextVolumeID: 1}, live: map[string]bool{}, events: map[string]int{}, seen: map[string]bool{}}
	for range 3 + w.rng.IntN(3) {
		w.addBrick()
	}
	return w
}

func (w *world) logf(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf(format, args...))
	if *propSeed != 0 {
		w.t.Logf(format, args...)
	}
}

func (w *world) fatalf(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("seed %d: %s\ntrace (last 30):\n  %s\nmap: %s", w.seed, fmt.Sprintf(format, args...),
		joinLast(w.trace, 30), clustermap.Encode(w.m))
}

func joinLast(s []string, n int) string {
	if len(s) > n {
		s = s[len(s)-n:]
	}
	out := ""
	for i, l := range s {
		if i > 0 {
			out += "\n  "
		}
		out += l
	}
	return out
}

func (w *world) pick(s []string) string { return s[w.rng.IntN(len(s))] }

// addBrick puts a new brick on a new or an existing host, and a random rack
// and site (racks and sites are not nested, deliberately).
func (w *world) addBrick() {
	if w.hosts == 0 || w.rng.IntN(3) != 0 {
		w.hosts++
	}
	host := fmt.Sprintf("h%d", w.rng.IntN(w.hosts))
	rack := fmt.Sprintf("r%d", w.rng.IntN(4))
	site := ""
	if w.rng.IntN(2) == 0 {
		site = fmt.Sprintf("s%d", w.rng.IntN(2))
	}
	name := fmt.Sprintf("b%02d", w.nextB)
	w.nextB++
	n := w.m.Clone()
	b := brick(name, host, rack, site)
	if w.rng.IntN(4) == 0 {
		b.Domain[clustermap.LevelRack] = "" // some bricks have no rack
		delete(b.Domain, clustermap.LevelRack)
	}
	b.Class = []string{"", "", "ssd"}[w.rng.IntN(3)]
	b.CapacityBytes = []int64{0, 1 << 40, 2 << 40, 4 << 40}[w.rng.IntN(4)]
	if w.rng.IntN(4) != 0 {
		b.Features = []string{clustermap.FeatureEC}
	}
	n.PutBrick(b)
	n.Epoch++
	w.logf("add brick %s host=%s rack=%s site=%s class=%s capacity=%d", name, host, b.Domain[clustermap.LevelRack], site, b.Class, b.CapacityBytes)
	w.live[name] = true
	w.install(n)
}

// install adopts n (a map an operator change produced) and reconciles.
func (w *world) install(n *clustermap.Map) {
	w.t.Helper()
	if err := n.Validate(); err != nil {
		w.fatalf("invalid map: %v", err)
	}
	w.m = n
	w.reconcile()
}

func (w *world) reconcile() {
	w.t.Helper()
	prev := w.m
	next := clustermap.Reconcile(prev, w.live)
	if next == nil {
		w.checkStates(prev)
		return
	}
	if next.Epoch != prev.Epoch+1 {
		w.fatalf("Reconcile: epoch %d → %d", prev.Epoch, next.Epoch)
	}
	w.check(prev, next)
	// Reconcile settles: with nothing new, at most one more step (a
	// two-step primary hand-off is allowed), then nil.
	if again := clustermap.Reconcile(next, w.live); again != nil {
		w.check(next, again)
		if third := clustermap.Reconcile(again, w.live); third != nil {
			w.fatalf("Reconcile does not settle:\nonce   %s\ntwice  %s\nthrice %s",
				clustermap.Encode(next), clustermap.Encode(again), clustermap.Encode(third))
		}
		w.events["reconcile took two steps"]++
		next = again
	}
	w.m = next
	w.checkStates(next)
}

// checkStates: after Reconcile, the map's brick states match reality.
func (w *world) checkStates(m *clustermap.Map) {
	w.t.Helper()
	for _, b := range m.Bricks {
		if (b.State == clustermap.BrickUp) != w.live[b.Name] {
			w.fatalf("brick %s state %s, alive %v", b.Name, b.State, w.live[b.Name])
		}
	}
}

// check runs every invariant on next, derived from prev.
func (w *world) check(prev, next *clustermap.Map) {
	w.t.Helper()
	checkInvariants(w.t, prev, next)
	if next.Epoch <= prev.Epoch {
		w.fatalf("epoch %d → %d", prev.Epoch, next.Epoch)
	}
	if w.rng.IntN(8) == 0 { // costly; a sample suffices
		got, err := clustermap.Decode(clustermap.Encode(next))
		if err != nil || !mapsEqual(got, next) {
			w.fatalf("map does not round-trip: %v", err)
		}
	}
	for _, v := range next.Volumes {
		pv := prev.VolumeByID(v.ID)
		w.checkSGs(prev, next, &v, pv)
		for i, p := range v.PGs {
			w.count(next, &v, pv, i, p)
			w.checkFull(next, &v, i, p)
			w.checkNewMembers(next, &v, pv, i, p)
			if pv != nil {
				w.checkDrainLeave(next, &v, i, pv.PGs[i], p)
				// The primary changes only when the old one leaves the PG,
				// drains, or is moved off by rebalancing (Leaving).
				if old := pv.PGs[i].Primary(); slices.Contains(p.Bricks, old) && p.Primary() != old && !next.Brick(old).Draining &&
					!slices.Contains(pv.PGs[i].Leaving, old) && !misplaced(next, &v, pv.PGs[i], old) {
					w.fatalf("volume %s pg %d: primary %s still a member but replaced: %+v → %+v",
						v.Name, i, old, pv.PGs[i], p)
				}
			}
		}
	}
}

// count notes the interesting situations pg i of v is in.
func (w *world) count(m *clustermap.Map, v *clustermap.Volume, pv *clustermap.Volume, i int, p clustermap.PG) {
	if !slices.ContainsFunc(p.InSync(), func(b string) bool { return m.Brick(b).State == clustermap.BrickUp }) {
		w.events["all in-sync down"]++
	}
	if len(p.Bricks) < v.Replicas {
		w.events["degraded"]++
	}
	if v.AllowSameDomain {
		w.events["same-domain volume"]++
	}
	if pv == nil {
		return
	}
	old := pv.PGs[i]
	if old.Primary() != p.Primary() {
		w.events["primary moved"]++
	}
	for _, b := range old.Bricks {
		if !slices.Contains(p.Bricks, b) && m.Brick(b).Draining && m.Brick(b).State == clustermap.BrickUp {
			w.events["draining brick left"]++
		}
	}
	for _, b := range p.Bricks {
		if !slices.Contains(old.Bricks, b) && w.seen[fmt.Sprint(v.ID, "/", i, "/", b)] {
			w.events["brick returned to pg"]++
		}
		w.seen[fmt.Sprint(v.ID, "/", i, "/", b)] = true
	}
}

// checkFull: a PG short of non-draining, well-placed members has no brick
// left that could join it (Rule 4 is complete).
func (w *world) checkFull(m *clustermap.Map, v *clustermap.Volume, i int, p clustermap.PG) {
	w.t.Helper()
	count := 0
	for _, b := range p.Bricks {
		if !m.Brick(b).Draining && !misplaced(m, v, p, b) {
			count++
		}
	}
	if count >= v.Replicas {
		return
	}
	for _, b := range m.Bricks {
		if b.State != clustermap.BrickUp || b.Draining || slices.Contains(p.Bricks, b.Name) {
			continue
		}
		if takesNew(m, v, p, p.Bricks, &b) {
			w.fatalf("volume %s pg %d: %d of %d replicas, yet %s could join: %+v", v.Name, i, count, v.Replicas, b.Name, p)
		}
	}
}

// checkNewMembers: a brick that joins a PG keeps the volume's rules: its
// class, not full, distinct domains up to the volume's level.
func (w *world) checkNewMembers(m *clustermap.Map, v *clustermap.Volume, pv *clustermap.Volume, i int, p clustermap.PG) {
	w.t.Helper()
	if v.Class != "" || v.Domain != "" {
		w.events["volume with class or domain"]++
	}
	for _, b := range p.Bricks {
		if pv != nil && slices.Contains(pv.PGs[i].Bricks, b) {
			continue
		}
		others := slices.DeleteFunc(slices.Clone(p.Bricks), func(s string) bool { return s == b })
		if !takesNew(m, v, p, others, m.Brick(b)) {
			w.fatalf("volume %s (class %q, domain %q) pg %d: new member %s (class %q, full %v, domain %v) breaks its rules: %+v",
				v.Name, v.Class, v.Domain, i, b, m.Brick(b).Class, m.Brick(b).Full, m.Brick(b).Domain, p)
		}
	}
}

// checkSGs: a stripe group changes only by replacing a down member in
// place, never while fewer than K in-sync members are up unless the one
// replaced was syncing, and a new member keeps the profile's rules.
func (w *world) checkSGs(prev, next *clustermap.Map, v, pv *clustermap.Volume) {
	w.t.Helper()
	for i, g := range v.SGs {
		p := v.Profile(g.Profile)
		if pv == nil || i >= len(pv.SGs) {
			w.events["stripe group made"]++
			continue
		}
		old := pv.SGs[i]
		for pos, b := range g.Bricks {
			ob := old.Bricks[pos]
			if b == ob {
				continue
			}
			w.events["stripe member replaced"]++
			pol0 := &clustermap.Volume{Class: p.Class, Domain: p.Level}
			if obb := next.Brick(ob); obb != nil && obb.State == clustermap.BrickUp {
				// Only a draining or misfit member of a healthy group, one at a time.
				healthy := len(old.Syncing) == 0
				for _, x := range old.Bricks {
					healthy = healthy && next.Brick(x).State == clustermap.BrickUp
				}
				misfit := !admits(pol0, obb) || !slices.Contains(obb.Features, clustermap.FeatureEC)
				if !healthy || !(obb.Draining || misfit) || len(g.Syncing) != 1 {
					w.fatalf("volume %s sg %d: up member %s replaced by %s: %+v → %+v", v.Name, i, ob, b, old, g)
				}
				w.events["stripe member moved off"]++
			}
			if !slices.Contains(old.Syncing, ob) {
				up := 0
				for _, s := range old.InSync() {
					if next.Brick(s).State == clustermap.BrickUp {
						up++
					}
				}
				if up < p.K {
					w.fatalf("volume %s sg %d: in-sync %s replaced with %d < K=%d in-sync members up", v.Name, i, ob, up, p.K)
				}
			}
			nb := next.Brick(b)
			pol := &clustermap.Volume{Class: p.Class, Domain: p.Level,
				AllowSameDomain: v.AllowSameDomain && (p.Level == "" || p.Level == clustermap.LevelHost)}
			if !slices.Contains(g.Syncing, b) || !slices.Contains(nb.Features, clustermap.FeatureEC) || nb.Full || nb.Draining ||
				nb.State != clustermap.BrickUp || !admits(pol, nb) {
				w.fatalf("volume %s sg %d: new member %s breaks the rules of %s: %+v", v.Name, i, b, p, g)
			}
			for _, o := range g.Bricks {
				if o != b && conflicts(pol, next.Brick(o), nb) {
					w.fatalf("volume %s sg %d (%s): %s conflicts with %s", v.Name, i, p, b, o)
				}
			}
		}
	}
}

// The test's own statement of the placement rules (placement.go).
func admits(v *clustermap.Volume, b *clustermap.Brick) bool {
	if v.Class != "" && b.ClassName() != v.Class {
		return false
	}
	return v.Domain != clustermap.LevelRack || b.Domain[clustermap.LevelRack] != ""
}

func conflicts(v *clustermap.Volume, a, b *clustermap.Brick) bool {
	if v.AllowSameDomain {
		return false
	}
	return hostOf(a) == hostOf(b) || v.Domain == clustermap.LevelRack && a.Domain[clustermap.LevelRack] == b.Domain[clustermap.LevelRack]
}

// takesNew: b may join a PG of v with these members (p lists them all, in
// order): a misplaced member keeps only the host rule with a newcomer.
func takesNew(m *clustermap.Map, v *clustermap.Volume, p clustermap.PG, members []string, b *clustermap.Brick) bool {
	if b.State != clustermap.BrickUp || b.Draining || b.Full || !admits(v, b) {
		return false
	}
	for _, o := range members {
		ob := m.Brick(o)
		if misplaced(m, v, p, o) {
			if !v.AllowSameDomain && hostOf(ob) == hostOf(b) {
				return false
			}
		} else if conflicts(v, ob, b) {
			return false
		}
	}
	return true
}

// misplaced: not admitted, or in conflict with an earlier member that is
// not misplaced itself.
func misplaced(m *clustermap.Map, v *clustermap.Volume, p clustermap.PG, name string) bool {
	i := slices.Index(p.Bricks, name)
	if i < 0 {
		return false
	}
	if !admits(v, m.Brick(name)) {
		return true
	}
	for _, e := range p.Bricks[:i] {
		if !misplaced(m, v, p, e) && conflicts(v, m.Brick(e), m.Brick(name)) {
			return true
		}
	}
	return false
}

// checkDrainLeave: a brick that is up leaves a PG only if it drains and the
// PG keeps Replicas in-sync, up, non-draining members without it.
func (w *world) checkDrainLeave(m *clustermap.Map, v *clustermap.Volume, i int, before, after clustermap.PG) {
	w.t.Helper()
	for _, b := range before.Bricks {
		if slices.Contains(after.Bricks, b) || m.Brick(b).State != clustermap.BrickUp {
			continue
		}
		leaving := m.Brick(b).Draining || slices.Contains(before.Leaving, b) || misplaced(m, v, before, b)
		if !leaving {
			w.fatalf("volume %s pg %d: up, non-draining, non-leaving %s dropped: %+v → %+v", v.Name, i, b, before, after)
		}
		if slices.Contains(before.Syncing, b) {
			continue // a draining brick that never synced may go at once
		}
		good := 0
		for _, s := range after.InSync() {
			if sb := m.Brick(s); sb.State == clustermap.BrickUp && !sb.Draining && !slices.Contains(after.Leaving, s) && !misplaced(m, v, after, s) {
				good++
			}
		}
		if good < v.Replicas {
			w.fatalf("volume %s pg %d: draining %s left with only %d good in-sync members: %+v → %+v",
				v.Name, i, b, good, before, after)
		}
	}
}

func (w *world) names(f func(b clustermap.Brick) bool) []string {
	var out []string
	for _, b := range w.m.Bricks {
		if f(b) {
			out = append(out, b.Name)
		}
	}
	return out
}

func (w *world) step(step int) {
	w.t.Helper()
	switch r := w.rng.IntN(100); {
	case r < 10:
		if len(w.m.Bricks) < 24 {
			w.addBrick()
		}
	case r < 28:
		if up := w.names(func(b clustermap.Brick) bool { return w.live[b.Name] }); len(up) > 0 {
			b := w.pick(up)
			w.logf("%d: kill %s", step, b)
			delete(w.live, b)
			w.reconcile()
		}
	case r < 46:
		if down := w.names(func(b clustermap.Brick) bool { return !w.live[b.Name] }); len(down) > 0 {
			b := w.pick(down)
			w.logf("%d: revive %s", step, b)
			w.live[b] = true
			w.reconcile()
		}
	case r < 52:
		if ok := w.names(func(b clustermap.Brick) bool { return !b.Draining }); len(ok) > 0 {
			b := w.pick(ok)
			w.logf("%d: drain %s", step, b)
			n := w.m.Clone()
			n.Brick(b).Draining = true
			n.Epoch++
			w.install(n)
		}
	case r < 82:
		w.markSynced(step)
	case r < 85:
		if up := w.names(func(b clustermap.Brick) bool { return true }); len(up) > 0 {
			b := w.pick(up)
			used := []int64{50, 88, 95}[w.rng.IntN(3)]
			w.logf("%d: %s reports %d%% used", step, b, used)
			if n := clustermap.MarkFull(w.m, map[string]clustermap.Usage{b: {Used: used, Capacity: 100}}); n != nil {
				w.events["fullness changed"]++
				w.install(n)
			}
		}
	case r < 86:
		if len(w.m.Volumes) > 0 {
			v := w.m.Volumes[w.rng.IntN(len(w.m.Volumes))]
			p := clustermap.Profile{K: 1 + w.rng.IntN(3), M: w.rng.IntN(3)}
			if w.rng.IntN(3) == 0 {
				p.Level = clustermap.LevelRack
			}
			n, id, err := clustermap.EnsureProfile(w.m, v.ID, p)
			w.logf("%d: ensure profile %s on %s: id %d err %v", step, p, v.Name, id, err)
			if err != nil {
				if !errors.Is(err, clustermap.ErrProfile) {
					w.fatalf("EnsureProfile error %v does not wrap ErrProfile", err)
				}
				w.events["profile refused"]++
			} else if n != nil {
				w.events["profile added"]++
				w.check(w.m, n)
				w.install(n)
			}
		}
	case r < 88:
		if all := w.names(func(b clustermap.Brick) bool { return true }); len(all) > 0 {
			b := w.pick(all)
			n := w.m.Clone()
			n.Brick(b).Class = []string{"", "ssd", "hdd"}[w.rng.IntN(3)]
			n.Epoch++
			w.logf("%d: %s restarts with class %q", step, b, n.Brick(b).Class)
			w.events["class changed"]++
			w.install(n)
		}
	default:
		w.addVolume(step)
	}
}

func (w *world) markSynced(step int) {
	w.t.Helper()
	if w.rng.IntN(3) == 0 && w.markSGSynced(step) {
		return
	}
	type job struct {
		vol  uint64
		pg   int
		b    string
		prim string
	}
	var jobs []job
	for _, v := range w.m.Volumes {
		for i, p := range v.PGs {
			for _, s := range p.Syncing {
				if w.live[p.Primary()] && w.live[s] {
					jobs = append(jobs, job{v.ID, i, s, p.Primary()})
				}
			}
		}
	}
	if len(jobs) == 0 {
		return
	}
	j := jobs[w.rng.IntN(len(jobs))]
	p := w.m.VolumeByID(j.vol).PGs[j.pg]
	// Reports from anyone but the primary are ignored.
	for _, other := range p.Bricks {
		if other != j.prim && clustermap.MarkSynced(w.m, j.vol, uint32(j.pg), j.b, other, sinceOf(w.m, j.vol, uint32(j.pg))) != nil {
			w.fatalf("MarkSynced accepted a report from non-primary %s", other)
		}
	}
	w.logf("%d: synced vol %d pg %d %s (primary %s)", step, j.vol, j.pg, j.b, j.prim)
	n := clustermap.MarkSynced(w.m, j.vol, uint32(j.pg), j.b, j.prim, sinceOf(w.m, j.vol, uint32(j.pg)))
	if n == nil {
		w.fatalf("MarkSynced by primary %s of %s ignored", j.prim, j.b)
	}
	if np := n.VolumeByID(j.vol).PGs[j.pg]; slices.Contains(np.Syncing, j.b) {
		w.fatalf("MarkSynced left %s syncing: %+v", j.b, np)
	}
	w.check(w.m, n)
	w.m = n
	w.reconcile()
}

// markSGSynced has the leader of a stripe group with a syncing member that
// is up report its rebuild; it reports whether there was one.
func (w *world) markSGSynced(step int) bool {
	w.t.Helper()
	for _, v := range w.m.Volumes {
		for i, g := range v.SGs {
			lead := g.Leader(w.m)
			for _, s := range g.Syncing {
				if lead == "" || !w.live[s] {
					continue
				}
				for _, other := range g.Bricks {
					if other != lead && clustermap.MarkSGSynced(w.m, v.ID, uint16(i), s, other, g.Since) != nil {
						w.fatalf("MarkSGSynced accepted a report from non-leader %s", other)
					}
				}
				n := clustermap.MarkSGSynced(w.m, v.ID, uint16(i), s, lead, g.Since)
				if n == nil {
					w.fatalf("MarkSGSynced by leader %s of %s ignored", lead, s)
				}
				w.logf("%d: sg synced vol %d sg %d %s (leader %s)", step, v.ID, i, s, lead)
				w.events["stripe member synced"]++
				w.check(w.m, n)
				w.m = n
				w.reconcile()
				return true
			}
		}
	}
	return false
}

func (w *world) addVolume(step int) {
	w.t.Helper()
	if len(w.m.Volumes) >= 6 {
		return
	}
	replicas, pgs, same := 1+w.rng.IntN(3), 1+w.rng.IntN(16), w.rng.IntN(4) == 0
	spec := clustermap.VolumeSpec{Name: fmt.Sprintf("vol%d", w.m.NextVolumeID), Replicas: replicas, ChunkBytes: chunk, PGs: pgs, AllowSameDomain: same}
	spec.Class = []string{"", "", clustermap.ClassDefault, "ssd"}[w.rng.IntN(4)]
	if !same && w.rng.IntN(4) == 0 {
		spec.Domain = clustermap.LevelRack
	}
	v := &clustermap.Volume{Class: spec.Class, Domain: spec.Domain, AllowSameDomain: same}
	// Model: how many usable bricks and distinct domains at the hard level?
	domains, usable := map[string]bool{}, 0
	for _, b := range w.m.Bricks {
		if b.State == clustermap.BrickUp && !b.Draining && !b.Full && admits(v, &b) {
			usable++
			if spec.Domain == clustermap.LevelRack {
				domains[b.Domain[clustermap.LevelRack]] = true
			} else {
				domains[hostOf(&b)] = true
			}
		}
	}
	possible := usable >= replicas && (same || len(domains) >= replicas)
	n, err := clustermap.PlaceVolume(w.m, spec)
	w.logf("%d: add volume %+v: err=%v", step, spec, err)
	// Racks and hosts are not nested in this world, so a greedy pick may
	// miss a rack-level placement that exists: only "impossible ⇒ refused"
	// holds there; at host level placement succeeds exactly when possible.
	if possible != (err == nil) && (spec.Domain != clustermap.LevelRack || err == nil) {
		w.fatalf("PlaceVolume(%+v) with %d usable bricks in %d domains: err=%v", spec, usable, len(domains), err)
	}
	if err != nil {
		w.events["AddVolume refused"]++
		if !errors.Is(err, clustermap.ErrPlacement) {
			w.fatalf("AddVolume error %v does not wrap ErrPlacement", err)
		}
		return
	}
	if n.Epoch != w.m.Epoch+1 {
		w.fatalf("AddVolume: epoch %d → %d", w.m.Epoch, n.Epoch)
	}
	for i, p := range n.Volume(spec.Name).PGs {
		if len(p.Bricks) != replicas || len(p.Syncing) != 0 {
			w.fatalf("new pg %d: %+v", i, p)
		}
	}
	w.check(w.m, n)
	w.m = n
	w.reconcile()
}
