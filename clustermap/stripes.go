package clustermap

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"

	"github.com/plumeria-fs/plumeria/internal/limits"
)

// Erasure coding in the map (docs/plan-j.md). Every write lands in the
// volume's replicated PGs (its home); the primary of a PG may later move a
// chunk's blocks into a stripe on a stripe group (SG) and keep a ref at
// home. A Profile says what redundancy the stripes of its SGs have:
// K data and M parity shards (K=1: M+1 plain copies), on K+M bricks that
// differ at failure-domain Level, of storage class Class.

// FeatureEC is the feature of a brick that stores shards (stripe RPCs,
// store format 2 with refs). A profile is admitted only when enough bricks
// have it.
const FeatureEC = "ec1"

// FeaturesMax bounds the features a brick may declare.
const FeaturesMax = 16

// Profile is one redundancy a volume's data may have besides its home
// replication. ID 0 means the home; profiles are numbered from 1.
type Profile struct {
	ID    uint16 `json:"id"`
	K     int    `json:"k"`
	M     int    `json:"m"`
	Level string `json:"level,omitempty"` // "" is host
	Class string `json:"class,omitempty"` // "" any
}

// Shards is K+M: the bricks of each of the profile's stripe groups.
func (p Profile) Shards() int { return p.K + p.M }

// String is "K+M" or "copies=N", with the level and class when set.
func (p Profile) String() string {
	s := fmt.Sprintf("%d+%d", p.K, p.M)
	if p.K == 1 {
		s = fmt.Sprintf("copies=%d", p.M+1)
	}
	if p.Level != "" && p.Level != LevelHost {
		s += " domain=" + p.Level
	}
	if p.Class != "" {
		s += " class=" + p.Class
	}
	return s
}

// same reports whether p and q describe the same redundancy (IDs aside).
func (p Profile) same(q Profile) bool {
	norm := func(l string) string {
		if l == "" {
			return LevelHost
		}
		return l
	}
	return p.K == q.K && p.M == q.M && norm(p.Level) == norm(q.Level) && p.Class == q.Class
}

// Validate checks the profile's bounds (limits.DataShardsMax and
// friends), level and class.
func (p Profile) Validate() error {
	switch {
	case p.K < 1 || p.K > limits.DataShardsMax:
		return fmt.Errorf("profile %s: k must be 1..%d", p, limits.DataShardsMax)
	case p.M < 0 || p.M > limits.ParityShardsMax:
		return fmt.Errorf("profile %s: m must be 0..%d", p, limits.ParityShardsMax)
	case p.K+p.M > limits.ShardsMax:
		return fmt.Errorf("profile %s: k+m must be at most %d", p, limits.ShardsMax)
	}
	if err := ValidDomainLevel(p.Level); err != nil {
		return fmt.Errorf("profile %s: %w", p, err)
	}
	if p.Class != "" {
		if err := ValidClass(p.Class); err != nil {
			return fmt.Errorf("profile %s: %w", p, err)
		}
	}
	return nil
}

// StripeGroup is K+M bricks that hold the shards of stripes: the brick at
// position i holds shard i of every stripe of the group. A member that
// failed is replaced in place by a brick listed in Syncing until the SG's
// leader has rebuilt its shards (MarkSGSynced).
type StripeGroup struct {
	Profile uint16   `json:"profile"`
	Bricks  []string `json:"bricks"`
	Syncing []string `json:"syncing,omitempty"`
	// Since is the map epoch of the last change of Bricks or Syncing: a
	// shard write names the epoch it was placed under and a member refuses
	// writes from before it joined; a rebuild reports with the Since it
	// started under.
	Since uint64 `json:"since,omitempty"`
}

// InSync returns the members that hold every shard of their position.
func (g *StripeGroup) InSync() []string {
	var out []string
	for _, b := range g.Bricks {
		if !slices.Contains(g.Syncing, b) {
			out = append(out, b)
		}
	}
	return out
}

// Leader returns the member that rebuilds the group's syncing positions:
// its first in-sync member that is up, or "" if none is.
func (g *StripeGroup) Leader(m *Map) string {
	for _, b := range g.InSync() {
		if mb := m.Brick(b); mb != nil && mb.State == BrickUp {
			return b
		}
	}
	return ""
}

// Profile returns the volume's profile id, or nil.
func (v *Volume) Profile(id uint16) *Profile {
	for i := range v.Profiles {
		if v.Profiles[i].ID == id {
			return &v.Profiles[i]
		}
	}
	return nil
}

// ShardVolMax bounds the ids of volumes with stripes: a shard's store key
// carries the volume id in its low 40 bits (brick: 1<<63 | sg<<40 | vol).
const ShardVolMax = 1 << 40

// ErrProfile is wrapped by EnsureProfile's refusals.
var ErrProfile = errors.New("clustermap: cannot admit profile")

// EnsureProfile returns the id of vol's profile like want, adding it with
// its stripe groups if the volume has none yet (n is then the new map, one
// epoch up; otherwise n is nil). A profile the same as the volume's home
// replication (K=1, M=Replicas-1, the volume's level and class) is id 0.
// It refuses, wrapping ErrProfile and naming why, when the profile's
// stripe groups cannot be placed: too few bricks with FeatureEC of the
// class in distinct domains at the level, or the volume has too many
// profiles.
func EnsureProfile(m *Map, vol uint64, want Profile) (n *Map, id uint16, err error) {
	v := m.VolumeByID(vol)
	if v == nil {
		return nil, 0, fmt.Errorf("%w: no volume %d", ErrProfile, vol)
	}
	if err := want.Validate(); err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrProfile, err)
	}
	if want.same(Profile{K: 1, M: v.Replicas - 1, Level: v.Domain, Class: v.Class}) {
		return nil, 0, nil
	}
	for _, p := range v.Profiles {
		if p.same(want) {
			return nil, p.ID, nil
		}
	}
	if len(v.Profiles) >= limits.ProfilesPerVolumeMax {
		return nil, 0, fmt.Errorf("%w: volume %s already has %d profiles", ErrProfile, v.Name, len(v.Profiles))
	}
	if v.ID >= ShardVolMax {
		return nil, 0, fmt.Errorf("%w: volume %s: id %d too large for stripes", ErrProfile, v.Name, v.ID)
	}
	r := profileRules(v, want)
	if err := canPlace(m, r, want.Shards()); err != nil {
		return nil, 0, fmt.Errorf("%w %s on volume %s: %w", ErrProfile, want, v.Name, err)
	}
	n = m.Clone()
	nv := n.VolumeByID(vol)
	want.ID = 1
	for _, p := range nv.Profiles {
		want.ID = max(want.ID, p.ID+1)
	}
	if want.Level == LevelHost {
		want.Level = ""
	}
	nv.Profiles = append(nv.Profiles, want)
	l := loadOf(n)
	usable := 0
	for i := range n.Bricks {
		if r.takesNew(&n.Bricks[i]) {
			usable++
		}
	}
	groups := min(limits.StripeGroupsPerProfileMax, max(1, (4*usable+want.Shards()-1)/want.Shards()))
	for range groups {
		sg := len(nv.SGs)
		if sg > 0xffff {
			break
		}
		var members []string
		for len(members) < want.Shards() {
			b := pickReplica(n, l, r, sgSalt+sg, members, nil)
			if b == "" {
				return nil, 0, fmt.Errorf("%w %s on volume %s: stripe group %d: %w", ErrProfile, want, v.Name, sg, ErrPlacement)
			}
			members = append(members, b)
			l.replicas[b]++
		}
		nv.SGs = append(nv.SGs, StripeGroup{Profile: want.ID, Bricks: members, Since: m.Epoch + 1})
	}
	n.Epoch++
	return n, want.ID, nil
}

// sgSalt keeps SGs' placement ties apart from PGs'.
const sgSalt = 1 << 24

// profileRules are the placement rules of p's stripe groups: its class,
// distinct domains up to its level, and bricks with FeatureEC. A volume
// whose replicas may share a host (AllowSameDomain: one machine, as
// `plumeria up` makes) lets its host-level stripe groups share one too;
// their shards are still on distinct bricks.
func profileRules(v *Volume, p Profile) rules {
	r := rulesOf(&Volume{ID: v.ID, Class: p.Class, Domain: p.Level})
	r.feature = FeatureEC
	r.allowSame = v.AllowSameDomain && (p.Level == "" || p.Level == LevelHost)
	return r
}

// PickStripeGroup chooses where a new stripe of profile goes: among the
// profile's SGs whose members are all up, in sync and not full, the one
// key (e.g. a hash of the chunk and the stripe's seq) selects. ok is
// false when no SG of the profile is healthy; the caller leaves the data
// where it is (a stripe is never made degraded).
func PickStripeGroup(m *Map, v *Volume, profile uint16, key uint64) (sg uint16, ok bool) {
	var healthy []int
	for i := range v.SGs {
		g := &v.SGs[i]
		if g.Profile != profile || len(g.Syncing) > 0 {
			continue
		}
		good := true
		for _, b := range g.Bricks {
			if mb := m.Brick(b); mb == nil || mb.State != BrickUp || mb.Full {
				good = false
			}
		}
		if good {
			healthy = append(healthy, i)
		}
	}
	if len(healthy) == 0 {
		return 0, false
	}
	return uint16(healthy[xxhash.Sum64(u64le(key))%uint64(len(healthy))]), true
}

func u64le(x uint64) []byte {
	b := make([]byte, 8)
	for i := range b {
		b[i] = byte(x >> (8 * i))
	}
	return b
}

// reconcileSG replaces the failed members of stripe group gi of v in
// place (rule 7 of Reconcile): a down member gets a replacement that
// takes new members and keeps the profile's rules with the others, as a
// syncing member the leader rebuilds from K survivors. A down in-sync
// member is replaced only while K in-sync members are up (else its shards
// cannot be rebuilt and it may come back with them); a down syncing one
// always (it held no complete position).
func reconcileSG(m *Map, l load, v *Volume, gi int) bool {
	g := &v.SGs[gi]
	p := v.Profile(g.Profile)
	if p == nil {
		return false
	}
	r := profileRules(v, *p)
	up := func(name string) bool { b := m.Brick(name); return b != nil && b.State == BrickUp }
	inSyncUp := 0
	for _, b := range g.InSync() {
		if up(b) {
			inSyncUp++
		}
	}
	changed := false
	for i, b := range g.Bricks {
		if up(b) {
			continue
		}
		syncing := slices.Contains(g.Syncing, b)
		if !syncing && inSyncUp < p.K {
			continue
		}
		others := slices.Delete(slices.Clone(g.Bricks), i, i+1)
		nb := pickReplica(m, l, r, sgSalt+gi, others, nil)
		if nb == "" {
			continue
		}
		g.Bricks[i] = nb
		g.Syncing = slices.DeleteFunc(g.Syncing, func(s string) bool { return s == b })
		g.Syncing = append(g.Syncing, nb)
		l.replicas[b]--
		l.replicas[nb]++
		changed = true
	}
	if !changed && len(g.Syncing) == 0 {
		changed = moveOffSG(m, l, r, g, gi)
	}
	if changed {
		g.Since = m.Epoch + 1
	}
	return changed
}

// moveOffSG replaces one member of a healthy stripe group (every member up
// and in sync) that is draining or no longer fits the profile (its class,
// labels or features changed) by a brick that does, as syncing: the leader
// rebuilds the position from the others. One at a time, so the group never
// has fewer than K+M-1 complete positions.
func moveOffSG(m *Map, l load, r rules, g *StripeGroup, gi int) bool {
	for _, b := range g.Bricks {
		if mb := m.Brick(b); mb == nil || mb.State != BrickUp {
			return false
		}
	}
	for i, b := range g.Bricks {
		mb := m.Brick(b)
		if !mb.Draining && r.admits(mb) {
			continue
		}
		others := slices.Delete(slices.Clone(g.Bricks), i, i+1)
		nb := pickReplica(m, l, r, sgSalt+gi, others, nil)
		if nb == "" {
			continue
		}
		g.Bricks[i] = nb
		g.Syncing = append(g.Syncing, nb)
		l.replicas[b]--
		l.replicas[nb]++
		return true
	}
	return false
}

// SGsOn counts the stripe group positions brick holds.
func SGsOn(m *Map, brick string) int {
	n := 0
	for _, v := range m.Volumes {
		for _, g := range v.SGs {
			if slices.Contains(g.Bricks, brick) {
				n++
			}
		}
	}
	return n
}

// MarkSGSynced records that the leader of stripe group sg of vol rebuilt
// brick's position, for the membership of epoch since. It returns nil if
// the report does not apply any more: another leader, the brick not
// syncing, or the membership changed since. The leader may report only
// once every stripe the group held when it started is rebuilt, and stripes
// made since (under the same Since) were written to every member.
func MarkSGSynced(m *Map, vol uint64, sg uint16, brick, reporter string, since uint64) *Map {
	v := m.VolumeByID(vol)
	if v == nil || int(sg) >= len(v.SGs) {
		return nil
	}
	g := &v.SGs[sg]
	if g.Leader(m) != reporter || !slices.Contains(g.Syncing, brick) || g.Since != since {
		return nil
	}
	n := m.Clone()
	ng := &n.VolumeByID(vol).SGs[sg]
	ng.Syncing = slices.DeleteFunc(ng.Syncing, func(s string) bool { return s == brick })
	if len(ng.Syncing) == 0 {
		ng.Syncing = nil
	}
	// Since stays: the members did not change, and another syncing
	// member's rebuild, started under it, goes on.
	n.Epoch++
	return n
}

// validateStripes checks v's profiles and stripe groups.
func (m *Map) validateStripes(v *Volume) error {
	if len(v.Profiles) > limits.ProfilesPerVolumeMax {
		return fmt.Errorf("clustermap: volume %s: %d profiles exceed %d", v.Name, len(v.Profiles), limits.ProfilesPerVolumeMax)
	}
	if len(v.Profiles) > 0 && v.ID >= ShardVolMax {
		return fmt.Errorf("clustermap: volume %s: id %d too large for stripes", v.Name, v.ID)
	}
	ids := map[uint16]int{}
	for _, p := range v.Profiles {
		if p.ID == 0 || ids[p.ID] != 0 {
			return fmt.Errorf("clustermap: volume %s: profile id %d zero or repeated", v.Name, p.ID)
		}
		if err := p.Validate(); err != nil {
			return fmt.Errorf("clustermap: volume %s: %w", v.Name, err)
		}
		ids[p.ID] = p.Shards()
	}
	if len(v.SGs) > 1<<16 {
		return fmt.Errorf("clustermap: volume %s: %d stripe groups exceed %d", v.Name, len(v.SGs), 1<<16)
	}
	for i, g := range v.SGs {
		shards, ok := ids[g.Profile]
		if !ok || len(g.Bricks) != shards {
			return fmt.Errorf("clustermap: volume %s sg %d: profile %d unknown or %d members", v.Name, i, g.Profile, len(g.Bricks))
		}
		seen := map[string]bool{}
		for _, b := range g.Bricks {
			if seen[b] || m.Brick(b) == nil {
				return fmt.Errorf("clustermap: volume %s sg %d: brick %q duplicate or unknown", v.Name, i, b)
			}
			seen[b] = true
		}
		syncing := map[string]bool{}
		for _, s := range g.Syncing {
			if !seen[s] || syncing[s] {
				return fmt.Errorf("clustermap: volume %s sg %d: syncing brick %q not a member or repeated", v.Name, i, s)
			}
			syncing[s] = true
		}
	}
	return nil
}
