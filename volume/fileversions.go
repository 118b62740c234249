package volume

import (
	"context"
	"errors"
	"fmt"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// BlockVersion is one entry a brick holds for a block: the generation of
// the volume it was written in (snapshots taken since see it; the live
// volume writes the newest), its file version (clustermap.Unversioned for
// a write without one, and for every write of a volume without file
// versions), and whether it is a decommit's tombstone (reads as zeros) or
// a ref (erasure-coded: reads as the data of its stripe, like a put).
type BlockVersion struct {
	Gen         uint64
	FileVersion uint32
	Tombstone   bool
	Ref         bool
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
			out[i] = BlockVersion{Gen: e.SnapGen, FileVersion: e.FileVersion, Tombstone: e.Tombstone, Ref: e.Ref}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PruneStats counts what PruneVersions removed, summed over the PGs it
// asked (each replica of a PG removes the same entries).
type PruneStats struct {
	Blocks   int64 // blocks that lost at least one entry
	Versions int64 // entries removed
	Bytes    int64 // bytes of their records at the primaries, left for the bricks' cleaners
}

// PruneVersions drops the file versions below below that the file system
// no longer retains from the blocks holding bytes of [off, off+n) (n > 0;
// off+n == 0 means up to 2^64; a file's extent): afterwards the live
// volume, every snapshot, the file versions in keep (each in [1, below),
// at most clustermap.PruneKeepMax of them) and every file version at or
// above below read exactly what they read before, and the entries only
// other versions below below read are gone (ReadAtVersion of one of those
// then reads what some retained reader does, or zeros). It asks every PG
// holding a chunk of the range (all of them for a range of many chunks),
// in parallel, retrying through map changes as DecommitVersion does;
// asking again is harmless (it removes what is left to remove). The stats
// count what the answered requests removed: a request that failed after
// removing some and was sent again counts only the second time's.
// Errors: ErrNoFileVersions, ErrRange, ErrNoVolume, ErrFenced, and an
// error for bad arguments.
func (v *Volume) PruneVersions(ctx context.Context, off, n uint64, keep []uint32, below uint32) (PruneStats, error) {
	if n == 0 {
		return PruneStats{}, nil
	}
	if off+n < off && off+n != 0 {
		return PruneStats{}, fmt.Errorf("%w: prune versions at %d length %d", ErrRange, off, n)
	}
	if !v.FileVersions() {
		return PruneStats{}, fmt.Errorf("volume %s: prune versions: %w", v.name, ErrNoFileVersions)
	}
	if err := checkPruneKeep(keep, below); err != nil {
		return PruneStats{}, fmt.Errorf("volume %s: prune versions: %w", v.name, err)
	}
	vol := v.Map().Volume(v.name)
	if vol == nil {
		return PruneStats{}, fmt.Errorf("volume %s: %w", v.name, ErrNoVolume)
	}
	pgs := decommitPGs(vol, off, n)
	type result struct {
		st  PruneStats
		err error
	}
	results := make(chan result, len(pgs))
	for _, pg := range pgs {
		go func() {
			var res result
			res.err = v.retry(ctx, func(ctx context.Context, m *clustermap.Map, vol *clustermap.Volume) error {
				cl, err := v.brick(m, vol.PGs[pg].Primary())
				if err != nil {
					return err
				}
				r, err := cl.PruneVersions(ctx, &pb.PruneVersionsRequest{MapEpoch: m.Epoch, Vol: vol.ID, Pg: uint32(pg),
					Offset: off, Length: n, Keep: keep, Below: below, Writer: v.writer})
				if err != nil {
					return err
				}
				res.st = PruneStats{Blocks: r.Blocks, Versions: r.Versions, Bytes: r.Bytes}
				return nil
			})
			results <- res
		}()
	}
	var st PruneStats
	var first error
	for range pgs {
		res := <-results
		st.Blocks += res.st.Blocks
		st.Versions += res.st.Versions
		st.Bytes += res.st.Bytes
		if res.err != nil && first == nil {
			first = res.err
		}
	}
	return st, first
}

// checkPruneKeep refuses a bound of 0, a kept version 0 or not below the
// bound, and more than clustermap.PruneKeepMax kept versions.
func checkPruneKeep(keep []uint32, below uint32) error {
	if below == 0 {
		return errors.New("below file version 0")
	}
	if len(keep) > clustermap.PruneKeepMax {
		return fmt.Errorf("keeping %d file versions: at most %d", len(keep), clustermap.PruneKeepMax)
	}
	for _, k := range keep {
		if k == 0 || k >= below {
			return fmt.Errorf("keeping file version %d below %d: kept ones must be in [1, %d)", k, below, below)
		}
	}
	return nil
}
