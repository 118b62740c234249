package clustermap_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/limits"
)

func TestAddVolumeDistinctHosts(t *testing.T) {
	for _, n := range []int{3, 4, 5, 9} {
		t.Run(fmt.Sprintf("%d bricks", n), func(t *testing.T) {
			m := addVolume(t, newMap(t, hostBricks(n)...), "v", 3, 64, false)
			v := m.Volume("v")
			if v.ID != 1 || v.Gen != 1 || v.Replicas != 3 || v.ChunkBytes != chunk || v.AllowSameDomain || len(v.PGs) != 64 {
				t.Fatalf("volume fields: %+v", *v)
			}
			for i, p := range v.PGs {
				if len(p.Bricks) != 3 || len(p.Syncing) != 0 {
					t.Fatalf("pg %d: %+v, want 3 in-sync bricks", i, p)
				}
			}
			checkInvariants(t, nil, m) // includes distinct hosts
		})
	}
}

// TestAddVolumeHostDomainCounts: bricks sharing a host domain are one host,
// whatever their names; bricks without one are each their own host.
func TestAddVolumeHostDomainCounts(t *testing.T) {
	m := newMap(t,
		brick("a1", "hA", "", ""), brick("a2", "hA", "", ""), brick("a3", "hA", "", ""),
		brick("b1", "hB", "", ""), brick("b2", "hB", "", ""),
		brick("lone", "", "", ""),
	)
	m = addVolume(t, m, "v", 3, 32, false)
	for i, p := range m.Volume("v").PGs {
		if !slices.Contains(p.Bricks, "lone") {
			t.Fatalf("pg %d: %v lacks the only brick of the third host", i, p.Bricks)
		}
	}
	checkInvariants(t, nil, m)
}

func TestAddVolumeRefusesSharedHosts(t *testing.T) {
	cases := map[string][]clustermap.Brick{
		"two bricks one host": {brick("b0", "h0", "", ""), brick("b1", "h0", "", ""), brick("b2", "h1", "", ""), brick("b3", "h1", "", "")},
		"all on one host":     {brick("b0", "h0", "", ""), brick("b1", "h0", "", ""), brick("b2", "h0", "", "")},
		"too few bricks":      hostBricks(2),
	}
	for name, bricks := range cases {
		t.Run(name, func(t *testing.T) {
			m := newMap(t, bricks...)
			before := clustermap.Encode(m)
			n, err := clustermap.AddVolume(m, "v", 3, chunk, 16, false)
			if err == nil {
				t.Fatalf("AddVolume placed 3 replicas on %d hosts: %+v", 2, n.Volume("v").PGs)
			}
			if n != nil {
				t.Fatalf("AddVolume returned a map with error %v", err)
			}
			if !errors.Is(err, clustermap.ErrPlacement) {
				t.Errorf("error %v does not wrap ErrPlacement", err)
			}
			for _, want := range []string{"--allow-same-domain", `"v"`, "host"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %s", err, want)
				}
			}
			if !bytes.Equal(before, clustermap.Encode(m)) {
				t.Fatal("a refused AddVolume changed its input")
			}
		})
	}
}

func TestAddVolumeAllowSameDomain(t *testing.T) {
	m := newMap(t, brick("b0", "h0", "", ""), brick("b1", "h0", "", ""), brick("b2", "h1", "", ""), brick("b3", "h1", "", ""))
	m = addVolume(t, m, "v", 3, 64, true)
	v := m.Volume("v")
	if !v.AllowSameDomain {
		t.Fatal("AllowSameDomain not recorded in the volume")
	}
	for i, p := range v.PGs {
		if len(p.Bricks) != 3 || hasDup(p.Bricks) {
			t.Fatalf("pg %d: %v, want 3 distinct bricks", i, p.Bricks)
		}
		hosts := map[string]bool{}
		for _, b := range p.Bricks {
			hosts[hostOf(m.Brick(b))] = true
		}
		if len(hosts) != 2 {
			t.Fatalf("pg %d: %v uses %d hosts; distinct hosts are still preferred", i, p.Bricks, len(hosts))
		}
	}
	// Everything on one host: placement still works, one replica per brick.
	one := newMap(t, brick("b0", "h", "", ""), brick("b1", "h", "", ""), brick("b2", "h", "", ""))
	one = addVolume(t, one, "v", 3, 8, true)
	for _, p := range one.Volume("v").PGs {
		if len(p.Bricks) != 3 || hasDup(p.Bricks) {
			t.Fatalf("pg %v, want 3 distinct bricks", p.Bricks)
		}
	}
	// Even so, a brick holds at most one replica.
	if _, err := clustermap.AddVolume(newMap(t, hostBricks(2)...), "v", 3, chunk, 8, true); !errors.Is(err, clustermap.ErrPlacement) {
		t.Fatalf("3 replicas on 2 bricks with allowSameDomain: err %v, want ErrPlacement", err)
	}
}

func hasDup(s []string) bool {
	c := slices.Clone(s)
	slices.Sort(c)
	return len(slices.Compact(c)) != len(s)
}

func TestAddVolumeSkipsDownAndDraining(t *testing.T) {
	m := newMap(t, hostBricks(5)...)
	m.Brick("b1").State = clustermap.BrickDown
	m.Brick("b3").Draining = true
	n := addVolume(t, m, "v", 3, 32, false)
	for i, p := range n.Volume("v").PGs {
		if slices.Contains(p.Bricks, "b1") || slices.Contains(p.Bricks, "b3") {
			t.Fatalf("pg %d: %v uses a down or draining brick", i, p.Bricks)
		}
	}
	if _, err := clustermap.AddVolume(m, "w", 4, chunk, 8, false); !errors.Is(err, clustermap.ErrPlacement) {
		t.Fatalf("4 replicas on 3 usable bricks: err %v, want ErrPlacement", err)
	}
	if _, err := clustermap.AddVolume(m, "w", 4, chunk, 8, true); !errors.Is(err, clustermap.ErrPlacement) {
		t.Fatalf("4 replicas on 3 usable bricks, allowSameDomain: err %v, want ErrPlacement", err)
	}
	if _, err := clustermap.AddVolume(newMap(t), "w", 1, chunk, 8, true); !errors.Is(err, clustermap.ErrPlacement) {
		t.Fatalf("no bricks: err %v, want ErrPlacement", err)
	}
}

func TestAddVolumeSpreadsRacks(t *testing.T) {
	var bs []clustermap.Brick
	for i := range 6 {
		bs = append(bs, brick(fmt.Sprintf("b%d", i), fmt.Sprintf("h%d", i), fmt.Sprintf("r%d", i%3), "s"))
	}
	m := addVolume(t, newMap(t, bs...), "v", 3, 64, false)
	for i, p := range m.Volume("v").PGs {
		racks := map[string]bool{}
		for _, b := range p.Bricks {
			racks[m.Brick(b).Domain[clustermap.LevelRack]] = true
		}
		if len(racks) != 3 {
			t.Fatalf("pg %d: %v spans %d racks, want 3", i, p.Bricks, len(racks))
		}
	}
	assertSpread(t, m, 64*3/6, 1)
}

func TestAddVolumeSpreadsSites(t *testing.T) {
	// Site s1 has two racks of two hosts, site s2 one rack of two hosts.
	m := newMap(t,
		brick("a", "ha", "r1", "s1"), brick("b", "hb", "r1", "s1"),
		brick("c", "hc", "r2", "s1"), brick("d", "hd", "r2", "s1"),
		brick("e", "he", "r3", "s2"), brick("f", "hf", "r3", "s2"),
	)
	m = addVolume(t, m, "v", 2, 64, false)
	for i, p := range m.Volume("v").PGs {
		if site(m, p.Bricks[0]) == site(m, p.Bricks[1]) {
			t.Fatalf("pg %d: %v on one site although two exist", i, p.Bricks)
		}
	}
	m = addVolume(t, m, "w", 3, 64, false)
	for i, p := range m.Volume("w").PGs {
		sites, racks := map[string]bool{}, map[string]bool{}
		for _, b := range p.Bricks {
			sites[site(m, b)] = true
			racks[m.Brick(b).Domain[clustermap.LevelRack]] = true
		}
		if len(sites) != 2 || len(racks) != 3 {
			t.Fatalf("pg %d: %v spans %d sites and %d racks, want 2 and 3", i, p.Bricks, len(sites), len(racks))
		}
	}
}

func site(m *clustermap.Map, b string) string { return m.Brick(b).Domain[clustermap.LevelSite] }

// assertSpread checks every brick holds want±slack replicas over all
// volumes, and primaries are spread to within slack of the mean.
func assertSpread(t *testing.T, m *clustermap.Map, want, slack int) {
	t.Helper()
	replicas, primaries, pgs := map[string]int{}, map[string]int{}, 0
	for _, v := range m.Volumes {
		for _, p := range v.PGs {
			pgs++
			primaries[p.Primary()]++
			for _, b := range p.Bricks {
				replicas[b]++
			}
		}
	}
	for _, b := range m.Bricks {
		if r := replicas[b.Name]; r < want-slack || r > want+slack {
			t.Errorf("brick %s holds %d replicas, want %d±%d (all: %v)", b.Name, r, want, slack, replicas)
		}
		if got := clustermap.PGsOn(m, b.Name); got != replicas[b.Name] {
			t.Errorf("PGsOn(%s) = %d, counted %d", b.Name, got, replicas[b.Name])
		}
		mean := float64(pgs) / float64(len(m.Bricks))
		if p := float64(primaries[b.Name]); p < mean-float64(slack)-1 || p > mean+float64(slack)+1 {
			t.Errorf("brick %s leads %v PGs, want about %.1f (all: %v)", b.Name, p, mean, primaries)
		}
	}
}

func TestAddVolumeBalancesLoadAndPrimaries(t *testing.T) {
	t.Run("3 bricks", func(t *testing.T) {
		m := addVolume(t, newMap(t, hostBricks(3)...), "v", 3, 64, false)
		primaries := map[string]int{}
		for _, p := range m.Volume("v").PGs {
			primaries[p.Primary()]++
		}
		for _, b := range []string{"b0", "b1", "b2"} {
			if n := primaries[b]; n < 21 || n > 22 {
				t.Errorf("brick %s leads %d PGs, want 21 or 22 (%v)", b, n, primaries)
			}
		}
	})
	t.Run("4 bricks", func(t *testing.T) {
		m := addVolume(t, newMap(t, hostBricks(4)...), "v", 3, 64, false)
		assertSpread(t, m, 48, 2)
	})
	t.Run("two volumes add up", func(t *testing.T) {
		m := addVolume(t, newMap(t, hostBricks(4)...), "v", 3, 10, false)
		m = addVolume(t, m, "w", 2, 22, false)
		// 10*3 + 22*2 = 74 replicas over 4 bricks.
		assertSpread(t, m, 74/4, 1)
		if v, w := m.Volume("v"), m.Volume("w"); v.ID != 1 || w.ID != 2 || m.NextVolumeID != 3 {
			t.Fatalf("ids %d, %d, next %d", v.ID, w.ID, m.NextVolumeID)
		}
	})
	t.Run("10 bricks 5 racks", func(t *testing.T) {
		var bs []clustermap.Brick
		for i := range 10 {
			bs = append(bs, brick(fmt.Sprintf("b%02d", i), fmt.Sprintf("h%d", i), fmt.Sprintf("r%d", i/2), ""))
		}
		m := addVolume(t, newMap(t, bs...), "v", 3, 250, false)
		assertSpread(t, m, 75, 2)
	})
}

func TestAddVolumeDeterministic(t *testing.T) {
	m := newMap(t, hostBricks(7)...)
	a := clustermap.Encode(addVolume(t, m, "v", 3, 128, false))
	b := clustermap.Encode(addVolume(t, m, "v", 3, 128, false))
	if !bytes.Equal(a, b) {
		t.Fatal("AddVolume is not a function of its input")
	}
}

func TestAddVolumeDoesNotMutate(t *testing.T) {
	m := addVolume(t, fixtureWithUpBricks(t), "first", 2, 4, false)
	before := clustermap.Encode(m)
	n := addVolume(t, m, "second", 3, 16, false)
	if !bytes.Equal(before, clustermap.Encode(m)) {
		t.Fatal("AddVolume changed its input")
	}
	// Scribble over everything in n; m must not see it.
	scribble(n)
	if !bytes.Equal(before, clustermap.Encode(m)) {
		t.Fatal("changing AddVolume's result changed its input: result shares memory")
	}
}

func fixtureWithUpBricks(t *testing.T) *clustermap.Map {
	m := fixture(t)
	for i := range m.Bricks {
		m.Bricks[i].State, m.Bricks[i].Draining = clustermap.BrickUp, false
	}
	return m
}

// scribble changes every nested field of m in place.
func scribble(m *clustermap.Map) {
	m.Epoch += 100
	for i := range m.Coordinators {
		m.Coordinators[i].Name += "x"
	}
	for i := range m.Bricks {
		m.Bricks[i].Addr += "x"
		m.Bricks[i].State = "x"
		if m.Bricks[i].Domain != nil {
			m.Bricks[i].Domain["host"] += "x"
			m.Bricks[i].Domain["new"] = "x"
		}
	}
	for i := range m.Volumes {
		v := &m.Volumes[i]
		v.Name += "x"
		if v.Snapshots != nil {
			v.Snapshots["new"] = 9
		}
		for j := range v.PGs {
			for k := range v.PGs[j].Bricks {
				v.PGs[j].Bricks[k] += "x"
			}
			for k := range v.PGs[j].Syncing {
				v.PGs[j].Syncing[k] += "x"
			}
		}
	}
	if m.Fences != nil {
		m.Fences["new"] = 1
	}
}

func TestCloneIsDeep(t *testing.T) {
	m := fixture(t)
	before := clustermap.Encode(m)
	c := m.Clone()
	if !mapsEqual(m, c) {
		t.Fatal("Clone differs from the original")
	}
	scribble(c)
	if !bytes.Equal(before, clustermap.Encode(m)) {
		t.Fatalf("Clone shares memory with the original:\nbefore %s\nafter  %s", before, clustermap.Encode(m))
	}
	// Appending to a clone's slices must not reach the original either.
	c = m.Clone()
	c.Volumes[0].PGs[0].Bricks = append(c.Volumes[0].PGs[0].Bricks[:1], "zz")
	c.Volumes[0].PGs[1].Syncing = append(c.Volumes[0].PGs[1].Syncing[:0], "zz")
	if !bytes.Equal(before, clustermap.Encode(m)) {
		t.Fatal("appending to a clone's slices changed the original")
	}
	if e := (&clustermap.Map{}).Clone(); !mapsEqual(e, &clustermap.Map{}) {
		t.Fatalf("Clone of the empty map: %+v", e)
	}
}

func TestAddVolumeArguments(t *testing.T) {
	m := addVolume(t, newMap(t, hostBricks(3)...), "taken", 3, 4, false)
	cases := []struct {
		name      string
		vol       string
		replicas  int
		chunk     uint32
		pgs       int
		wantInErr string
	}{
		{"bad name", "a/b", 3, chunk, 4, "a/b"},
		{"empty name", "", 3, chunk, 4, "name"},
		{"existing name", "taken", 3, chunk, 4, "exists"},
		{"zero replicas", "v", 0, chunk, 4, "replicas"},
		{"negative replicas", "v", -1, chunk, 4, "replicas"},
		{"zero pgs", "v", 3, chunk, 0, "placement groups"},
		{"negative pgs", "v", 3, chunk, -5, "placement groups"},
		{"bad chunk", "v", 3, 3000, 4, "chunk"},
		{"zero chunk", "v", 3, 0, 4, "chunk"},
	}
	before := clustermap.Encode(m)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, err := clustermap.AddVolume(m, c.vol, c.replicas, c.chunk, c.pgs, false)
			if err == nil || n != nil {
				t.Fatalf("AddVolume(%q, %d, %d, %d) = %v, %v; want an error", c.vol, c.replicas, c.chunk, c.pgs, n, err)
			}
			if !strings.Contains(err.Error(), c.wantInErr) {
				t.Errorf("error %q does not mention %q", err, c.wantInErr)
			}
		})
	}
	if !bytes.Equal(before, clustermap.Encode(m)) {
		t.Fatal("a refused AddVolume changed its input")
	}
}

// TestAddVolumeBounds: the bounds in internal/limits are enforced where
// requests enter the map (the coordinator's RPC, not only the CLI).
func TestAddVolumeBounds(t *testing.T) {
	m := newMap(t, hostBricks(limits.ReplicasMax+2)...)
	if _, err := clustermap.AddVolume(m, "v", limits.ReplicasMax+1, chunk, 4, false); err == nil {
		t.Errorf("BUG: AddVolume accepts %d replicas above limits.ReplicasMax=%d", limits.ReplicasMax+1, limits.ReplicasMax)
	}
	if _, err := clustermap.AddVolume(m, "v", 3, chunk, limits.PGsPerVolumeMax+1, false); err == nil {
		t.Errorf("BUG: AddVolume accepts %d placement groups above limits.PGsPerVolumeMax=%d",
			limits.PGsPerVolumeMax+1, limits.PGsPerVolumeMax)
	}
	full := m.Clone()
	for i := range limits.VolumesMax {
		full.Volumes = append(full.Volumes, clustermap.Volume{ID: uint64(i + 1), Name: fmt.Sprintf("v%d", i),
			Replicas: 1, ChunkBytes: chunk, Gen: 1, PGs: []clustermap.PG{{Bricks: []string{"b0"}}}})
	}
	full.NextVolumeID = limits.VolumesMax + 1
	mustValid(t, full)
	if _, err := clustermap.AddVolume(full, "one-too-many", 1, chunk, 1, false); err == nil {
		t.Errorf("BUG: AddVolume accepts volume %d above limits.VolumesMax=%d", limits.VolumesMax+1, limits.VolumesMax)
	}
}

// TestAddVolumeVolumeIDExhausted: a valid map whose NextVolumeID is the
// largest uint64 makes AddVolume wrap NextVolumeID to 0 and return a map
// that fails Validate. It must refuse instead.
func TestAddVolumeVolumeIDExhausted(t *testing.T) {
	m := newMap(t, hostBricks(3)...)
	m.NextVolumeID = math.MaxUint64
	mustValid(t, m)
	n, err := clustermap.AddVolume(m, "v", 3, chunk, 4, false)
	if err != nil {
		return // refusing is right
	}
	if err := n.Validate(); err != nil {
		t.Fatalf("BUG: AddVolume returned an invalid map (NextVolumeID %d): %v", n.NextVolumeID, err)
	}
}

func TestPGOfChunkSpread(t *testing.T) {
	for _, n := range []int{1, 7, 64, 4096} {
		t.Run(fmt.Sprintf("%d pgs", n), func(t *testing.T) {
			const perPG = 200
			counts := make([]int, n)
			for c := range uint64(n * perPG) {
				pg := clustermap.PGOfChunk(3, c, n)
				if int(pg) >= n {
					t.Fatalf("PGOfChunk(3, %d, %d) = %d out of range", c, n, pg)
				}
				counts[pg]++
			}
			// Chi-square over n-1 degrees of freedom; mean n-1, sd sqrt(2(n-1)).
			var chi float64
			for _, k := range counts {
				d := float64(k - perPG)
				chi += d * d / perPG
			}
			if df := float64(n - 1); chi > df+6*math.Sqrt(2*df)+1 {
				t.Errorf("chunks spread unevenly: chi² %.0f for %d degrees of freedom; min %d max %d",
					chi, n-1, slices.Min(counts), slices.Max(counts))
			}
		})
	}
}

func TestPGOfChunkDependsOnVolume(t *testing.T) {
	same := 0
	for c := range uint64(1000) {
		if clustermap.PGOfChunk(1, c, 64) == clustermap.PGOfChunk(2, c, 64) {
			same++
		}
	}
	if same > 50 { // expect about 1000/64 ≈ 16
		t.Fatalf("volumes 1 and 2 put %d of 1000 chunks in the same PG; hashing ignores the volume?", same)
	}
}

// TestPGOfChunkPinned pins the hash: changing it moves every chunk of every
// existing volume to another PG, so it is part of the format.
func TestPGOfChunkPinned(t *testing.T) {
	got := []uint32{
		clustermap.PGOfChunk(0, 0, 64),
		clustermap.PGOfChunk(1, 0, 64),
		clustermap.PGOfChunk(1, 1, 64),
		clustermap.PGOfChunk(1, 1<<40, 4096),
		clustermap.PGOfChunk(math.MaxUint64, math.MaxUint64, 1000),
	}
	want := pinnedPGs
	if !slices.Equal(got, want) {
		t.Fatalf("PGOfChunk changed: got %v, want %v; existing volumes would lose their data", got, want)
	}
}

func TestPGOf(t *testing.T) {
	m := addVolume(t, newMap(t, hostBricks(3)...), "v", 3, 64, false)
	v := m.Volume("v")
	for _, off := range []uint64{0, 1, chunk - 1, chunk, 5*chunk + 17, math.MaxUint64} {
		c := off / chunk
		if got, want := v.PGOf(off), clustermap.PGOfChunk(v.ID, c, 64); got != want {
			t.Errorf("PGOf(%d) = %d, want PGOfChunk(chunk %d) = %d", off, got, c, want)
		}
		if v.PGOf(off) != v.PGOf(c*chunk) {
			t.Errorf("offset %d and the start of its chunk map to different PGs", off)
		}
	}
}

func TestAccessors(t *testing.T) {
	m := &clustermap.Map{}
	for _, n := range []string{"m", "c", "x", "a", "k"} {
		m.PutBrick(clustermap.Brick{Name: n, State: clustermap.BrickUp})
	}
	m.PutBrick(clustermap.Brick{Name: "c", Addr: "new", State: clustermap.BrickDown})
	var names []string
	for _, b := range m.Bricks {
		names = append(names, b.Name)
	}
	if !slices.Equal(names, []string{"a", "c", "k", "m", "x"}) {
		t.Fatalf("bricks %v, want sorted without duplicates", names)
	}
	if b := m.Brick("c"); b == nil || b.Addr != "new" || b.State != clustermap.BrickDown {
		t.Fatalf("PutBrick did not replace c: %+v", b)
	}
	for _, n := range []string{"", "b", "zz", "0"} {
		if m.Brick(n) != nil {
			t.Errorf("Brick(%q) found something", n)
		}
	}
	m.Brick("k").Draining = true
	if !m.Brick("k").Draining {
		t.Error("Brick does not return a pointer into the map")
	}
	f := fixture(t)
	if f.Volume("root") == nil || f.Volume("nope") != nil || f.VolumeByID(2).Name != "scratch" || f.VolumeByID(9) != nil {
		t.Error("Volume / VolumeByID lookups wrong")
	}
	if f.FenceEpoch("fs-1") != 17 || f.FenceEpoch("never") != 0 {
		t.Error("FenceEpoch wrong")
	}
	p := clustermap.PG{Bricks: []string{"a", "b", "c"}, Syncing: []string{"c"}}
	if p.Primary() != "a" || !slices.Equal(p.InSync(), []string{"a", "b"}) {
		t.Errorf("Primary %q InSync %v", p.Primary(), p.InSync())
	}
	if (clustermap.PG{}).Primary() != "" || (clustermap.PG{}).InSync() != nil {
		t.Error("empty PG")
	}
}

// pinnedPGs are PGOfChunk's answers when placement was first written.
var pinnedPGs = []uint32{50, 16, 60, 2406, 28}
