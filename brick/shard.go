package brick

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/brick/ec"
	"github.com/plumeria-fs/plumeria/brick/store"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// Shards of stripes (docs/plan-j.md, "Erasure coding"). A stripe is one
// chunk of a volume coded under a profile (K data + M parity shards) and
// stored on a stripe group (SG) of K+M bricks: the brick at position i of
// the SG holds shard i. A shard's blocks live in the store under
//
//	Key{Vol: shardVol(vol, sg), Block: chunk·S + o, Gen: stripeSeq}
//
// with S the profile's shard blocks (ec.Geometry.ShardBlocks) and o the
// block's offset in the shard. The store checksums every block (crc32c),
// which the Reed-Solomon library does not: a corrupt block is reported as
// such and reconstructed by the reader. Stripes are immutable: written
// once by ShardPut before any ref names them, deleted whole by ShardDelete.

// shardVolBit marks store volume ids that hold shards, not home blocks.
const shardVolBit = 1 << 63

// shardVol is the store volume id of stripe group sg of vol (vol <
// clustermap.ShardVolMax, checked by the map's Validate).
func shardVol(vol uint64, sg uint16) uint64 { return shardVolBit | uint64(sg)<<40 | vol }

// shardTarget is what a shard request names, checked against the map.
type shardTarget struct {
	vol   *clustermap.Volume
	sg    *clustermap.StripeGroup
	geo   ec.Geometry
	key   uint64 // store volume id: shardVol
	shard int    // this brick's position in the SG; -1 for requests about the whole SG
}

// shardPlace checks that vol's stripe group sg exists in m and lists this
// brick at position shard (any position when shard < 0), and returns the
// stripe geometry of its profile.
func (s *Server) shardPlace(m *clustermap.Map, vol uint64, sg uint32, shard int) (shardTarget, error) {
	v := m.VolumeByID(vol)
	if v == nil {
		return shardTarget{}, status.Errorf(codes.NotFound, "volume %d not in map epoch %d", vol, m.Epoch)
	}
	if sg >= uint32(len(v.SGs)) {
		return shardTarget{}, status.Errorf(codes.NotFound, "volume %s has no stripe group %d at map epoch %d", v.Name, sg, m.Epoch)
	}
	g := &v.SGs[sg]
	p := v.Profile(g.Profile)
	if p == nil {
		return shardTarget{}, status.Errorf(codes.Internal, "volume %s stripe group %d: profile %d missing from the map", v.Name, sg, g.Profile)
	}
	pos := -1
	for i, b := range g.Bricks {
		if b == s.cfg.Name && (shard < 0 || i == shard) {
			pos = i
		}
	}
	if pos < 0 {
		return shardTarget{}, status.Errorf(codes.FailedPrecondition, "brick %s is not member %d of volume %s stripe group %d at map epoch %d (%v)",
			s.cfg.Name, shard, v.Name, sg, m.Epoch, g.Bricks)
	}
	geo, err := ec.NewGeometry(ec.Profile{K: p.K, M: p.M}, int(v.ChunkBytes))
	if err != nil {
		return shardTarget{}, status.Errorf(codes.Internal, "volume %s stripe group %d: %v", v.Name, sg, err)
	}
	return shardTarget{vol: v, sg: g, geo: geo, key: shardVol(v.ID, uint16(sg)), shard: pos}, nil
}

// blockKey is the store key of block o of the stripe's shard.
func (t shardTarget) blockKey(chunk, stripeSeq uint64, o int) store.Key {
	return store.Key{Vol: t.key, Block: chunk*uint64(t.geo.ShardBlocks()) + uint64(o), Gen: stripeSeq}
}

// checkRange refuses a chunk past the volume's end or blocks outside a shard.
func (t shardTarget) checkRange(chunk uint64, first, blocks uint64) error {
	if chunk > (1<<64-1)/uint64(t.vol.ChunkBytes) || first > uint64(t.geo.ShardBlocks()) || blocks > uint64(t.geo.ShardBlocks())-first {
		return status.Errorf(codes.InvalidArgument, "chunk %d blocks [%d, +%d): outside a shard of %d blocks", chunk, first, blocks, t.geo.ShardBlocks())
	}
	return nil
}

// ShardPut stores whole blocks of this brick's shard of a stripe,
// durably, before it returns. The request's map epoch must be at or above
// the SG's Since: a writer that placed the stripe under an older
// membership must not land on a member that joined since (whose rebuild
// would not know of the stripe).
func (s *Server) ShardPut(ctx context.Context, r *pb.ShardPutRequest) (*pb.ShardPutResponse, error) {
	m, err := s.beginPeer(ctx, r.MapEpoch)
	if err != nil {
		return nil, err
	}
	t, err := s.shardPlace(m, r.Vol, r.Sg, int(r.Shard))
	if err != nil {
		return nil, err
	}
	if r.MapEpoch < t.sg.Since {
		return nil, status.Errorf(codes.FailedPrecondition, "stale map epoch %d: volume %s stripe group %d changed at epoch %d", r.MapEpoch, t.vol.Name, r.Sg, t.sg.Since)
	}
	if len(r.Data) == 0 || len(r.Data)%limits.BlockBytes != 0 {
		return nil, status.Errorf(codes.InvalidArgument, "shard data of %d bytes: want whole blocks of %d", len(r.Data), limits.BlockBytes)
	}
	n := uint64(len(r.Data) / limits.BlockBytes)
	if err := t.checkRange(r.Chunk, uint64(r.First), n); err != nil {
		return nil, err
	}
	ops := make([]store.Op, n)
	for i := range ops {
		ops[i] = store.Op{Kind: store.OpPut, Key: t.blockKey(r.Chunk, r.StripeSeq, int(r.First)+i), Seq: r.StripeSeq,
			Data: r.Data[i*limits.BlockBytes : (i+1)*limits.BlockBytes]}
	}
	if err := s.store.Apply(ctx, ops); err != nil {
		return nil, storeErr(err, "shard put")
	}
	return &pb.ShardPutResponse{}, nil
}

// ShardRead returns blocks of this brick's shard of a stripe. A block the
// store lacks or finds corrupt reads as zeros and is listed, so the reader
// reconstructs exactly those from the other shards.
func (s *Server) ShardRead(ctx context.Context, r *pb.ShardReadRequest) (*pb.ShardReadResponse, error) {
	m, err := s.beginPeer(ctx, r.MapEpoch)
	if err != nil {
		return nil, err
	}
	t, err := s.shardPlace(m, r.Vol, r.Sg, int(r.Shard))
	if err != nil {
		return nil, err
	}
	if r.Blocks == 0 {
		return nil, status.Error(codes.InvalidArgument, "shard read of 0 blocks")
	}
	if err := t.checkRange(r.Chunk, uint64(r.First), uint64(r.Blocks)); err != nil {
		return nil, err
	}
	resp := &pb.ShardReadResponse{Data: make([]byte, int(r.Blocks)*limits.BlockBytes)}
	for i := range int(r.Blocks) {
		data, _, err := s.store.Get(t.blockKey(r.Chunk, r.StripeSeq, int(r.First)+i))
		switch {
		case errors.Is(err, store.ErrNotFound):
			resp.Missing = append(resp.Missing, uint32(i))
		case errors.Is(err, store.ErrCorrupt):
			resp.Corrupt = append(resp.Corrupt, uint32(i))
		case err != nil:
			return nil, storeErr(err, "shard read")
		case len(data) != limits.BlockBytes:
			// A tombstone or ref never sits under a shard key: say so.
			resp.Corrupt = append(resp.Corrupt, uint32(i))
		default:
			copy(resp.Data[i*limits.BlockBytes:], data)
		}
	}
	return resp, nil
}

// ShardDelete removes this brick's shard of a stripe (every block of it
// the store holds). Deleting a stripe that is not there is not an error.
func (s *Server) ShardDelete(ctx context.Context, r *pb.ShardDeleteRequest) (*pb.ShardDeleteResponse, error) {
	m, err := s.beginPeer(ctx, r.MapEpoch)
	if err != nil {
		return nil, err
	}
	t, err := s.shardPlace(m, r.Vol, r.Sg, -1)
	if err != nil {
		return nil, err
	}
	if err := t.checkRange(r.Chunk, 0, 0); err != nil {
		return nil, err
	}
	if err := s.deleteStripe(ctx, t.key, t.geo.ShardBlocks(), r.Chunk, r.StripeSeq); err != nil {
		return nil, storeErr(err, "shard delete")
	}
	return &pb.ShardDeleteResponse{}, nil
}

// deleteStripe removes the blocks of one stripe's shard under store
// volume key: those present among the per blocks of chunk at gen seq.
func (s *Server) deleteStripe(ctx context.Context, key uint64, per int, chunk, seq uint64) error {
	keys := make([]store.Key, per)
	for o := range keys {
		keys[o] = store.Key{Vol: key, Block: chunk*uint64(per) + uint64(o), Gen: seq}
	}
	metas, err := s.store.Metas(keys)
	if err != nil {
		return err
	}
	var ops []store.Op
	for i, k := range keys {
		if metas[i].Present {
			ops = append(ops, store.Op{Kind: store.OpRemove, Key: k, Seq: seq})
		}
	}
	if len(ops) == 0 {
		return nil
	}
	return s.store.ApplyReserved(ctx, ops) // freeing space must work on a full brick
}

// ShardInventory streams the stripes this brick holds for a stripe group
// it belongs to: per (chunk, stripe seq), how many blocks of its shard.
func (s *Server) ShardInventory(r *pb.ShardInventoryRequest, stream pb.Brick_ShardInventoryServer) error {
	m, err := s.beginPeer(stream.Context(), r.MapEpoch)
	if err != nil {
		return err
	}
	t, err := s.shardPlace(m, r.Vol, r.Sg, -1)
	if err != nil {
		return err
	}
	const batch = 1024
	per := uint64(t.geo.ShardBlocks())
	var out []*pb.StripeBlocks
	index := map[[2]uint64]*pb.StripeBlocks{}
	var sendErr error
	flush := func() {
		if len(out) > 0 && sendErr == nil {
			sendErr = stream.Send(&pb.ShardInventoryResponse{Stripes: out})
		}
		out, index = nil, map[[2]uint64]*pb.StripeBlocks{}
	}
	err = s.store.Scan(t.key, 0, 1<<64-1, func(e store.Entry) bool {
		k := [2]uint64{e.Block / per, e.Gen}
		sb := index[k]
		if sb == nil {
			if len(out) >= batch {
				flush()
			}
			sb = &pb.StripeBlocks{Chunk: k[0], StripeSeq: k[1]}
			index[k] = sb
			out = append(out, sb)
		}
		sb.Blocks++
		return sendErr == nil
	})
	flush()
	if err != nil {
		return storeErr(err, "shard inventory")
	}
	return sendErr
}
