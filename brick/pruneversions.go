package brick

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/brick/store"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// Retention of file versions. A file system that keeps file versions
// decides, per file, which of its closed versions to keep and asks the
// primaries of the PGs holding the file's extent to drop the entries of
// the others (PruneVersions). The primary does it as it prunes after a
// snapshot's deletion (prune.go): holding the range's blocks as a
// decommit of the range does, it decides per block which entries no
// retained reader reads (store.RetainedSurvivors) and replicates their
// removal to the PG's members as a change with seqs of its own, in
// ascending (block, gen) order, in batches. A member that misses a batch
// is resynced like one that missed a write; a request that fails part
// way is simply sent again (what was removed is gone, the rest is decided
// the same).

var (
	versionPrunedVersions = promauto.NewCounter(prometheus.CounterOpts{Name: "plumeria_brick_version_pruned_blocks_total",
		Help: "Block versions removed from PGs this brick leads (on every replica) because their file versions are no longer retained (Brick.PruneVersions) and no snapshot and not the live volume reads them."})
	versionPrunedBytes = promauto.NewCounter(prometheus.CounterOpts{Name: "plumeria_brick_version_pruned_bytes_total",
		Help: "Bytes of the records of block versions removed by PruneVersions at this brick (each replica frees as many), left for the cleaner to reclaim."})
)

// PruneVersions removes, from the blocks of this PG's chunks that hold
// bytes of [offset, offset+length), the entries of file versions below
// r.Below that neither the live volume, nor a snapshot, nor a file
// version in r.Keep (read at the live volume), nor any file version at or
// above r.Below reads (store.RetainedSurvivors). Refusals
// (InvalidArgument): a volume without file versions, below 0, a kept
// version 0 or not below below, more than clustermap.PruneKeepMax kept
// versions, no writer, a range past 2^64.
func (s *Server) PruneVersions(ctx context.Context, r *pb.PruneVersionsRequest) (*pb.PruneVersionsResponse, error) {
	defer s.inflight.enter(kindWrite)()
	start := time.Now()
	m, done, err := s.begin(ctx, r.MapEpoch, r.Vol, r.Pg)
	if err != nil {
		return nil, err
	}
	defer done()
	v, p, err := pgOf(m, r.Vol, r.Pg, 0, 0)
	if err != nil {
		return nil, err
	}
	if err := checkPruneVersions(v, r); err != nil {
		return nil, err
	}
	if r.Length == 0 {
		return &pb.PruneVersionsResponse{}, nil
	}
	// The blocks the range touches; an end of 0 is 2^64.
	lo, hi := r.Offset/limits.BlockBytes, ^uint64(0)
	if end := r.Offset + r.Length; end != 0 {
		hi = (end-1)/limits.BlockBytes + 1
	}
	unlock, err := s.admit(ctx, m, v, r.Pg, p, r.MapEpoch, r.Writer, []span{{lo, hi}})
	if err != nil {
		return nil, err
	}
	defer unlock()
	per := uint64(v.ChunkBytes) / limits.BlockBytes
	ours := func(b uint64) bool { return clustermap.PGOfChunk(v.ID, b/per, len(v.PGs)) == r.Pg }
	// The index is scanned over the range, so a file's sparse extent
	// costs the entries it holds, not its length.
	st, err := s.store.PruneRetained(ctx, v.ID, lo, hi, ours, v.SnapshotReadGens(), v.LiveReadGen(), r.Keep, r.Below,
		func(ctx context.Context, ops []store.Op) error {
			for i := range ops {
				seq, err := s.nextSeq(m.Epoch)
				if err != nil {
					return err
				}
				ops[i].Seq = seq
			}
			// Freeing space may use the metadata reserve, as a decommit.
			return s.replicate(ctx, m, v, r.Pg, p, r.Writer, ops, true)
		})
	versionPrunedVersions.Add(float64(st.Versions))
	versionPrunedBytes.Add(float64(st.Bytes))
	s.log.DebugContext(ctx, "pruned file versions no longer retained", "volume", v.Name, "pg", r.Pg, "offset", r.Offset,
		"length", r.Length, "keep", len(r.Keep), "below", r.Below, "blocks", st.Blocks, "versions", st.Versions,
		"bytes", st.Bytes, "took", time.Since(start).Round(time.Millisecond), "err", err)
	if err != nil {
		return nil, storeErr(err, "prune versions")
	}
	return &pb.PruneVersionsResponse{Blocks: st.Blocks, Versions: st.Versions, Bytes: st.Bytes}, nil
}

// checkPruneVersions refuses a PruneVersions request that is malformed or
// names a volume without file versions.
func checkPruneVersions(v *clustermap.Volume, r *pb.PruneVersionsRequest) error {
	switch {
	case !v.FileVersions:
		return status.Errorf(codes.InvalidArgument, "volume %s does not keep file versions", v.Name)
	case r.Below == 0:
		return status.Errorf(codes.InvalidArgument, "prune versions of volume %s below file version 0", v.Name)
	case len(r.Keep) > clustermap.PruneKeepMax:
		return status.Errorf(codes.InvalidArgument, "prune versions of volume %s keeping %d file versions: at most %d", v.Name, len(r.Keep), clustermap.PruneKeepMax)
	case r.Writer == nil:
		return status.Error(codes.InvalidArgument, "prune versions without a writer id")
	case r.Offset+r.Length < r.Offset && r.Offset+r.Length != 0:
		return status.Errorf(codes.InvalidArgument, "prune versions at %d length %d passes 2^64", r.Offset, r.Length)
	}
	for _, k := range r.Keep {
		if k == 0 || k >= r.Below {
			return status.Errorf(codes.InvalidArgument, "prune versions of volume %s below file version %d keeping file version %d: kept ones must be in [1, %d)", v.Name, r.Below, k, r.Below)
		}
	}
	return nil
}
