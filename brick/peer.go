package brick

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/plumeria-fs/plumeria/brick/repl"
	"github.com/plumeria-fs/plumeria/brick/store"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/inproc"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

var (
	repairs = promauto.NewCounter(prometheus.CounterOpts{Name: "plumeria_brick_repaired_blocks_total",
		Help: "Corrupt blocks rewritten from a replica."})
	backfilled = promauto.NewCounter(prometheus.CounterOpts{Name: "plumeria_brick_backfilled_blocks_total",
		Help: "Blocks sent to new or returning replicas."})
	reconciled = promauto.NewCounter(prometheus.CounterOpts{Name: "plumeria_brick_reconciled_blocks_total",
		Help: "Blocks a new primary sent to in-sync replicas that differed from it (changes a failed primary never acknowledged)."})
)

// peers caches gRPC connections to other bricks by address.
type peers struct {
	mu    sync.Mutex
	conns map[string]*inproc.Conn
}

func newPeers() *peers { return &peers{conns: map[string]*inproc.Conn{}} }

func (p *peers) client(m *clustermap.Map, brick string) (pb.BrickClient, error) {
	b := m.Brick(brick)
	if b == nil {
		return nil, fmt.Errorf("brick %s is not in map epoch %d", brick, m.Epoch)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.conns[b.Addr]
	if c == nil {
		var err error
		if c, err = coordclient.Dial(b.Addr); err != nil {
			return nil, err
		}
		p.conns[b.Addr] = c
	}
	return pb.NewBrickClient(c), nil
}

func (p *peers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

func toPB(ops []store.Op) []*pb.BlockOp {
	out := make([]*pb.BlockOp, len(ops))
	for i, o := range ops {
		k, data := pb.BlockOp_PUT, o.Data
		switch o.Kind {
		case store.OpTombstone:
			k = pb.BlockOp_TOMBSTONE
		case store.OpRemove:
			k = pb.BlockOp_REMOVE
		case store.OpRef:
			k, data = pb.BlockOp_REF, o.Ref
		}
		out[i] = &pb.BlockOp{Kind: k, Block: o.Key.Block, Gen: o.Key.Gen, Seq: o.Seq, Data: data}
	}
	return out
}

// fromPB validates ops received from a peer. A REF's payload is checked
// for its length only (the store's rule): it stays opaque until a read
// resolves it (resolveRef).
func fromPB(vol uint64, in []*pb.BlockOp) ([]store.Op, error) {
	out := make([]store.Op, len(in))
	for i, o := range in {
		op := store.Op{Key: store.Key{Vol: vol, Block: o.Block, Gen: o.Gen}, Seq: o.Seq}
		switch o.Kind {
		case pb.BlockOp_PUT:
			if len(o.Data) != limits.BlockBytes {
				return nil, status.Errorf(codes.InvalidArgument, "op %d: put of %d bytes, want %d", i, len(o.Data), limits.BlockBytes)
			}
			op.Kind, op.Data = store.OpPut, o.Data
		case pb.BlockOp_TOMBSTONE:
			op.Kind = store.OpTombstone
		case pb.BlockOp_REMOVE:
			op.Kind = store.OpRemove
		case pb.BlockOp_REF:
			if len(o.Data) != store.RefBytes {
				return nil, status.Errorf(codes.InvalidArgument, "op %d: ref of %d bytes, want %d", i, len(o.Data), store.RefBytes)
			}
			op.Kind, op.Ref = store.OpRef, o.Data
		default:
			return nil, status.Errorf(codes.InvalidArgument, "op %d: unknown kind %d", i, o.Kind)
		}
		out[i] = op
	}
	return out, nil
}

// checkMember refuses replication traffic from anyone but the PG's primary
// to anyone but a member, or routed with a map older than the PG's last
// change (repl.Core.CheckMember, against the newest map). Peer handlers
// check it again under the PG's lock: a new primary's inventory of this
// brick (taken under the same lock, after this brick learned the new map)
// must not be followed by a change an earlier primary sent before the map
// changed.
func (s *Server) checkMember(vol uint64, pg uint32, primary string, epoch uint64) error {
	s.pgMu.Lock()
	defer s.pgMu.Unlock()
	return grpcErr(s.core.CheckMember(vol, pg, primary, epoch))
}

// filterNewer drops ops this brick already has a newer copy of.
func (s *Server) filterNewer(ops []store.Op, horizon uint64, backfill bool) ([]store.Op, error) {
	keys := make([]store.Key, len(ops))
	for i, op := range ops {
		keys[i] = op.Key
	}
	metas, err := s.store.Metas(keys)
	if err != nil {
		return nil, err
	}
	keep := func(op store.Op, ex repl.Existing) bool {
		switch {
		case op.Kind == store.OpRemove && backfill:
			return repl.ShouldRemoveInBackfill(ex, horizon)
		case op.Kind == store.OpRemove:
			return ex.Present && op.Seq > ex.Seq
		}
		return repl.ShouldApply(ex, op.Seq, horizon)
	}
	out := ops[:0]
	for i, op := range ops {
		ex := repl.Existing{Present: metas[i].Present, Seq: metas[i].Seq}
		k := keep(op, ex)
		if !k && ex.Present {
			// A corrupt copy is always replaced (as seq 0, which keeps
			// every op the real seq keeps): only an op the index alone
			// would skip needs the copy read and checked.
			switch _, _, err := s.store.Get(op.Key); {
			case errors.Is(err, store.ErrCorrupt):
				k = keep(op, repl.Existing{Present: true})
			case err != nil && !errors.Is(err, store.ErrNotFound):
				return nil, err
			}
		}
		if k {
			out = append(out, op)
		}
	}
	return out, nil
}

// Replicate applies a primary's ops in the order the primary sent them.
func (s *Server) Replicate(ctx context.Context, r *pb.ReplicateRequest) (*pb.ReplicateResponse, error) {
	defer s.inflight.enter(kindReplicate)()
	m, err := s.beginPeer(ctx, r.MapEpoch)
	if err != nil {
		return nil, err
	}
	if err := s.checkMember(r.Vol, r.Pg, r.Primary, r.MapEpoch); err != nil {
		return nil, err
	}
	if r.Writer == nil {
		return nil, status.Error(codes.InvalidArgument, "replicated change without a writer id")
	}
	if err := repl.CheckFence(m, writerOf(r.Writer)); err != nil {
		return nil, grpcErr(err)
	}
	ops, err := fromPB(r.Vol, r.Ops)
	if err != nil {
		return nil, err
	}
	// The blocks of the change, shared with the PG's other changes
	// (pglock.go): the primary sends changes to disjoint blocks at once.
	spans := make([]span, len(ops))
	for i, op := range ops {
		spans[i] = span{op.Key.Block, op.Key.Block + 1}
	}
	unlock := s.lockBlocks(pgKey{Vol: r.Vol, PG: r.Pg}, spans, true)
	defer unlock()
	if err := s.checkMember(r.Vol, r.Pg, r.Primary, r.MapEpoch); err != nil {
		return nil, err
	}
	if ops, err = s.filterNewer(ops, 0, false); err != nil {
		return nil, storeErr(err, "replicate")
	}
	if err := s.applyOps(ctx, ops, r.Reserved); err != nil {
		return nil, storeErr(err, fmt.Sprintf("brick %s: apply replicated ops", s.cfg.Name))
	}
	return &pb.ReplicateResponse{}, nil
}

// pgEntries lists the index entries this brick holds for one PG.
func (s *Server) pgEntries(v *clustermap.Volume, pg uint32) ([]store.Entry, error) {
	blocksPerChunk := uint64(v.ChunkBytes) / limits.BlockBytes
	var out []store.Entry
	err := s.store.Scan(v.ID, 0, ^uint64(0), func(e store.Entry) bool {
		if clustermap.PGOfChunk(v.ID, e.Block/blocksPerChunk, len(v.PGs)) == pg {
			out = append(out, e)
		}
		return true
	})
	return out, err
}

const inventoryBatch = 4096

// Inventory streams what this brick holds for a PG: keys, seqs, and
// which entries are refs.
func (s *Server) Inventory(r *pb.InventoryRequest, stream grpc.ServerStreamingServer[pb.InventoryResponse]) error {
	m, err := s.beginPeer(stream.Context(), r.MapEpoch)
	if err != nil {
		return err
	}
	v, _, err := pgOf(m, r.Vol, r.Pg, 0, 0)
	if err != nil {
		return err
	}
	unlock := s.lockPG(pgKey{Vol: r.Vol, PG: r.Pg}) // orders it against dropPG
	entries, err := s.pgEntries(v, r.Pg)
	unlock()
	if err != nil {
		return storeErr(err, "inventory")
	}
	for len(entries) > 0 {
		n := min(len(entries), inventoryBatch)
		resp := &pb.InventoryResponse{}
		for _, e := range entries[:n] {
			resp.Entries = append(resp.Entries, &pb.InventoryEntry{Block: e.Block, Gen: e.Gen, Seq: e.Seq, Ref: e.Ref})
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
		entries = entries[n:]
	}
	return nil
}

// Backfill applies one batch of a primary's authoritative copies (see
// repl.ShouldApply).
func (s *Server) Backfill(ctx context.Context, r *pb.BackfillRequest) (*pb.BackfillResponse, error) {
	defer s.inflight.enter(kindReplicate)()
	n, err := s.applyBackfill(ctx, r)
	if err != nil {
		return nil, err
	}
	return &pb.BackfillResponse{Applied: n}, nil
}

func (s *Server) applyBackfill(ctx context.Context, r *pb.BackfillRequest) (int64, error) {
	if _, err := s.beginPeer(ctx, r.MapEpoch); err != nil {
		return 0, err
	}
	if err := s.checkMember(r.Vol, r.Pg, r.Primary, r.MapEpoch); err != nil {
		return 0, err
	}
	ops, err := fromPB(r.Vol, r.Ops)
	if err != nil {
		return 0, err
	}
	unlock := s.lockPG(pgKey{Vol: r.Vol, PG: r.Pg})
	defer unlock()
	if err := s.checkMember(r.Vol, r.Pg, r.Primary, r.MapEpoch); err != nil {
		return 0, err
	}
	if ops, err = s.filterNewer(ops, r.Horizon, true); err != nil {
		return 0, storeErr(err, "backfill")
	}
	if err := s.store.Apply(ctx, ops); err != nil {
		return 0, storeErr(err, "backfill apply")
	}
	return int64(len(ops)), nil
}
