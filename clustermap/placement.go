package clustermap

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/plumeria-fs/plumeria/internal/limits"
)

// ErrPlacement is wrapped by errors saying replicas cannot be placed.
var ErrPlacement = fmt.Errorf("clustermap: cannot place replicas")

// load counts, per brick, how many PG replicas and primaries the map gives it.
type load struct{ replicas, primaries map[string]int }

func loadOf(m *Map) load {
	l := load{map[string]int{}, map[string]int{}}
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
	}
	return l
}

// eligible reports whether new replicas may go to b.
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

// pickReplica chooses one more brick for a PG that already has members,
// or returns "" if none fits. Hard rule: a host holds at most one replica
// unless allowSame. Preference: fewest shared racks/sites with the members,
// then least loaded, then a hash of (vol, pg, brick) to spread ties.
func pickReplica(m *Map, l load, vol uint64, pg int, members []string, allowSame bool) string {
	type cand struct {
		name         string
		shared, load int
		tie          uint64
	}
	var cs []cand
	for i := range m.Bricks {
		b := &m.Bricks[i]
		if !eligible(b) || slices.Contains(members, b.Name) {
			continue
		}
		c := cand{name: b.Name, load: l.replicas[b.Name], tie: xxhash.Sum64String(fmt.Sprintf("%d/%d/%s", vol, pg, b.Name))}
		ok := true
		for _, mem := range members {
			mb := m.Brick(mem)
			if mb == nil {
				continue
			}
			if hostOf(mb) == hostOf(b) {
				if !allowSame {
					ok = false
					break
				}
				c.shared += len(Levels) // same host: the worst choice
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

// AddVolume places a new volume with pgs placement groups and returns the
// new map (m is not changed). It refuses, naming why, when the replicas of
// a PG cannot sit on distinct hosts and allowSameDomain is false.
func AddVolume(m *Map, name string, replicas int, chunkBytes uint32, pgs int, allowSameDomain bool) (*Map, error) {
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
	if err := canPlace(m, replicas, allowSameDomain); err != nil {
		return nil, fmt.Errorf("volume %q: %w", name, err)
	}
	n := m.Clone()
	if n.NextVolumeID == 0 {
		n.NextVolumeID = 1
	}
	v := Volume{ID: n.NextVolumeID, Name: name, Replicas: replicas, ChunkBytes: chunkBytes,
		AllowSameDomain: allowSameDomain, Gen: 1, PGs: make([]PG, pgs)}
	n.NextVolumeID++
	l := loadOf(n)
	for i := range v.PGs {
		var members []string
		for len(members) < replicas {
			b := pickReplica(n, l, v.ID, i, members, allowSameDomain)
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

// canPlace explains why replicas cannot go on distinct hosts, if so.
func canPlace(m *Map, replicas int, allowSame bool) error {
	hosts := map[string][]string{}
	up := 0
	for i := range m.Bricks {
		b := &m.Bricks[i]
		if eligible(b) {
			up++
			hosts[hostOf(b)] = append(hosts[hostOf(b)], b.Name)
		}
	}
	if allowSame {
		if up < replicas {
			return fmt.Errorf("%w: %d replicas need %d bricks up, only %d are", ErrPlacement, replicas, replicas, up)
		}
		return nil
	}
	if len(hosts) < replicas {
		var desc []string
		for h, bs := range hosts {
			desc = append(desc, fmt.Sprintf("%s=[%s]", h, strings.Join(bs, ",")))
		}
		sort.Strings(desc)
		return fmt.Errorf("%w: %d replicas must sit on %d distinct hosts, but the %d usable bricks are on %d host(s) %s; "+
			"start bricks with distinct --domain host=..., lower --replicas, or pass --allow-same-domain",
			ErrPlacement, replicas, replicas, up, len(hosts), strings.Join(desc, " "))
	}
	return nil
}
