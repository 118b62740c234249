package clustermap_test

import (
	"bytes"
	"slices"
	"testing"

	"github.com/plumeria-fs/plumeria/clustermap"
)

// TestStoreGens: a volume without file versions computes the gens of
// before (StoreGen = Gen, readers at Gen or at the snapshot's gen); one
// with them puts Gen in the high half and the file version (Unversioned
// for none, and for every reader) in the low half.
func TestStoreGens(t *testing.T) {
	v := clustermap.Volume{Gen: 5, Snapshots: map[string]uint64{"a": 2, "b": 4, "c": 2}}
	for _, f := range []uint32{0, 1, 7, clustermap.FileVersionMax} {
		if got := v.StoreGen(f); got != 5 {
			t.Errorf("StoreGen(%d) without file versions = %d, want 5", f, got)
		}
	}
	if got := v.LiveReadGen(); got != 5 {
		t.Errorf("LiveReadGen without file versions = %d, want 5", got)
	}
	if g, ok := v.SnapshotReadGen("b"); !ok || g != 4 {
		t.Errorf("SnapshotReadGen(b) without file versions = %d, %v", g, ok)
	}
	if got := v.SnapshotReadGens(); !slices.Equal(got, []uint64{2, 4}) {
		t.Errorf("SnapshotReadGens without file versions = %v", got)
	}
	if g, f := v.SplitStoreGen(5); g != 5 || f != clustermap.Unversioned {
		t.Errorf("SplitStoreGen(5) without file versions = %d, %d", g, f)
	}

	v.FileVersions = true
	for f, want := range map[uint32]uint64{0: 5<<32 | 0xFFFFFFFF, 1: 5<<32 | 1, clustermap.FileVersionMax: 5<<32 | 0xFFFFFFFE} {
		if got := v.StoreGen(f); got != want {
			t.Errorf("StoreGen(%d) = %#x, want %#x", f, got, want)
		}
	}
	if got := v.LiveReadGen(); got != 5<<32|0xFFFFFFFF {
		t.Errorf("LiveReadGen = %#x", got)
	}
	if g, ok := v.SnapshotReadGen("b"); !ok || g != 4<<32|0xFFFFFFFF {
		t.Errorf("SnapshotReadGen(b) = %#x, %v", g, ok)
	}
	if _, ok := v.SnapshotReadGen("nope"); ok {
		t.Error("SnapshotReadGen of a missing snapshot found one")
	}
	if got := v.SnapshotReadGens(); !slices.Equal(got, []uint64{2<<32 | 0xFFFFFFFF, 4<<32 | 0xFFFFFFFF}) {
		t.Errorf("SnapshotReadGens = %#x", got)
	}
	if g, f := v.SplitStoreGen(v.StoreGen(9)); g != 5 || f != 9 {
		t.Errorf("SplitStoreGen(StoreGen(9)) = %d, %d", g, f)
	}
	// Every write of a generation is newer than every write of the one
	// before, and an unversioned one newer than every versioned one in it.
	old := v
	old.Gen = 4
	if !(old.StoreGen(0) < v.StoreGen(1) && v.StoreGen(clustermap.FileVersionMax) < v.StoreGen(0) && v.StoreGen(0) == v.LiveReadGen()) {
		t.Error("store gens out of order")
	}
}

// TestFileVersionsField: the field survives encoding, is left out when
// false (a map without it encodes as before), and a volume with it may
// not pass FileVersionGenMax.
func TestFileVersionsField(t *testing.T) {
	m := addVolume(t, newMap(t, hostBricks(3)...), "v", 3, 4, false)
	plain := clustermap.Encode(m)
	if bytes.Contains(plain, []byte("file_versions")) {
		t.Fatalf("a volume without file versions encodes the field: %s", plain)
	}
	m.Volume("v").FileVersions = true
	d, err := clustermap.Decode(clustermap.Encode(m))
	if err != nil {
		t.Fatal(err)
	}
	if !d.Volume("v").FileVersions || !d.Clone().Volume("v").FileVersions {
		t.Fatal("file_versions lost in a round trip or a clone")
	}
	m.Volume("v").Gen = clustermap.FileVersionGenMax
	if err := m.Validate(); err != nil {
		t.Fatalf("gen %d: %v", m.Volume("v").Gen, err)
	}
	m.Volume("v").Gen++
	if err := m.Validate(); err == nil {
		t.Fatalf("gen %d with file versions validated", m.Volume("v").Gen)
	}
	m.Volume("v").FileVersions = false
	if err := m.Validate(); err != nil {
		t.Fatalf("gen %d without file versions: %v", m.Volume("v").Gen, err)
	}
}
