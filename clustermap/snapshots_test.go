package clustermap_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/plumeria-fs/plumeria/clustermap"
)

func TestDeleteSnapshot(t *testing.T) {
	m := fixture(t)
	before := clustermap.Encode(m)
	n, err := clustermap.DeleteSnapshot(m, "root", "hourly-1")
	if err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	if !bytes.Equal(before, clustermap.Encode(m)) {
		t.Fatal("DeleteSnapshot changed its argument")
	}
	mustValid(t, n)
	if n.Epoch != m.Epoch+1 {
		t.Errorf("epoch %d → %d, want +1", m.Epoch, n.Epoch)
	}
	v := n.Volume("root")
	if _, ok := v.Snapshots["hourly-1"]; ok || len(v.Snapshots) != 1 || v.Snapshots["hourly-2"] != 4 {
		t.Errorf("snapshots after delete: %v, want only hourly-2", v.Snapshots)
	}
	if want := m.Volume("root").SnapshotsDeleted + 1; v.SnapshotsDeleted != want {
		t.Errorf("SnapshotsDeleted %d, want %d", v.SnapshotsDeleted, want)
	}
	if v.Gen != m.Volume("root").Gen {
		t.Errorf("gen changed: %d → %d (writes must keep their generation)", m.Volume("root").Gen, v.Gen)
	}
	// Everything but the volume's snapshots and the epoch is as before.
	back := n.Clone()
	back.Epoch = m.Epoch
	back.Volume("root").Snapshots["hourly-1"] = 3
	back.Volume("root").SnapshotsDeleted--
	if !mapsEqual(back, m) {
		t.Errorf("DeleteSnapshot changed more than the snapshot:\nbefore %s\nafter  %s", before, clustermap.Encode(n))
	}
	// The map travels: the count survives the codec.
	got, err := clustermap.Decode(clustermap.Encode(n))
	if err != nil || got.Volume("root").SnapshotsDeleted != v.SnapshotsDeleted {
		t.Fatalf("Decode after delete: %v, SnapshotsDeleted %d", err, got.Volume("root").SnapshotsDeleted)
	}

	// The last one: the volume encodes as one that never had snapshots.
	n2, err := clustermap.DeleteSnapshot(n, "root", "hourly-2")
	if err != nil {
		t.Fatalf("DeleteSnapshot of the last: %v", err)
	}
	if v := n2.Volume("root"); v.Snapshots != nil || v.SnapshotsDeleted != m.Volume("root").SnapshotsDeleted+2 {
		t.Errorf("after deleting both: snapshots %v, deleted %d", v.Snapshots, v.SnapshotsDeleted)
	}
	mustValid(t, n2)
}

func TestDeleteSnapshotNotFound(t *testing.T) {
	m := fixture(t)
	for _, tc := range []struct {
		vol, snap string
		want      error
		names     string
	}{
		{"nope", "hourly-1", clustermap.ErrNoVolume, `"nope"`},
		{"root", "daily", clustermap.ErrNoSnapshot, `"daily"`},
		{"scratch", "hourly-1", clustermap.ErrNoSnapshot, "scratch"}, // another volume's name
	} {
		n, err := clustermap.DeleteSnapshot(m, tc.vol, tc.snap)
		if n != nil || !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("DeleteSnapshot(%s, %s) = %v, %v; want %v naming %s", tc.vol, tc.snap, n != nil, err, tc.want, tc.names)
		}
	}
}

func TestSnapshotGens(t *testing.T) {
	v := &clustermap.Volume{Snapshots: map[string]uint64{"a": 7, "b": 3, "c": 7, "d": 1}}
	if got := v.SnapshotGens(); !slices.Equal(got, []uint64{1, 3, 7}) {
		t.Errorf("SnapshotGens = %v, want [1 3 7]", got)
	}
	if got := (&clustermap.Volume{}).SnapshotGens(); len(got) != 0 {
		t.Errorf("SnapshotGens of none = %v", got)
	}
}
