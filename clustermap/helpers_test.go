package clustermap_test

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/limits"
)

const chunk = limits.ChunkBytesDefault

// brick builds an up brick. Empty domain names are left out.
func brick(name, host, rack, site string) clustermap.Brick {
	d := map[string]string{}
	for lvl, v := range map[string]string{clustermap.LevelHost: host, clustermap.LevelRack: rack, clustermap.LevelSite: site} {
		if v != "" {
			d[lvl] = v
		}
	}
	if len(d) == 0 {
		d = nil
	}
	return clustermap.Brick{Name: name, Addr: name + ":7000", Domain: d, State: clustermap.BrickUp}
}

// hostBricks returns n up bricks b0..b(n-1), each on its own host.
func hostBricks(n int) []clustermap.Brick {
	var bs []clustermap.Brick
	for i := range n {
		bs = append(bs, brick(fmt.Sprintf("b%d", i), fmt.Sprintf("h%d", i), "", ""))
	}
	return bs
}

// newMap returns a valid map at epoch 1 holding bricks.
func newMap(t testing.TB, bricks ...clustermap.Brick) *clustermap.Map {
	t.Helper()
	m := &clustermap.Map{Epoch: 1, NextVolumeID: 1}
	for _, b := range bricks {
		m.PutBrick(b)
	}
	mustValid(t, m)
	return m
}

// addVolume is AddVolume that fails the test on error and checks the result.
func addVolume(t testing.TB, m *clustermap.Map, name string, replicas, pgs int, allowSame bool) *clustermap.Map {
	t.Helper()
	n, err := clustermap.AddVolume(m, name, replicas, chunk, pgs, allowSame)
	if err != nil {
		t.Fatalf("AddVolume(%s, replicas=%d, pgs=%d, allowSame=%v): %v", name, replicas, pgs, allowSame, err)
	}
	if n.Epoch != m.Epoch+1 {
		t.Fatalf("AddVolume: epoch %d → %d, want +1", m.Epoch, n.Epoch)
	}
	mustValid(t, n)
	return n
}

// alive returns the set of names.
func alive(names ...string) map[string]bool {
	s := map[string]bool{}
	for _, n := range names {
		s[n] = true
	}
	return s
}

// upNames lists the bricks the map says are up.
func upNames(m *clustermap.Map) []string {
	var out []string
	for _, b := range m.Bricks {
		if b.State == clustermap.BrickUp {
			out = append(out, b.Name)
		}
	}
	return out
}

// without returns s minus the names in drop.
func without(s []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(s), func(x string) bool { return slices.Contains(drop, x) })
}

// reconcile runs Reconcile and checks what every result must satisfy:
// epoch +1 on change, the input unchanged, and all invariants.
func reconcile(t testing.TB, m *clustermap.Map, up map[string]bool) *clustermap.Map {
	t.Helper()
	before := clustermap.Encode(m)
	n := clustermap.Reconcile(m, up)
	if after := clustermap.Encode(m); string(before) != string(after) {
		t.Fatalf("Reconcile changed its input:\nbefore %s\nafter  %s", before, after)
	}
	if n == nil {
		return nil
	}
	if n.Epoch != m.Epoch+1 {
		t.Fatalf("Reconcile: epoch %d → %d, want +1", m.Epoch, n.Epoch)
	}
	checkInvariants(t, m, n)
	// Only MarkSynced makes a member in sync; Reconcile never does.
	for _, pv := range m.Volumes {
		for i, pp := range pv.PGs {
			np := n.VolumeByID(pv.ID).PGs[i]
			for _, b := range np.InSync() {
				if !slices.Contains(pp.InSync(), b) {
					t.Fatalf("volume %s pg %d: Reconcile made %s in sync: %+v → %+v", pv.Name, i, b, pp, np)
				}
			}
		}
	}
	return n
}

// mustReconcile is reconcile that requires a change.
func mustReconcile(t testing.TB, m *clustermap.Map, up map[string]bool) *clustermap.Map {
	t.Helper()
	n := reconcile(t, m, up)
	if n == nil {
		t.Fatalf("Reconcile(alive=%v) = nil, want a change", keys(up))
	}
	return n
}

func keys(s map[string]bool) []string {
	var out []string
	for k, v := range s {
		if v {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func mustValid(t testing.TB, m *clustermap.Map) {
	t.Helper()
	if err := m.Validate(); err != nil {
		t.Fatalf("Validate: %v\nmap: %s", err, clustermap.Encode(m))
	}
}

// hostOf mirrors the documented rule: a brick without a host domain is its own host.
func hostOf(b *clustermap.Brick) string {
	if h := b.Domain[clustermap.LevelHost]; h != "" {
		return "host:" + h
	}
	return "brick:" + b.Name
}

// checkInvariants checks next (derived from prev, which may be nil) against
// the invariants every map Plumeria produces must keep.
func checkInvariants(t testing.TB, prev, next *clustermap.Map) {
	t.Helper()
	mustValid(t, next)
	for _, v := range next.Volumes {
		for i, p := range v.PGs {
			if len(p.Bricks) == 0 {
				t.Fatalf("volume %s pg %d: empty member list", v.Name, i)
			}
			if len(p.InSync()) == 0 {
				t.Fatalf("volume %s pg %d: no in-sync member: %+v", v.Name, i, p)
			}
			if slices.Contains(p.Syncing, p.Primary()) {
				t.Fatalf("volume %s pg %d: syncing primary: %+v", v.Name, i, p)
			}
			if !v.AllowSameDomain {
				hosts := map[string]string{}
				for _, name := range p.Bricks {
					h := hostOf(next.Brick(name))
					if other, ok := hosts[h]; ok {
						t.Fatalf("volume %s pg %d: %s and %s share %s: %+v", v.Name, i, other, name, h, p)
					}
					hosts[h] = name
				}
			}
			for _, s := range p.Syncing {
				if b := next.Brick(s); b.Draining {
					t.Fatalf("volume %s pg %d: backfilling onto draining brick %s", v.Name, i, s)
				}
			}
		}
	}
	if prev == nil {
		return
	}
	// A PG never loses its last in-sync member; an in-sync member stays
	// in sync while it stays a member.
	for _, pv := range prev.Volumes {
		nv := next.VolumeByID(pv.ID)
		if nv == nil {
			t.Fatalf("volume %s vanished", pv.Name)
		}
		for i, pp := range pv.PGs {
			np := nv.PGs[i]
			prevIn, nextIn := pp.InSync(), np.InSync()
			for _, b := range prevIn {
				if slices.Contains(np.Bricks, b) && !slices.Contains(nextIn, b) {
					t.Fatalf("volume %s pg %d: in-sync %s became syncing: %+v → %+v", pv.Name, i, b, pp, np)
				}
			}
			for _, b := range nextIn {
				if !slices.Contains(prevIn, b) && !slices.Contains(pp.Syncing, b) {
					t.Fatalf("volume %s pg %d: %s joined in sync without backfill: %+v → %+v", pv.Name, i, b, pp, np)
				}
			}
			anyInSyncUp := slices.ContainsFunc(prevIn, func(b string) bool {
				return next.Brick(b).State == clustermap.BrickUp
			})
			if !anyInSyncUp {
				for _, b := range prevIn {
					if !slices.Contains(np.Bricks, b) {
						t.Fatalf("volume %s pg %d: all in-sync members down, yet %s was dropped: %+v → %+v",
							pv.Name, i, b, pp, np)
					}
				}
			}
		}
	}
}

// normalize returns a copy of m with empty slices and maps made nil, so
// two maps that encode the same compare equal with reflect.DeepEqual.
func normalize(m *clustermap.Map) *clustermap.Map {
	c := m.Clone()
	if len(c.Coordinators) == 0 {
		c.Coordinators = nil
	}
	if len(c.Bricks) == 0 {
		c.Bricks = nil
	}
	for i := range c.Bricks {
		if len(c.Bricks[i].Domain) == 0 {
			c.Bricks[i].Domain = nil
		}
	}
	if len(c.Volumes) == 0 {
		c.Volumes = nil
	}
	for i := range c.Volumes {
		v := &c.Volumes[i]
		if len(v.Snapshots) == 0 {
			v.Snapshots = nil
		}
		for j := range v.PGs {
			if len(v.PGs[j].Syncing) == 0 {
				v.PGs[j].Syncing = nil
			}
		}
	}
	if len(c.Fences) == 0 {
		c.Fences = nil
	}
	return c
}

func mapsEqual(a, b *clustermap.Map) bool {
	return reflect.DeepEqual(normalize(a), normalize(b))
}

// pgOf returns a pointer to pg i of the named volume.
func pgOf(t testing.TB, m *clustermap.Map, vol string, i int) *clustermap.PG {
	t.Helper()
	v := m.Volume(vol)
	if v == nil {
		t.Fatalf("no volume %s", vol)
	}
	return &v.PGs[i]
}

// findPG returns the index of the first PG of vol satisfying f, or fails.
func findPG(t testing.TB, m *clustermap.Map, vol string, f func(clustermap.PG) bool) int {
	t.Helper()
	for i, p := range m.Volume(vol).PGs {
		if f(p) {
			return i
		}
	}
	t.Fatalf("volume %s: no PG matches", vol)
	return -1
}

// syncAll marks every syncing member of every PG synced, as reported by the
// PG's primary, until nothing is syncing. It checks each step.
func syncAll(t testing.TB, m *clustermap.Map) *clustermap.Map {
	t.Helper()
	for range 1000 {
		progressed := false
		for _, v := range m.Volumes {
			for i, p := range v.PGs {
				if len(p.Syncing) == 0 {
					continue
				}
				n := clustermap.MarkSynced(m, v.ID, uint32(i), p.Syncing[0], p.Primary(), sinceOf(m, v.ID, uint32(i)))
				if n == nil {
					t.Fatalf("MarkSynced(vol %d pg %d %s by primary %s) = nil", v.ID, i, p.Syncing[0], p.Primary())
				}
				if n.Epoch <= m.Epoch {
					t.Fatalf("MarkSynced: epoch %d → %d", m.Epoch, n.Epoch)
				}
				checkInvariants(t, m, n)
				m, progressed = n, true
				break
			}
			if progressed {
				break
			}
		}
		if !progressed {
			return m
		}
	}
	t.Fatal("syncAll did not converge")
	return nil
}

// sinceOf is the Since of a PG, for MarkSynced reports made under the
// current membership (0 for a PG that does not exist).
func sinceOf(m *clustermap.Map, vol uint64, pg uint32) uint64 {
	v := m.VolumeByID(vol)
	if v == nil || int(pg) >= len(v.PGs) {
		return 0
	}
	return v.PGs[pg].Since
}
