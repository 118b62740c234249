package clustermap_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/limits"
)

// fixture returns a valid map that uses every field.
func fixture(t testing.TB) *clustermap.Map {
	t.Helper()
	m := &clustermap.Map{
		Epoch:        41,
		Coordinators: []clustermap.Coordinator{{Name: "c1", Addr: "10.0.0.1:7100"}, {Name: "c2", Addr: "10.0.0.2:7100"}},
		Fences:       map[string]uint64{"fs-1": 17, "fs-2": 3},
		NextVolumeID: 3,
	}
	for _, b := range []clustermap.Brick{
		brick("b3", "h3", "r2", "s1"),
		brick("b1", "h1", "r1", "s1"),
		brick("b2", "h2", "r1", "s1"),
		brick("b4", "h4", "r3", "s2"),
	} {
		m.PutBrick(b)
	}
	m.Bricks[1].CapacityBytes = 1 << 40
	m.Bricks[2].Draining = true
	m.Bricks[3].State = clustermap.BrickDown
	m.Volumes = []clustermap.Volume{
		{ID: 1, Name: "root", Replicas: 3, ChunkBytes: limits.ChunkBytesDefault, Gen: 5,
			Snapshots: map[string]uint64{"hourly-1": 3, "hourly-2": 4}, SnapshotsDeleted: 2,
			PGs: []clustermap.PG{
				{Bricks: []string{"b1", "b2", "b3"}},
				{Bricks: []string{"b3", "b1", "b4"}, Syncing: []string{"b4"}},
			}},
		{ID: 2, Name: "scratch", Replicas: 2, ChunkBytes: limits.ChunkBytesMax, AllowSameDomain: true, Gen: 1,
			PGs: []clustermap.PG{{Bricks: []string{"b2", "b1"}}}},
	}
	mustValid(t, m)
	return m
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	maps := map[string]*clustermap.Map{
		"empty":   {},
		"fixture": fixture(t),
	}
	m := addVolume(t, newMap(t, hostBricks(4)...), "v", 3, 16, false)
	maps["placed"] = m
	m = mustReconcile(t, m, alive("b0", "b1", "b2"))
	maps["reconciled"] = m
	for name, m := range maps {
		t.Run(name, func(t *testing.T) {
			b := clustermap.Encode(m)
			got, err := clustermap.Decode(b)
			if err != nil {
				t.Fatalf("Decode(Encode(m)): %v\n%s", err, b)
			}
			if !mapsEqual(m, got) {
				t.Fatalf("round trip changed the map:\nwant %+v\ngot  %+v", m, got)
			}
			if b2 := clustermap.Encode(got); !bytes.Equal(b, b2) {
				t.Fatalf("encoding not stable:\n%s\n%s", b, b2)
			}
			if !bytes.HasPrefix(b, []byte(`{"format":1,"map":`)) {
				t.Fatalf("envelope changed: %.40s", b)
			}
		})
	}
}

// TestEncodeDeterministic: maps with map-typed fields encode identically
// every time (Raft replicas compare encodings).
func TestEncodeDeterministic(t *testing.T) {
	m := fixture(t)
	want := clustermap.Encode(m)
	for range 20 {
		if got := clustermap.Encode(m.Clone()); !bytes.Equal(got, want) {
			t.Fatalf("encoding differs between runs:\n%s\n%s", want, got)
		}
	}
}

func TestDecodeRejectsBytes(t *testing.T) {
	valid := string(clustermap.Encode(fixture(t)))
	cases := map[string]string{
		"empty":          "",
		"null":           "null",
		"garbage":        "\x00\x01\x02plumeria",
		"array":          "[]",
		"string":         `"map"`,
		"empty object":   "{}",
		"format 0":       `{"format":0,"map":{}}`,
		"format 2":       `{"format":2,"map":{}}`,
		"format -1":      `{"format":-1,"map":{}}`,
		"format string":  `{"format":"1","map":{}}`,
		"format float":   `{"format":1.5,"map":{}}`,
		"no map":         `{"format":1}`,
		"null map":       `{"format":1,"map":null}`,
		"map is array":   `{"format":1,"map":[]}`,
		"truncated":      valid[:len(valid)/2],
		"trailing bytes": valid + "x",
		"two documents":  valid + valid,
		"negative epoch": `{"format":1,"map":{"epoch":-1}}`,
		"epoch overflow": `{"format":1,"map":{"epoch":18446744073709551616}}`,
		"chunk overflow": strings.Replace(valid, fmt.Sprintf(`"chunk_bytes":%d`, limits.ChunkBytesDefault), `"chunk_bytes":4294967296`, 1),
		"bad type":       strings.Replace(valid, `"replicas":3`, `"replicas":"3"`, 1),
		"bricks object":  `{"format":1,"map":{"bricks":{}}}`,
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			m, err := clustermap.Decode([]byte(in))
			if err == nil {
				t.Fatalf("Decode(%.80q) = %+v, want an error", in, m)
			}
			if !errors.Is(err, clustermap.ErrBadMap) {
				t.Fatalf("Decode error %v does not wrap ErrBadMap", err)
			}
			if m != nil {
				t.Fatalf("Decode returned a map with error %v", err)
			}
		})
	}
}

func TestDecodeRejectsOversize(t *testing.T) {
	// A syntactically valid map padded with whitespace past the bound.
	b := append(clustermap.Encode(fixture(t)), bytes.Repeat([]byte(" "), 64<<20)...)
	if _, err := clustermap.Decode(b); !errors.Is(err, clustermap.ErrBadMap) {
		t.Fatalf("Decode(%d bytes) = %v, want ErrBadMap", len(b), err)
	}
}

// invalidMaps are changes to fixture that Validate and Decode must refuse.
var invalidMaps = map[string]func(m *clustermap.Map){
	"unsorted bricks": func(m *clustermap.Map) { m.Bricks[0], m.Bricks[1] = m.Bricks[1], m.Bricks[0] },
	"duplicate brick": func(m *clustermap.Map) { m.Bricks[1] = m.Bricks[0] },
	"bad brick name": func(m *clustermap.Map) {
		m.Bricks = append(m.Bricks, clustermap.Brick{Name: "z/z", State: clustermap.BrickUp})
	},
	"empty brick name": func(m *clustermap.Map) {
		m.Bricks = append([]clustermap.Brick{{Name: "", State: clustermap.BrickUp}}, m.Bricks...)
	},
	"unknown brick state":     func(m *clustermap.Map) { m.Bricks[0].State = "sleepy" },
	"empty brick state":       func(m *clustermap.Map) { m.Bricks[0].State = "" },
	"pg with unknown brick":   func(m *clustermap.Map) { m.Volumes[0].PGs[0].Bricks[2] = "b9" },
	"duplicate brick in pg":   func(m *clustermap.Map) { m.Volumes[0].PGs[0].Bricks[2] = "b1" },
	"duplicate primary in pg": func(m *clustermap.Map) { m.Volumes[0].PGs[0].Bricks[1] = "b1" },
	"empty pg":                func(m *clustermap.Map) { m.Volumes[0].PGs[0].Bricks = nil },
	"syncing primary":         func(m *clustermap.Map) { m.Volumes[0].PGs[0].Syncing = []string{"b1"} },
	"all syncing": func(m *clustermap.Map) {
		m.Volumes[0].PGs[0].Syncing = []string{"b1", "b2", "b3"}
	},
	"syncing non-member":    func(m *clustermap.Map) { m.Volumes[0].PGs[0].Syncing = []string{"b4"} },
	"syncing unknown brick": func(m *clustermap.Map) { m.Volumes[0].PGs[0].Syncing = []string{"b9"} },
	"snapshot gen = volume gen": func(m *clustermap.Map) {
		m.Volumes[0].Snapshots["now"] = m.Volumes[0].Gen
	},
	"snapshot gen > volume gen": func(m *clustermap.Map) {
		m.Volumes[0].Snapshots["future"] = m.Volumes[0].Gen + 7
	},
	"snapshot at gen 0 of gen 0": func(m *clustermap.Map) {
		m.Volumes[1].Gen = 0
		m.Volumes[1].Snapshots = map[string]uint64{"s": 0}
	},
	"duplicate volume name": func(m *clustermap.Map) { m.Volumes[1].Name = m.Volumes[0].Name },
	"duplicate volume id":   func(m *clustermap.Map) { m.Volumes[1].ID = m.Volumes[0].ID },
	"duplicate volume": func(m *clustermap.Map) {
		m.Volumes = append(m.Volumes, m.Clone().Volumes[0])
	},
	"volume id 0":               func(m *clustermap.Map) { m.Volumes[0].ID = 0 },
	"volume id = next id":       func(m *clustermap.Map) { m.Volumes[0].ID = m.NextVolumeID },
	"next id 0 with volumes":    func(m *clustermap.Map) { m.NextVolumeID = 0 },
	"bad volume name":           func(m *clustermap.Map) { m.Volumes[0].Name = "-root" },
	"empty volume name":         func(m *clustermap.Map) { m.Volumes[0].Name = "" },
	"chunk 0":                   func(m *clustermap.Map) { m.Volumes[0].ChunkBytes = 0 },
	"chunk not power of two":    func(m *clustermap.Map) { m.Volumes[0].ChunkBytes = 3 * limits.BlockBytes },
	"chunk below block":         func(m *clustermap.Map) { m.Volumes[0].ChunkBytes = limits.BlockBytes / 2 },
	"chunk above max":           func(m *clustermap.Map) { m.Volumes[0].ChunkBytes = limits.ChunkBytesMax * 2 },
	"zero replicas":             func(m *clustermap.Map) { m.Volumes[0].Replicas = 0 },
	"negative replicas":         func(m *clustermap.Map) { m.Volumes[0].Replicas = -3 },
	"no pgs":                    func(m *clustermap.Map) { m.Volumes[0].PGs = nil },
	"empty pg list (non-nil)":   func(m *clustermap.Map) { m.Volumes[0].PGs = []clustermap.PG{} },
	"brick of pg removed":       func(m *clustermap.Map) { m.Bricks = m.Bricks[1:] },
	"syncing listed, no bricks": func(m *clustermap.Map) { m.Volumes[0].PGs[0] = clustermap.PG{Syncing: []string{"b1"}} },
}

func TestDecodeRejectsInvalidMaps(t *testing.T) {
	for name, mutate := range invalidMaps {
		t.Run(name, func(t *testing.T) {
			m := fixture(t)
			mutate(m)
			if err := m.Validate(); err == nil {
				t.Fatalf("Validate accepted %s", clustermap.Encode(m))
			}
			b := clustermap.Encode(m)
			got, err := clustermap.Decode(b)
			if err == nil {
				t.Fatalf("Decode accepted %s", b)
			}
			if !errors.Is(err, clustermap.ErrBadMap) {
				t.Fatalf("Decode error %v does not wrap ErrBadMap", err)
			}
			if got != nil {
				t.Fatalf("Decode returned a map with error %v", err)
			}
		})
	}
}

// TestDecodeRejectsUnboundedOrUnnamed covers fields Validate does not check
// yet: names that ValidName says it governs ("brick, volume, snapshot or
// member"), sets with repeats, and the bounds in internal/limits that a
// decoder of network bytes must enforce (DESIGN §7, STYLE E7).
func TestDecodeRejectsUnboundedOrUnnamed(t *testing.T) {
	cases := map[string]func(m *clustermap.Map){
		"snapshot name empty":      func(m *clustermap.Map) { m.Volumes[0].Snapshots[""] = 1 },
		"snapshot name with slash": func(m *clustermap.Map) { m.Volumes[0].Snapshots["../x"] = 1 },
		"coordinator name invalid": func(m *clustermap.Map) { m.Coordinators[0].Name = "c 1" },
		"duplicate coordinator":    func(m *clustermap.Map) { m.Coordinators[1].Name = m.Coordinators[0].Name },
		"duplicate syncing entry": func(m *clustermap.Map) {
			m.Volumes[0].PGs[1].Syncing = []string{"b4", "b4"}
		},
		"replicas above ReplicasMax": func(m *clustermap.Map) { m.Volumes[0].Replicas = limits.ReplicasMax + 1 },
		"pgs above PGsPerVolumeMax": func(m *clustermap.Map) {
			pgs := make([]clustermap.PG, limits.PGsPerVolumeMax+1)
			for i := range pgs {
				pgs[i] = clustermap.PG{Bricks: []string{"b1"}}
			}
			m.Volumes[1].PGs = pgs
		},
		"snapshots above SnapshotsPerVolumeMax": func(m *clustermap.Map) {
			for i := range limits.SnapshotsPerVolumeMax + 1 {
				m.Volumes[0].Snapshots[fmt.Sprintf("s%d", i)] = 1
			}
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			m := fixture(t)
			mutate(m)
			if _, err := clustermap.Decode(clustermap.Encode(m)); err == nil {
				t.Errorf("BUG: Decode accepts a map with %s", name)
			}
		})
	}
}

// FuzzDecode: Decode never panics; whatever it accepts is valid, re-encodes
// stably and decodes to an equal map; and the pure functions that run on a
// decoded map (Reconcile, MarkSynced) keep it valid.
func FuzzDecode(f *testing.F) {
	fx := fixture(f)
	f.Add(clustermap.Encode(fx))
	f.Add(clustermap.Encode(&clustermap.Map{}))
	placed := addVolume(f, newMap(f, hostBricks(4)...), "v", 3, 8, false)
	f.Add(clustermap.Encode(placed))
	f.Add(clustermap.Encode(mustReconcile(f, placed, alive("b0", "b1", "b3"))))
	for _, mutate := range invalidMaps {
		m := fixture(f)
		mutate(m)
		f.Add(clustermap.Encode(m))
	}
	for _, s := range []string{
		"", "null", "{}", "[]", `{"format":1}`, `{"format":1,"map":null}`, `{"format":1,"map":{}}`,
		`{"format":2,"map":{}}`, `{"format":1,"map":{"bricks":[{"name":"a","state":"up"}]}}`,
		`{"format":1,"map":{"next_volume_id":2,"bricks":[{"name":"a","state":"up"}],` +
			`"volumes":[{"id":1,"name":"v","replicas":1,"chunk_bytes":65536,"gen":1,"pgs":[{"bricks":["a"]}]}]}}`,
		`{"format":1,"map":{"bricks":[{"name":"a","state":"up","domain":{"host":"\ud800"}}],"fences":{"\xff":1}}}`,
		`{"format":1,"map":{"epoch":1,"epoch":2,"Epoch":3}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := clustermap.Decode(b)
		if err != nil {
			if m != nil {
				t.Fatalf("Decode returned a map and error %v", err)
			}
			if !errors.Is(err, clustermap.ErrBadMap) {
				t.Fatalf("Decode error %v does not wrap ErrBadMap", err)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("Decode accepted an invalid map: %v", err)
		}
		b2 := clustermap.Encode(m)
		m2, err := clustermap.Decode(b2)
		if err != nil {
			t.Fatalf("re-encoded map does not decode: %v\n%s", err, b2)
		}
		if !mapsEqual(m, m2) {
			t.Fatalf("round trip changed the map:\n%+v\n%+v", m, m2)
		}
		if b3 := clustermap.Encode(m2); !bytes.Equal(b2, b3) {
			t.Fatalf("encoding not stable:\n%s\n%s", b2, b3)
		}
		if !mapsEqual(m, m.Clone()) {
			t.Fatalf("Clone differs from the map")
		}
		fuzzDerived(t, m)
	})
}

// fuzzDerived runs the map's pure functions on a decoded map and checks
// their outputs are valid and one epoch later.
func fuzzDerived(t *testing.T, m *clustermap.Map) {
	var names []string
	for _, b := range m.Bricks {
		names = append(names, b.Name)
	}
	if m.Epoch == math.MaxUint64 {
		return // epoch overflow is reported separately
	}
	for _, up := range []map[string]bool{alive(upNames(m)...), alive(), alive(names...)} {
		before := clustermap.Encode(m)
		n := clustermap.Reconcile(m, up)
		if !bytes.Equal(before, clustermap.Encode(m)) {
			t.Fatalf("Reconcile changed its input")
		}
		if n == nil {
			continue
		}
		if err := n.Validate(); err != nil {
			t.Fatalf("Reconcile(alive=%v) produced an invalid map: %v\nin:  %s\nout: %s", keys(up), err, before, clustermap.Encode(n))
		}
		if n.Epoch != m.Epoch+1 {
			t.Fatalf("Reconcile: epoch %d → %d", m.Epoch, n.Epoch)
		}
		if again := clustermap.Reconcile(n, up); again != nil {
			t.Fatalf("Reconcile not idempotent:\nonce:  %s\ntwice: %s", clustermap.Encode(n), clustermap.Encode(again))
		}
	}
	for _, v := range m.Volumes {
		for i, p := range v.PGs {
			for _, s := range p.Syncing {
				if m.Epoch >= math.MaxUint64-2 {
					return
				}
				n := clustermap.MarkSynced(m, v.ID, uint32(i), s, p.Primary(), sinceOf(m, v.ID, uint32(i)))
				if n == nil {
					continue
				}
				if err := n.Validate(); err != nil {
					t.Fatalf("MarkSynced produced an invalid map: %v", err)
				}
				if n.Epoch <= m.Epoch {
					t.Fatalf("MarkSynced: epoch %d → %d", m.Epoch, n.Epoch)
				}
			}
		}
	}
}
