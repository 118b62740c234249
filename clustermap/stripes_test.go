package clustermap_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/plumeria-fs/plumeria/clustermap"
)

// ecBricks builds n bricks with FeatureEC on their own hosts, in racks
// r(i%racks), of class cls.
func ecBricks(from, n, racks int, cls string) []clustermap.Brick {
	bs := classed(from, n, racks, cls, 0)
	for i := range bs {
		bs[i].Features = []string{clustermap.FeatureEC}
	}
	return bs
}

func ensure(t *testing.T, m *clustermap.Map, vol string, p clustermap.Profile) (*clustermap.Map, uint16) {
	t.Helper()
	n, id, err := clustermap.EnsureProfile(m, m.Volume(vol).ID, p)
	if err != nil {
		t.Fatalf("EnsureProfile(%s): %v", p, err)
	}
	if n == nil {
		return m, id
	}
	mustValid(t, n)
	if n.Epoch != m.Epoch+1 {
		t.Fatalf("EnsureProfile: epoch %d → %d", m.Epoch, n.Epoch)
	}
	return n, id
}

// checkSGs: every SG of the volume has K+M members of its profile's class
// with FeatureEC, distinct at every level up to the profile's.
func checkSGs(t *testing.T, m *clustermap.Map, vol string) {
	t.Helper()
	v := m.Volume(vol)
	for i, g := range v.SGs {
		p := v.Profile(g.Profile)
		if p == nil || len(g.Bricks) != p.Shards() {
			t.Fatalf("sg %d: profile %d, %d members", i, g.Profile, len(g.Bricks))
		}
		seen := map[string]bool{}
		for _, name := range g.Bricks {
			b := m.Brick(name)
			if p.Class != "" && b.ClassName() != p.Class {
				t.Fatalf("sg %d (%s): %s of class %s", i, p, name, b.ClassName())
			}
			if !slices.Contains(b.Features, clustermap.FeatureEC) {
				t.Fatalf("sg %d: %s lacks %s", i, name, clustermap.FeatureEC)
			}
			keys := []string{"host:" + hostOf(b)}
			if p.Level == clustermap.LevelRack {
				keys = append(keys, "rack:"+b.Domain[clustermap.LevelRack])
			}
			for _, k := range keys {
				if seen[k] {
					t.Fatalf("sg %d (%s): two members share %s: %v", i, p, k, g.Bricks)
				}
				seen[k] = true
			}
		}
	}
}

func TestEnsureProfile(t *testing.T) {
	bs := append(ecBricks(0, 8, 8, ""), classed(8, 2, 2, "", 0)...) // b8, b9 lack FeatureEC
	m := newMap(t, bs...)
	m = place(t, m, clustermap.VolumeSpec{Name: "v", Replicas: 3, PGs: 8})
	if n, id, err := clustermap.EnsureProfile(m, m.Volume("v").ID, clustermap.Profile{K: 1, M: 2}); err != nil || n != nil || id != 0 {
		t.Fatalf("copies=3 on a 3-replica volume: (%v, %d, %v), want the home (nil, 0, nil)", n != nil, id, err)
	}
	m, id := ensure(t, m, "v", clustermap.Profile{K: 4, M: 2, Level: clustermap.LevelRack})
	if id != 1 || len(m.Volume("v").SGs) == 0 {
		t.Fatalf("4+2: id %d, %d SGs", id, len(m.Volume("v").SGs))
	}
	checkSGs(t, m, "v")
	again, id2 := ensure(t, m, "v", clustermap.Profile{K: 4, M: 2, Level: clustermap.LevelRack})
	if again != m || id2 != 1 {
		t.Fatal("EnsureProfile is not idempotent")
	}
	m, id3 := ensure(t, m, "v", clustermap.Profile{K: 1, M: 1})
	if id3 != 2 {
		t.Fatalf("copies=2: id %d, want 2", id3)
	}
	checkSGs(t, m, "v")
	for _, c := range []struct {
		p    clustermap.Profile
		want string
	}{
		{clustermap.Profile{K: 8, M: 3}, "11 distinct hosts"},
		{clustermap.Profile{K: 4, M: 2, Class: "ssd"}, `no brick of class "ssd"`},
		{clustermap.Profile{K: 0, M: 2}, "k must be"},
		{clustermap.Profile{K: 2, M: 1, Level: "planet"}, "use host, rack or site"},
	} {
		_, _, err := clustermap.EnsureProfile(m, m.Volume("v").ID, c.p)
		if !errors.Is(err, clustermap.ErrProfile) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("EnsureProfile(%+v): %v, want an ErrProfile naming %q", c.p, err, c.want)
		}
	}
	got, err := clustermap.Decode(clustermap.Encode(m))
	if err != nil || !mapsEqual(got, m) {
		t.Fatalf("a map with stripe groups does not round-trip: %v", err)
	}
}

// TestReconcileStripeGroup: a down member is replaced in place while K
// in-sync members are up; the leader's report makes it in sync; below K
// nothing is replaced.
func TestReconcileStripeGroup(t *testing.T) {
	m := newMap(t, ecBricks(0, 5, 5, "")...)
	m = place(t, m, clustermap.VolumeSpec{Name: "v", Replicas: 2, PGs: 4})
	m, _ = ensure(t, m, "v", clustermap.Profile{K: 2, M: 1})
	v := m.Volume("v")
	g := v.SGs[0]
	victim := g.Bricks[1]
	up := alive(upNames(m)...)
	delete(up, victim)
	n := mustReconcile(t, m, up)
	ng := n.Volume("v").SGs[0]
	if slices.Contains(ng.Bricks, victim) || len(ng.Syncing) != 1 || ng.Bricks[1] != ng.Syncing[0] || ng.Since != n.Epoch {
		t.Fatalf("down %s not replaced in place as syncing: %+v → %+v", victim, g, ng)
	}
	checkSGs(t, n, "v")
	if clustermap.MarkSGSynced(n, v.ID, 0, ng.Syncing[0], ng.Bricks[2], ng.Since) != nil && ng.Leader(n) != ng.Bricks[2] {
		t.Fatal("MarkSGSynced accepted a report from a non-leader")
	}
	if clustermap.MarkSGSynced(n, v.ID, 0, ng.Syncing[0], ng.Leader(n), ng.Since-1) != nil {
		t.Fatal("MarkSGSynced accepted a report for an older membership")
	}
	s := clustermap.MarkSGSynced(n, v.ID, 0, ng.Syncing[0], ng.Leader(n), ng.Since)
	if s == nil || len(s.Volume("v").SGs[0].Syncing) != 0 {
		t.Fatalf("MarkSGSynced by the leader ignored: %v", s)
	}
	mustValid(t, s)

	// Two of three down: fewer than K=2 in sync remain, so the in-sync
	// members stay (their shards are needed), while nothing else could.
	m2 := s
	g2 := m2.Volume("v").SGs[0]
	up = alive(upNames(m2)...)
	delete(up, g2.Bricks[0])
	delete(up, g2.Bricks[1])
	n2 := clustermap.Reconcile(m2, up)
	if n2 != nil {
		if ng2 := n2.Volume("v").SGs[0]; !slices.Equal(ng2.Bricks, g2.Bricks) {
			t.Fatalf("SG changed below K in-sync up members: %v → %v", g2.Bricks, ng2.Bricks)
		}
	}
}

func TestPickStripeGroup(t *testing.T) {
	m := newMap(t, ecBricks(0, 6, 6, "")...)
	m = place(t, m, clustermap.VolumeSpec{Name: "v", Replicas: 2, PGs: 4})
	m, id := ensure(t, m, "v", clustermap.Profile{K: 2, M: 1})
	v := m.Volume("v")
	counts := map[uint16]int{}
	for key := range uint64(1000) {
		sg, ok := clustermap.PickStripeGroup(m, v, id, key)
		if !ok || v.SGs[sg].Profile != id {
			t.Fatalf("key %d: sg %d ok %v", key, sg, ok)
		}
		counts[sg]++
	}
	if len(counts) != len(v.SGs) {
		t.Fatalf("1000 keys used %d of %d SGs: %v", len(counts), len(v.SGs), counts)
	}
	// Mark every member of SG 0 full but one SG: only healthy SGs are picked.
	n := m.Clone()
	for _, b := range v.SGs[0].Bricks {
		n.Brick(b).Full = true
	}
	nv := n.Volume("v")
	for key := range uint64(200) {
		if sg, ok := clustermap.PickStripeGroup(n, nv, id, key); ok && slices.ContainsFunc(nv.SGs[sg].Bricks, func(b string) bool { return n.Brick(b).Full }) {
			t.Fatalf("picked sg %d with a full member", sg)
		}
	}
	if _, ok := clustermap.PickStripeGroup(m, v, id+7, 1); ok {
		t.Fatal("picked an SG of an unknown profile")
	}
}

func TestValidateStripes(t *testing.T) {
	m := newMap(t, ecBricks(0, 4, 4, "")...)
	m = place(t, m, clustermap.VolumeSpec{Name: "v", Replicas: 2, PGs: 2})
	m, _ = ensure(t, m, "v", clustermap.Profile{K: 2, M: 1})
	for name, spoil := range map[string]func(v *clustermap.Volume){
		"unknown profile":   func(v *clustermap.Volume) { v.SGs[0].Profile = 9 },
		"short group":       func(v *clustermap.Volume) { v.SGs[0].Bricks = v.SGs[0].Bricks[:2] },
		"duplicate member":  func(v *clustermap.Volume) { v.SGs[0].Bricks[1] = v.SGs[0].Bricks[0] },
		"unknown brick":     func(v *clustermap.Volume) { v.SGs[0].Bricks[0] = "nope" },
		"foreign syncing":   func(v *clustermap.Volume) { v.SGs[0].Syncing = []string{"nope"} },
		"profile id 0":      func(v *clustermap.Volume) { v.Profiles[0].ID = 0 },
		"bad profile":       func(v *clustermap.Volume) { v.Profiles[0].K = 99 },
		"repeated profile":  func(v *clustermap.Volume) { v.Profiles = append(v.Profiles, v.Profiles[0]) },
		"volume id too big": func(v *clustermap.Volume) { v.ID = clustermap.ShardVolMax },
	} {
		n := m.Clone()
		spoil(n.Volume("v"))
		if name == "volume id too big" {
			n.NextVolumeID = clustermap.ShardVolMax + 1
		}
		if err := n.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %s", name, fmt.Sprint(n.Volume("v").SGs))
		}
	}
	c := m.Clone()
	c.Volume("v").SGs[0].Bricks[0] = "changed"
	c.Brick("b0").Features[0] = "changed"
	if m.Volume("v").SGs[0].Bricks[0] == "changed" || m.Brick("b0").Features[0] == "changed" {
		t.Fatal("Clone shares SG members or features")
	}
}

// TestEnsureProfileSameHost: a volume whose replicas may share a host (one
// machine) admits stripe groups on one host, on distinct bricks; a rack
// level still needs racks.
func TestEnsureProfileSameHost(t *testing.T) {
	var bs []clustermap.Brick
	for i := range 3 {
		b := brick(fmt.Sprintf("b%d", i), "localhost", "", "")
		b.Features = []string{clustermap.FeatureEC}
		bs = append(bs, b)
	}
	m := newMap(t, bs...)
	m = place(t, m, clustermap.VolumeSpec{Name: "v", Replicas: 3, PGs: 4, AllowSameDomain: true})
	m, _ = ensure(t, m, "v", clustermap.Profile{K: 2, M: 1})
	for i, g := range m.Volume("v").SGs {
		if len(g.Bricks) != 3 || slices.Compact(slices.Sorted(slices.Values(g.Bricks)))[2] == "" {
			t.Fatalf("sg %d: %v", i, g.Bricks)
		}
	}
	if _, _, err := clustermap.EnsureProfile(m, m.Volume("v").ID, clustermap.Profile{K: 2, M: 1, Level: clustermap.LevelRack}); err == nil {
		t.Fatal("a rack-level profile admitted on bricks without racks")
	}
	m = place(t, m, clustermap.VolumeSpec{Name: "w", Replicas: 1, PGs: 1, AllowSameDomain: false})
	if _, _, err := clustermap.EnsureProfile(m, m.Volume("w").ID, clustermap.Profile{K: 2, M: 1}); err == nil {
		t.Fatal("a volume that keeps hosts distinct admitted stripe groups on one host")
	}
}

// TestDrainStripeGroup: a draining member of a healthy stripe group is
// replaced in place (one at a time), and once rebuilt it holds no position.
func TestDrainStripeGroup(t *testing.T) {
	m := newMap(t, ecBricks(0, 5, 5, "")...)
	m = place(t, m, clustermap.VolumeSpec{Name: "v", Replicas: 2, PGs: 2})
	m, _ = ensure(t, m, "v", clustermap.Profile{K: 2, M: 1})
	victim := m.Volume("v").SGs[0].Bricks[0]
	if clustermap.SGsOn(m, victim) == 0 {
		t.Fatal("victim in no stripe group")
	}
	n := m.Clone()
	n.Brick(victim).Draining = true
	n.Epoch++
	m = converge(t, n, 200)
	if got := clustermap.SGsOn(m, victim); got != 0 {
		t.Fatalf("drained %s still holds %d stripe group positions: %+v", victim, got, m.Volume("v").SGs)
	}
	checkSGs(t, m, "v")
}
