package clustermap

import (
	"errors"
	"fmt"
	"slices"
)

// Errors of the snapshot changes, returned wrapped; test with errors.Is.
var (
	ErrNoVolume   = errors.New("clustermap: no such volume")
	ErrNoSnapshot = errors.New("clustermap: no such snapshot")
)

// DeleteSnapshot returns a new map, at the next epoch, in which volume has
// no snapshot name (m is not changed), and counts the deletion in
// Volume.SnapshotsDeleted: that count tells each PG's primary that block
// versions only the deleted snapshot saw can now be pruned. Reads of the
// name fail from then on. Errors: ErrNoVolume, ErrNoSnapshot (wrapped,
// naming what was not found).
func DeleteSnapshot(m *Map, volume, name string) (*Map, error) {
	v := m.Volume(volume)
	if v == nil {
		return nil, fmt.Errorf("delete snapshot %q: %w %q", name, ErrNoVolume, volume)
	}
	if _, ok := v.Snapshots[name]; !ok {
		return nil, fmt.Errorf("delete snapshot of volume %s: %w %q", volume, ErrNoSnapshot, name)
	}
	n := m.Clone()
	n.Epoch = m.Epoch + 1
	nv := n.Volume(volume)
	delete(nv.Snapshots, name)
	delete(nv.SnapshotTimes, name)
	if len(nv.Snapshots) == 0 {
		nv.Snapshots = nil // as a volume that never had one encodes
	}
	if len(nv.SnapshotTimes) == 0 {
		nv.SnapshotTimes = nil
	}
	nv.SnapshotsDeleted++
	return n, nil
}

// SnapshotGens returns the generations v's snapshots see, ascending, each
// once (two snapshots may share one: nothing was written between them).
func (v *Volume) SnapshotGens() []uint64 {
	gens := make([]uint64, 0, len(v.Snapshots))
	for _, g := range v.Snapshots {
		gens = append(gens, g)
	}
	slices.Sort(gens)
	return slices.Compact(gens)
}
