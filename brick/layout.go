package brick

import (
	"context"
	"errors"
	"maps"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/brick/ec"
	"github.com/plumeria-fs/plumeria/brick/store"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// Layout counts, at the primary of a PG, the live blocks of a byte range
// by where their data is: profile 0 for home blocks (puts), else the
// profile of the stripe group a ref names. Tombstones and absent blocks
// are not counted. It walks the index (no data is read) and takes no
// block lock: a count, not a serialized read.
func (s *Server) Layout(ctx context.Context, r *pb.LayoutRequest) (*pb.LayoutResponse, error) {
	if r.Length == 0 {
		return &pb.LayoutResponse{}, nil
	}
	m, done, err := s.begin(ctx, r.MapEpoch, r.Vol, r.Pg)
	if err != nil {
		return nil, err
	}
	defer done()
	v, p, err := pgOf(m, r.Vol, r.Pg, 0, 0)
	if err != nil {
		return nil, err
	}
	if p.Primary() != s.cfg.Name {
		return nil, status.Errorf(codes.FailedPrecondition, "stale map epoch %d: brick %s does not lead volume %s pg %d at epoch %d", r.MapEpoch, s.cfg.Name, v.Name, r.Pg, m.Epoch)
	}
	lo := r.Offset / limits.BlockBytes
	last := r.Offset + (r.Length - 1) // may not wrap: Length ≤ 2^64 - Offset
	if last < r.Offset {
		return nil, status.Errorf(codes.InvalidArgument, "layout of [%d, +%d): past the end of the volume", r.Offset, r.Length)
	}
	hi := last/limits.BlockBytes + 1 // at most 2^52: no wrap
	counts, err := s.layoutCounts(v, r.Pg, lo, hi)
	if err != nil {
		return nil, err
	}
	resp := &pb.LayoutResponse{}
	for _, id := range slices.Sorted(maps.Keys(counts)) {
		resp.Profiles = append(resp.Profiles, &pb.ProfileBlocks{Profile: uint32(id), Blocks: counts[id]})
	}
	return resp, nil
}

// layoutCounts walks the index of [lo, hi) and counts the live entry of
// each block of PG pg by profile.
func (s *Server) layoutCounts(v *clustermap.Volume, pg uint32, lo, hi uint64) (map[uint16]int64, error) {
	live := v.LiveReadGen()
	per := uint64(v.ChunkBytes) / limits.BlockBytes
	counts := map[uint16]int64{}
	var cur store.Entry
	have := false
	var refErr error
	flush := func() {
		if have && refErr == nil {
			refErr = s.countEntry(v, cur, counts)
		}
	}
	err := s.store.Scan(v.ID, lo, hi, func(e store.Entry) bool {
		if have && e.Block != cur.Block {
			flush()
			have = false
		}
		if e.Gen <= live && clustermap.PGOfChunk(v.ID, e.Block/per, len(v.PGs)) == pg {
			cur, have = e, true
		}
		return refErr == nil
	})
	flush()
	if err == nil {
		err = refErr
	}
	if err != nil {
		return nil, storeErr(err, "layout")
	}
	return counts, nil
}

// countEntry adds block version e, as a scan found it, to counts by
// profile. No block lock is held: since the scan, a relayout may have
// swapped a ref for a put of its data (decodeChunk) or the collector
// removed the version, so a ref counts as what its key holds now.
func (s *Server) countEntry(v *clustermap.Volume, e store.Entry, counts map[uint16]int64) error {
	if e.Tombstone {
		return nil
	}
	if !e.Ref {
		counts[0]++
		return nil
	}
	data, now, err := s.store.Get(e.Key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return err
	case now.Tombstone:
		return nil
	case !now.Ref:
		counts[0]++
		return nil
	}
	ref, err := ec.DecodeRef(data)
	if err != nil || int(ref.SG) >= len(v.SGs) {
		return status.Errorf(codes.DataLoss, "block %d of volume %s: bad ref (%d bytes: %x)", e.Block, v.Name, len(data), data[:min(len(data), ec.RefBytes)])
	}
	counts[v.SGs[ref.SG].Profile]++
	return nil
}
