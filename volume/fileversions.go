package volume

import (
	"context"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// BlockVersion is one entry a brick holds for a block: the generation of
// the volume it was written in (snapshots taken since see it; the live
// volume writes the newest), its file version (clustermap.Unversioned for
// a write without one, and for every write of a volume without file
// versions), and whether it is a decommit's tombstone (reads as zeros).
type BlockVersion struct {
	Gen         uint64
	FileVersion uint32
	Tombstone   bool
}

// BlockVersions lists the entries the primary of the block holding byte
// off keeps for that block, oldest first, up to the live volume's. The
// file system lists a file's versions from the entries of a block it
// writes at each of them (its history block). Older entries that no
// snapshot and no file version reads may be gone (pruned).
func (v *Volume) BlockVersions(ctx context.Context, off uint64) ([]BlockVersion, error) {
	var out []BlockVersion
	err := v.retry(ctx, func(ctx context.Context, m *clustermap.Map, vol *clustermap.Volume) error {
		pg := vol.PGOf(off)
		cl, err := v.brick(m, vol.PGs[pg].Primary())
		if err != nil {
			return err
		}
		r, err := cl.BlockVersions(ctx, &pb.BlockVersionsRequest{MapEpoch: m.Epoch, Vol: vol.ID, Pg: pg, Offset: off})
		if err != nil {
			return err
		}
		out = make([]BlockVersion, len(r.Versions))
		for i, e := range r.Versions {
			out[i] = BlockVersion{Gen: e.SnapGen, FileVersion: e.FileVersion, Tombstone: e.Tombstone}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
