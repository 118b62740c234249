package clustermap_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/plumeria-fs/plumeria/clustermap"
)

// classed builds bricks b0..b(n-1) on their own hosts, in racks r(i%racks),
// of class cls, with capacity capGiB GiB each (0: none reported).
func classed(from, n, racks int, cls string, capGiB int64) []clustermap.Brick {
	var bs []clustermap.Brick
	for i := from; i < from+n; i++ {
		b := brick(fmt.Sprintf("b%d", i), fmt.Sprintf("h%d", i), fmt.Sprintf("r%d", i%racks), "")
		b.Class, b.CapacityBytes = cls, capGiB<<30
		bs = append(bs, b)
	}
	return bs
}

func place(t *testing.T, m *clustermap.Map, spec clustermap.VolumeSpec) *clustermap.Map {
	t.Helper()
	if spec.ChunkBytes == 0 {
		spec.ChunkBytes = chunk
	}
	n, err := clustermap.PlaceVolume(m, spec)
	if err != nil {
		t.Fatalf("PlaceVolume(%+v): %v", spec, err)
	}
	mustValid(t, n)
	return n
}

func TestPlaceVolumeClass(t *testing.T) {
	m := newMap(t, append(classed(0, 4, 4, "ssd", 0), classed(4, 4, 4, "", 0)...)...)
	m = place(t, m, clustermap.VolumeSpec{Name: "fast", Replicas: 3, PGs: 32, Class: "ssd"})
	m = place(t, m, clustermap.VolumeSpec{Name: "slow", Replicas: 3, PGs: 32, Class: clustermap.ClassDefault})
	for _, c := range []struct{ vol, class string }{{"fast", "ssd"}, {"slow", clustermap.ClassDefault}} {
		for i, p := range m.Volume(c.vol).PGs {
			for _, b := range p.Bricks {
				if got := m.Brick(b).ClassName(); got != c.class {
					t.Fatalf("volume %s pg %d: member %s of class %s, want %s", c.vol, i, b, got, c.class)
				}
			}
		}
	}
	_, err := clustermap.PlaceVolume(m, clustermap.VolumeSpec{Name: "x", Replicas: 2, PGs: 4, ChunkBytes: chunk, Class: "nvme"})
	if !errors.Is(err, clustermap.ErrPlacement) || !strings.Contains(err.Error(), `no brick of class "nvme"`) {
		t.Fatalf("unknown class: %v", err)
	}
	_, err = clustermap.PlaceVolume(m, clustermap.VolumeSpec{Name: "x", Replicas: 5, PGs: 4, ChunkBytes: chunk, Class: "ssd"})
	if !errors.Is(err, clustermap.ErrPlacement) || !strings.Contains(err.Error(), "bricks of class ssd") {
		t.Fatalf("5 replicas on 4 ssd bricks: %v", err)
	}
	if _, err = clustermap.PlaceVolume(m, clustermap.VolumeSpec{Name: "x", Replicas: 1, PGs: 1, ChunkBytes: chunk, Class: "s s"}); err == nil {
		t.Fatal("a class with a space was accepted")
	}
}

// TestPlaceVolumeRackLevel: domain=rack never puts two members of a PG in
// one rack, refuses with too few racks, and skips bricks without a rack.
func TestPlaceVolumeRackLevel(t *testing.T) {
	bs := classed(0, 9, 3, "", 0) // 9 hosts in 3 racks
	nolabel := brick("b9", "h9", "", "")
	m := newMap(t, append(bs, nolabel)...)
	m = place(t, m, clustermap.VolumeSpec{Name: "v", Replicas: 3, PGs: 64, Domain: clustermap.LevelRack})
	for i, p := range m.Volume("v").PGs {
		racks := map[string]bool{}
		for _, b := range p.Bricks {
			r := m.Brick(b).Domain[clustermap.LevelRack]
			if r == "" || racks[r] {
				t.Fatalf("pg %d: %v has two members in rack %q", i, p.Bricks, r)
			}
			racks[r] = true
		}
	}
	_, err := clustermap.PlaceVolume(m, clustermap.VolumeSpec{Name: "w", Replicas: 4, PGs: 4, ChunkBytes: chunk, Domain: clustermap.LevelRack})
	if !errors.Is(err, clustermap.ErrPlacement) || !strings.Contains(err.Error(), "4 distinct racks") || !strings.Contains(err.Error(), "lack a rack label") {
		t.Fatalf("4 replicas over 3 racks: %v", err)
	}
	_, err = clustermap.PlaceVolume(m, clustermap.VolumeSpec{Name: "w", Replicas: 2, PGs: 4, ChunkBytes: chunk, Domain: clustermap.LevelRack, AllowSameDomain: true})
	if err == nil || !strings.Contains(err.Error(), "contradicts") {
		t.Fatalf("allow-same-domain with domain=rack: %v", err)
	}
	if _, err = clustermap.PlaceVolume(m, clustermap.VolumeSpec{Name: "w", Replicas: 2, PGs: 4, ChunkBytes: chunk, Domain: "planet"}); err == nil {
		t.Fatal("domain=planet accepted")
	}
}

// TestPlaceVolumeByCapacity: replicas land in proportion to capacity.
func TestPlaceVolumeByCapacity(t *testing.T) {
	var bs []clustermap.Brick
	for i, c := range []int64{1, 1, 2, 4} {
		bs = append(bs, classed(i, 1, 1, "", c*1024)...)
	}
	m := newMap(t, bs...)
	m = place(t, m, clustermap.VolumeSpec{Name: "v", Replicas: 2, PGs: 128})
	got := map[string]int{}
	for _, p := range m.Volume("v").PGs {
		for _, b := range p.Bricks {
			got[b]++
		}
	}
	// 256 replicas over weights 1:1:2:4 → 32, 32, 64, 128.
	for b, want := range map[string]int{"b0": 32, "b1": 32, "b2": 64, "b3": 128} {
		if d := got[b] - want; d < -2 || d > 2 {
			t.Errorf("%s holds %d replicas, want %d±2 (all: %v)", b, got[b], want, got)
		}
	}
	if _, dev := clustermap.Balance(m); dev >= 2 {
		t.Errorf("deviation %.2f after placement", dev)
	}
}

func TestPlaceVolumeSkipsFull(t *testing.T) {
	bs := classed(0, 4, 4, "", 0)
	bs[1].Full = true
	m := newMap(t, bs...)
	m = place(t, m, clustermap.VolumeSpec{Name: "v", Replicas: 3, PGs: 16})
	for _, p := range m.Volume("v").PGs {
		if slices.Contains(p.Bricks, "b1") {
			t.Fatalf("full b1 got a member: %v", p.Bricks)
		}
	}
	_, err := clustermap.PlaceVolume(m, clustermap.VolumeSpec{Name: "w", Replicas: 4, PGs: 1, ChunkBytes: chunk})
	if !errors.Is(err, clustermap.ErrPlacement) || !strings.Contains(err.Error(), "nearly full") {
		t.Fatalf("4 replicas with one of 4 bricks full: %v", err)
	}
}

func TestMarkFullHysteresis(t *testing.T) {
	m := newMap(t, classed(0, 2, 1, "", 0)...)
	u := func(used int64) map[string]clustermap.Usage {
		return map[string]clustermap.Usage{"b0": {Used: used, Capacity: 100}}
	}
	if n := clustermap.MarkFull(m, u(89)); n != nil {
		t.Fatal("89% marked full")
	}
	n := clustermap.MarkFull(m, u(90))
	if n == nil || !n.Brick("b0").Full || n.Brick("b1").Full || n.Epoch != m.Epoch+1 || m.Brick("b0").Full {
		t.Fatalf("90%%: %+v", n)
	}
	mustValid(t, n)
	if clustermap.MarkFull(n, u(86)) != nil {
		t.Fatal("86% cleared full: no hysteresis")
	}
	if c := clustermap.MarkFull(n, u(84)); c == nil || c.Brick("b0").Full {
		t.Fatal("84% did not clear full")
	}
	if clustermap.MarkFull(n, nil) != nil || clustermap.MarkFull(n, map[string]clustermap.Usage{"b0": {Used: 5}}) != nil {
		t.Fatal("no report, or no capacity, changed the mark")
	}
}

// converge reconciles and reports every backfill done until nothing
// changes; it fails the test if that takes more than limit rounds.
func converge(t *testing.T, m *clustermap.Map, limit int) *clustermap.Map {
	t.Helper()
	up := alive(upNames(m)...)
	for round := 0; round < limit; round++ {
		changed := false
		if n := clustermap.Reconcile(m, up); n != nil {
			mustValid(t, n)
			m, changed = n, true
		}
		for _, v := range m.Volumes {
			for i, p := range v.PGs {
				for _, s := range p.Syncing {
					if n := clustermap.MarkSynced(m, v.ID, uint32(i), s, p.Primary(), p.Since); n != nil {
						mustValid(t, n)
						m, changed = n, true
						break
					}
				}
			}
		}
		for _, v := range m.Volumes {
			for i, g := range v.SGs {
				for _, s := range g.Syncing {
					if n := clustermap.MarkSGSynced(m, v.ID, uint16(i), s, g.Leader(m), g.Since); n != nil {
						mustValid(t, n)
						m, changed = n, true
						break
					}
				}
			}
		}
		if !changed {
			return m
		}
	}
	t.Fatalf("no fixpoint after %d rounds: %s", limit, clustermap.Encode(m))
	return nil
}

// TestRebalanceByCapacity: bricks of different capacity joining a cluster
// end within two replicas of their targets, and the fixpoint is stable.
func TestRebalanceByCapacity(t *testing.T) {
	m := newMap(t, classed(0, 3, 1, "", 1024)...)
	m = place(t, m, clustermap.VolumeSpec{Name: "v", Replicas: 2, PGs: 96})
	n := m.Clone()
	for _, b := range classed(3, 2, 1, "", 4096) {
		n.PutBrick(b)
	}
	n.Epoch++
	m = converge(t, n, 400)
	bal, dev := clustermap.Balance(m)
	if dev >= 2 {
		t.Fatalf("deviation %.2f at the fixpoint: %+v", dev, bal)
	}
	for _, b := range bal {
		if b.Name >= "b3" && b.Units < 50 {
			t.Fatalf("big brick %s holds only %d of 192 replicas: %+v", b.Name, b.Units, bal)
		}
	}
	if clustermap.Reconcile(m, alive(upNames(m)...)) != nil {
		t.Fatal("the fixpoint flaps")
	}
}

// TestRebalanceOffFull: members move off a brick marked full, never onto
// one; classes stay apart.
func TestRebalanceOffFull(t *testing.T) {
	m := newMap(t, append(classed(0, 4, 1, "", 0), classed(4, 3, 1, "ssd", 0)...)...)
	m = place(t, m, clustermap.VolumeSpec{Name: "v", Replicas: 2, PGs: 32, Class: clustermap.ClassDefault})
	m = place(t, m, clustermap.VolumeSpec{Name: "f", Replicas: 2, PGs: 12, Class: "ssd"})
	n := clustermap.MarkFull(m, map[string]clustermap.Usage{"b0": {Used: 95, Capacity: 100}})
	m = converge(t, n, 400)
	for _, v := range m.Volumes {
		for i, p := range v.PGs {
			if slices.Contains(p.Bricks, "b0") {
				t.Fatalf("volume %s pg %d still on full b0: %+v", v.Name, i, p)
			}
			for _, b := range p.Bricks {
				if want := v.Class; m.Brick(b).ClassName() != want {
					t.Fatalf("volume %s pg %d: %s of class %s", v.Name, i, b, m.Brick(b).ClassName())
				}
			}
		}
	}
}

// TestReconcileReplacesMisplaced: a brick restarted with another class, or
// a rack label shared with another member, is replaced like a draining one.
func TestReconcileReplacesMisplaced(t *testing.T) {
	m := newMap(t, classed(0, 6, 6, "ssd", 0)...)
	m = place(t, m, clustermap.VolumeSpec{Name: "v", Replicas: 2, PGs: 16, Class: "ssd", Domain: clustermap.LevelRack})
	n := m.Clone()
	n.Brick("b0").Class = "hdd"
	n.Brick("b1").Domain[clustermap.LevelRack] = "r2" // now shares b2's rack
	n.Epoch++
	m = converge(t, n, 200)
	for i, p := range m.Volume("v").PGs {
		if slices.Contains(p.Bricks, "b0") {
			t.Fatalf("pg %d keeps hdd brick b0: %+v", i, p)
		}
		if slices.Contains(p.Bricks, "b1") && slices.Contains(p.Bricks, "b2") {
			t.Fatalf("pg %d keeps b1 and b2 in one rack: %+v", i, p)
		}
	}
}
