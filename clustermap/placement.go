package clustermap

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/plumeria-fs/plumeria/internal/limits"
)

// ErrPlacement is wrapped by errors saying replicas cannot be placed.
var ErrPlacement = fmt.Errorf("clustermap: cannot place replicas")

// load counts, per brick, how many PG replicas and primaries the map gives
// it, and weighs bricks by capacity.
type load struct {
	replicas, primaries map[string]int
	weight              map[string]float64 // capacity relative to the mean; 1 when unknown
}

func loadOf(m *Map) load {
	l := load{map[string]int{}, map[string]int{}, weights(m)}
	for _, v := range m.Volumes {
		for _, p := range v.PGs {
			for i, b := range p.Bricks {
				if slices.Contains(p.Leaving, b) {
					continue // on its way out: counted where it goes
				}
				l.replicas[b]++
				if i == 0 {
					l.primaries[b]++
				}
			}
		}
		for _, g := range v.SGs {
			for _, b := range g.Bricks {
				l.replicas[b]++ // a shard position weighs as much as a PG replica
			}
		}
	}
	return l
}

// weights returns each brick's capacity divided by the mean capacity of the
// bricks that report one; a brick without one weighs 1 (the mean).
func weights(m *Map) map[string]float64 {
	var sum float64
	n := 0
	for _, b := range m.Bricks {
		if b.CapacityBytes > 0 {
			sum += float64(b.CapacityBytes)
			n++
		}
	}
	w := make(map[string]float64, len(m.Bricks))
	for _, b := range m.Bricks {
		w[b.Name] = 1
		if b.CapacityBytes > 0 {
			w[b.Name] = float64(b.CapacityBytes) * float64(n) / sum
		}
	}
	return w
}

// after is b's load per unit of weight once it takes one more replica:
// placement picks the smallest, so bricks fill in proportion to capacity.
func (l load) after(b string) float64 { return float64(l.replicas[b]+1) / l.weight[b] }

// eligible reports whether b is up and not draining.
func eligible(b *Brick) bool { return b.State == BrickUp && !b.Draining }

// hostOf is a brick's host domain; a brick without one is its own host.
func hostOf(b *Brick) string {
	if h := b.Domain[LevelHost]; h != "" {
		return h
	}
	return "brick:" + b.Name
}

// shared counts the domain levels above host at which a and b coincide.
func shared(a, b *Brick) int {
	n := 0
	for _, lvl := range Levels[1:] {
		if a.Domain[lvl] != "" && a.Domain[lvl] == b.Domain[lvl] {
			n++
		}
	}
	return n
}

// rules are what the members of one volume's PGs must respect.
type rules struct {
	vol       uint64
	class     string   // bricks of this class only; "" any
	levels    []string // hard rule: members differ at each of these levels (host up to the volume's Domain)
	allowSame bool     // members may share a host (levels is host only)
	feature   string   // bricks must have this feature ("" none)
}

func rulesOf(v *Volume) rules {
	level := v.Domain
	if level == "" {
		level = LevelHost
	}
	return rules{vol: v.ID, class: v.Class, levels: Levels[:slices.Index(Levels, level)+1], allowSame: v.AllowSameDomain}
}

// admits reports whether b may hold a PG of the volume at all: its class,
// and a label at every hard level above host (a brick without a rack label
// cannot prove it is in another rack).
func (r rules) admits(b *Brick) bool {
	if r.class != "" && b.ClassName() != r.class {
		return false
	}
	if r.feature != "" && !slices.Contains(b.Features, r.feature) {
		return false
	}
	for _, lvl := range r.levels[1:] {
		if b.Domain[lvl] == "" {
			return false
		}
	}
	return true
}

// conflicts reports whether a and b may not be members of one PG.
func (r rules) conflicts(a, b *Brick) bool { return r.conflictsAbove(a, b, LevelHost) }

// conflictsAbove is conflicts at the host level only when from is host:
// a misplaced member leaving a PG keeps the host rule with its replacement
// (a PG never has two members on one host) but not the levels above, or a
// brick could never be replaced by another in the same rack.
func (r rules) conflictsAbove(a, b *Brick, from string) bool {
	if r.allowSame {
		return false
	}
	if hostOf(a) == hostOf(b) {
		return true
	}
	if from != LevelHost {
		return false
	}
	for _, lvl := range r.levels[1:] {
		if a.Domain[lvl] == b.Domain[lvl] {
			return true
		}
	}
	return false
}

// takesNew reports whether b may become a new member under r: up, not
// draining, not full, and admitted.
func (r rules) takesNew(b *Brick) bool { return eligible(b) && !b.Full && r.admits(b) }

// misplaced returns the members of p that break r: bricks r does not admit
// (their class or labels changed), and bricks in conflict with an earlier
// member that is not misplaced itself (so the rest are conflict-free).
// Reconcile replaces them like draining members.
func (r rules) misplaced(m *Map, p *PG) map[string]bool {
	out := map[string]bool{}
	var good []*Brick
	for _, name := range p.Bricks {
		b := m.Brick(name)
		if b == nil {
			continue
		}
		bad := !r.admits(b)
		for _, g := range good {
			bad = bad || r.conflicts(g, b)
		}
		if bad {
			out[name] = true
		} else {
			good = append(good, b)
		}
	}
	return out
}

// pickReplica chooses one more brick for a PG that already has members,
// or returns "" if none fits. Hard rules: r (class, distinct domains up to
// the volume's level; only distinct hosts from the misplaced members),
// and the brick takes new members. Preference: fewest
// shared racks/sites with the members, then the least load per unit of
// capacity once it takes the replica, then a hash of (vol, pg, brick) to
// spread ties.
func pickReplica(m *Map, l load, r rules, pg int, members []string, misplaced map[string]bool) string {
	type cand struct {
		name   string
		shared int
		load   float64
		tie    uint64
	}
	var cs []cand
	for i := range m.Bricks {
		b := &m.Bricks[i]
		if !r.takesNew(b) || slices.Contains(members, b.Name) {
			continue
		}
		c := cand{name: b.Name, load: l.after(b.Name), tie: xxhash.Sum64String(fmt.Sprintf("%d/%d/%s", r.vol, pg, b.Name))}
		ok := true
		for _, mem := range members {
			mb := m.Brick(mem)
			if mb == nil {
				continue
			}
			from := LevelHost
			if misplaced[mem] {
				from = "" // the host rule only
			}
			if r.conflictsAbove(mb, b, from) {
				ok = false
				break
			}
			if hostOf(mb) == hostOf(b) {
				c.shared += len(Levels) // same host (allowed): the worst choice
			}
			c.shared += shared(mb, b)
		}
		if ok {
			cs = append(cs, c)
		}
	}
	if len(cs) == 0 {
		return ""
	}
	sort.Slice(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if a.shared != b.shared {
			return a.shared < b.shared
		}
		if a.load != b.load {
			return a.load < b.load
		}
		return a.tie < b.tie
	})
	return cs[0].name
}

// VolumeSpec describes a volume to place (PlaceVolume).
type VolumeSpec struct {
	Name            string
	Replicas        int
	ChunkBytes      uint32
	PGs             int
	AllowSameDomain bool
	Class           string // bricks of this class only; "" any
	Domain          string // hard failure-domain level: "" or host, rack, site
}

// AddVolume places a new volume with pgs placement groups and returns the
// new map (m is not changed). It refuses, naming why, when the replicas of
// a PG cannot sit on distinct hosts and allowSameDomain is false.
func AddVolume(m *Map, name string, replicas int, chunkBytes uint32, pgs int, allowSameDomain bool) (*Map, error) {
	return PlaceVolume(m, VolumeSpec{Name: name, Replicas: replicas, ChunkBytes: chunkBytes, PGs: pgs, AllowSameDomain: allowSameDomain})
}

// PlaceVolume places a new volume and returns the new map (m is not
// changed). It refuses, naming why, when the replicas of a PG cannot be
// placed under the spec's rules: its class, distinct domains at its level
// (host unless AllowSameDomain), on bricks that are up and not full.
func PlaceVolume(m *Map, spec VolumeSpec) (*Map, error) {
	name, replicas, chunkBytes, pgs := spec.Name, spec.Replicas, spec.ChunkBytes, spec.PGs
	if err := ValidName(name); err != nil {
		return nil, fmt.Errorf("volume: %w", err)
	}
	if m.Volume(name) != nil {
		return nil, fmt.Errorf("volume %q already exists", name)
	}
	if err := ValidChunkBytes(chunkBytes); err != nil {
		return nil, fmt.Errorf("volume %q: %w", name, err)
	}
	if replicas < 1 || replicas > limits.ReplicasMax || pgs < 1 || pgs > limits.PGsPerVolumeMax {
		return nil, fmt.Errorf("volume %q: replicas %d must be in [1, %d] and placement groups %d in [1, %d]",
			name, replicas, limits.ReplicasMax, pgs, limits.PGsPerVolumeMax)
	}
	if len(m.Volumes) >= limits.VolumesMax {
		return nil, fmt.Errorf("volume %q: the map already holds %d volumes, the most allowed", name, len(m.Volumes))
	}
	if m.NextVolumeID == math.MaxUint64 {
		return nil, fmt.Errorf("volume %q: volume ids exhausted", name)
	}
	if spec.Class != "" {
		if err := ValidClass(spec.Class); err != nil {
			return nil, fmt.Errorf("volume %q: %w", name, err)
		}
	}
	if err := ValidDomainLevel(spec.Domain); err != nil {
		return nil, fmt.Errorf("volume %q: %w", name, err)
	}
	if spec.AllowSameDomain && spec.Domain != "" && spec.Domain != LevelHost {
		return nil, fmt.Errorf("volume %q: --allow-same-domain lets replicas share a host, which contradicts domain=%s", name, spec.Domain)
	}
	n := m.Clone()
	if n.NextVolumeID == 0 {
		n.NextVolumeID = 1
	}
	v := Volume{ID: n.NextVolumeID, Name: name, Replicas: replicas, ChunkBytes: chunkBytes,
		AllowSameDomain: spec.AllowSameDomain, Class: spec.Class, Domain: spec.Domain, Gen: 1, PGs: make([]PG, pgs)}
	if v.Domain == LevelHost {
		v.Domain = "" // the default: one encoding
	}
	r := rulesOf(&v)
	if err := canPlace(m, r, replicas); err != nil {
		return nil, fmt.Errorf("volume %q: %w", name, err)
	}
	n.NextVolumeID++
	l := loadOf(n)
	for i := range v.PGs {
		var members []string
		for len(members) < replicas {
			b := pickReplica(n, l, r, i, members, nil)
			if b == "" {
				return nil, fmt.Errorf("volume %q pg %d: %w", name, i, ErrPlacement)
			}
			members = append(members, b)
			l.replicas[b]++
		}
		// Spread primaries: the member with the fewest primaries leads.
		best := 0
		for j, b := range members {
			if l.primaries[b] < l.primaries[members[best]] {
				best = j
			}
		}
		members[0], members[best] = members[best], members[0]
		l.primaries[members[0]]++
		v.PGs[i] = PG{Bricks: members, Since: m.Epoch + 1}
	}
	n.Volumes = append(n.Volumes, v)
	n.Epoch++
	return n, nil
}

// canPlace explains why the replicas of a PG cannot be placed under r, if
// so: too few usable bricks (up, not draining, not full, of the class, with
// the labels), or too few distinct domains at the hard level.
func canPlace(m *Map, r rules, replicas int) error {
	level := r.levels[len(r.levels)-1]
	domains := map[string][]string{}
	up, full, unlabeled, classes := 0, 0, 0, map[string]bool{}
	for i := range m.Bricks {
		b := &m.Bricks[i]
		if !eligible(b) {
			continue
		}
		classes[b.ClassName()] = true
		switch {
		case r.class != "" && b.ClassName() != r.class:
		case !r.admits(b):
			unlabeled++
		case b.Full:
			full++
		default:
			up++
			key := hostOf(b)
			if level != LevelHost {
				key = b.Domain[level]
			}
			domains[key] = append(domains[key], b.Name)
		}
	}
	what := "bricks"
	if r.class != "" {
		what = fmt.Sprintf("bricks of class %s", r.class)
		if !classes[r.class] {
			return fmt.Errorf("%w: no brick of class %q is up (classes up: %s); start bricks with --class %s",
				ErrPlacement, r.class, strings.Join(slices.Sorted(maps.Keys(classes)), ", "), r.class)
		}
	}
	why := ""
	if full > 0 {
		why += fmt.Sprintf("; %d %s are nearly full", full, what)
	}
	if unlabeled > 0 {
		why += fmt.Sprintf("; %d %s lack a %s label (--domain %s=...)", unlabeled, what, level, level)
	}
	if r.allowSame {
		if up < replicas {
			return fmt.Errorf("%w: %d replicas need %d %s up, only %d are usable%s", ErrPlacement, replicas, replicas, what, up, why)
		}
		return nil
	}
	if len(domains) < replicas {
		var desc []string
		for h, bs := range domains {
			desc = append(desc, fmt.Sprintf("%s=[%s]", h, strings.Join(bs, ",")))
		}
		sort.Strings(desc)
		hint := "start bricks with distinct --domain host=..., lower --replicas, or pass --allow-same-domain"
		if level != LevelHost {
			hint = fmt.Sprintf("start bricks with distinct --domain %s=..., lower --replicas, or choose a lower --domain level", level)
		}
		return fmt.Errorf("%w: %d replicas must sit on %d distinct %ss, but the %d usable %s are on %d %s(s) %s%s; %s",
			ErrPlacement, replicas, replicas, level, up, what, len(domains), level, strings.Join(desc, " "), why, hint)
	}
	return nil
}
