package brick

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/brick/ec"
	"github.com/plumeria-fs/plumeria/brick/store"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// Stripe garbage collection (docs/plan-j.md, "Stripe GC and orphans"). A
// stripe stays on its K+M bricks until no block version names it: its
// blocks overwritten (a put replaces the ref), recoded (codeChunk swaps
// the refs to a newer stripe), decommitted, pruned (snapshot deleted,
// file versions dropped), or never referenced at all (a coding step that
// failed between its ShardPuts and its swap, whose cleanup is best
// effort). Versions kept for snapshots and file versions are entries of
// older gens at the same keys, and still name their stripes.
//
// The leader of each healthy stripe group (all members up, none syncing)
// sweeps every StripeGCInterval: it lists the stripes its own store holds
// for the group, asks each chunk's home primary which of them some entry
// of the chunk's blocks (any gen) refers to (StripeRefs), and deletes, on
// every member and itself last, each stripe found unreferenced by two
// sweeps whose questions were at least the grace apart.
//
// Why a referenced stripe is never deleted. Refs to a stripe come into
// being only from the one codeChunk call that made it (its seq is fresh
// from nextSeq and never reused) through swapToRefs; every other ref is a
// copy of one that exists (replication, backfill, reconciliation, repair),
// and StripeRefs answers at an admitted, reconciled primary, which holds
// every ref its PG acknowledged. So take a stripe the sweeper deletes at
// the second sweep:
//
//  1. Its first sweep listed the stripe in the leader's store, so the
//     stripe's coding step had stored shards before that listing; t0,
//     taken by codeChunk before its first ShardPut, precedes the time t1
//     the first answer arrived.
//  2. codeChunk swaps only if, holding the blocks exclusively, less than
//     grace/2 passed since t0 (swapToRefs' notAfter), and abandons and
//     deletes the stripe otherwise. So a swap to the stripe took its
//     tickets on the chunk's blocks before t0 + grace/2 < t1 + grace.
//  3. The second question was sent after t1 + grace; the primary takes
//     the chunk's blocks shared under tickets taken after that, so behind
//     any such swap (pgLock serves tickets in order): it sees the swap's
//     refs, and answers referenced.
//  4. A ref that existed and went (overwrite, decommit, prune) never comes
//     back, since only that swap makes refs to the stripe.
//
// So an unreferenced answer at the second sweep means no ref exists at
// the primary and none can appear. The times are measured on two bricks'
// monotonic clocks; the factor of two between grace/2 and grace absorbs
// any drift in their rates. Both sides read the grace from their Config:
// a cluster must run one value (the default).
//
// What the sweep does not see: a stripe whose shards lie only on members
// other than the leader (a coding step that failed to store on the
// leader and then failed to clean up), and stripes of groups that are
// never healthy.

const (
	stripeGCEvery      = time.Minute      // default Config.StripeGCInterval
	stripeGCGrace      = 2 * time.Minute  // default Config.StripeGCGrace
	stripeRefsBatchMax = 256              // stripes per StripeRefs question (it holds off map installs while it runs)
	stripeGCRPCTimeout = 30 * time.Second // one StripeRefs or ShardDelete
)

var (
	stripesCollected = promauto.NewCounter(prometheus.CounterOpts{Name: "plumeria_brick_stripes_collected_total",
		Help: "Stripes this brick deleted from every member of a stripe group it leads because no block version referred to them."})
	stripeGCBytes = promauto.NewCounter(prometheus.CounterOpts{Name: "plumeria_brick_stripe_gc_bytes_total",
		Help: "Shard bytes of the stripes collected (all K+M shards, as this brick held them)."})
)

// gcStripe names a stripe of a volume's stripe group.
type gcStripe struct {
	vol   uint64
	sg    uint16
	chunk uint64
	seq   uint64
}

// stripeGC is the sweeper's state.
type stripeGC struct {
	grace atomic.Int64 // nanoseconds (Config.StripeGCGrace; tests change it)
	mu    sync.Mutex   // one sweep at a time; guards unref
	// unref holds the stripes the last sweep found unreferenced, each
	// with the time the first of the consecutive sweeps that found it so
	// had its answer. A stripe not asked about in a sweep drops out.
	unref map[gcStripe]time.Time
}

// stripeGrace is the time between the sweeps that must both find a stripe
// unreferenced before it is deleted; a coding step swaps within half of it.
func (s *Server) stripeGrace() time.Duration { return time.Duration(s.gc.grace.Load()) }

// stripeGCLoop sweeps every Config.StripeGCInterval.
func (s *Server) stripeGCLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.StripeGCInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.sweepStripes(s.ctx())
	}
}

// gcGroup is one stripe group a sweep works on, fixed at its start.
type gcGroup struct {
	vol    *clustermap.Volume
	sg     uint16
	per    uint64 // blocks per shard
	shards int    // K+M
}

// sweepStripes runs one sweep over the groups this brick leads in its
// newest map, and returns the stripes it deleted.
func (s *Server) sweepStripes(ctx context.Context) int {
	s.gc.mu.Lock()
	defer s.gc.mu.Unlock()
	start := time.Now()
	m := s.latest.Load()
	next := map[gcStripe]time.Time{}
	var deleted, groups int
	var bytes int64
	for i := range m.Volumes {
		v := &m.Volumes[i]
		for sg := range v.SGs {
			if ctx.Err() != nil || !s.leadsHealthy(m, v.ID, uint16(sg)) {
				continue
			}
			g, err := s.gcGroupOf(v, uint16(sg))
			if err == nil {
				var n int
				var b int64
				n, b, err = s.sweepGroup(ctx, m, g, next)
				deleted, bytes = deleted+n, bytes+b
				if n > 0 {
					groups++
				}
			}
			if err != nil && ctx.Err() == nil {
				s.log.Warn("stripe collection", "vol", v.Name, "sg", sg, "err", err)
			}
		}
	}
	s.gc.unref = next
	if deleted > 0 {
		stripesCollected.Add(float64(deleted))
		stripeGCBytes.Add(float64(bytes))
		s.log.Info("collected stripes no block refers to", "stripes", deleted, "bytes", bytes, "groups", groups,
			"still_pending", len(next), "took", time.Since(start).Round(time.Millisecond))
	}
	return deleted
}

// leadsHealthy reports whether this brick leads stripe group sg of vol
// in m and every member is up and in sync.
func (s *Server) leadsHealthy(m *clustermap.Map, vol uint64, sg uint16) bool {
	v := m.VolumeByID(vol)
	if v == nil || int(sg) >= len(v.SGs) {
		return false
	}
	g := &v.SGs[sg]
	if len(g.Syncing) > 0 || g.Leader(m) != s.cfg.Name {
		return false
	}
	for _, b := range g.Bricks {
		if mb := m.Brick(b); mb == nil || mb.State != clustermap.BrickUp {
			return false
		}
	}
	return true
}

func (s *Server) gcGroupOf(v *clustermap.Volume, sg uint16) (gcGroup, error) {
	p := v.Profile(v.SGs[sg].Profile)
	if p == nil {
		return gcGroup{}, fmt.Errorf("profile %d missing from the map", v.SGs[sg].Profile)
	}
	geo, err := ec.NewGeometry(ec.Profile{K: p.K, M: p.M}, int(v.ChunkBytes))
	if err != nil {
		return gcGroup{}, err
	}
	return gcGroup{vol: v, sg: sg, per: uint64(geo.ShardBlocks()), shards: p.K + p.M}, nil
}

// sweepGroup asks about every stripe this brick holds of g and deletes
// those unreferenced for the grace; it records the others found
// unreferenced in next. It returns the stripes deleted and their bytes.
func (s *Server) sweepGroup(ctx context.Context, m *clustermap.Map, g gcGroup, next map[gcStripe]time.Time) (int, int64, error) {
	held, err := s.heldStripes(g)
	if err != nil {
		return 0, 0, err
	}
	// Questions go per PG to its primary, in batches.
	byPG := map[uint32][]gcStripe{}
	for id := range held {
		pg := clustermap.PGOfChunk(g.vol.ID, id.chunk, len(g.vol.PGs))
		byPG[pg] = append(byPG[pg], id)
	}
	grace := s.stripeGrace()
	var errs []error
	var doomed []gcStripe
	for _, pg := range slices.Sorted(maps.Keys(byPG)) {
		ids := byPG[pg]
		slices.SortFunc(ids, func(a, b gcStripe) int { return cmp.Or(cmp.Compare(a.chunk, b.chunk), cmp.Compare(a.seq, b.seq)) })
		for batch := range slices.Chunk(ids, stripeRefsBatchMax) {
			sent := time.Now()
			refd, err := s.askStripeRefs(ctx, m, g, pg, batch)
			if err != nil {
				errs = append(errs, fmt.Errorf("pg %d: %w", pg, err))
				break // this PG's stripes drop out of unref: their count starts again
			}
			answered := time.Now()
			for _, id := range batch {
				if refd[id] {
					continue
				}
				first, ok := s.gc.unref[id]
				switch {
				case !ok:
					next[id] = answered
				case sent.Sub(first) >= grace:
					doomed = append(doomed, id)
				default:
					next[id] = first
				}
			}
		}
	}
	n, bytes, err := s.deleteStripes(ctx, g, doomed, held, next)
	return n, bytes, errors.Join(append(errs, err)...)
}

// heldStripes lists the stripes of g this brick's store holds, each with
// the blocks it holds of its shard. Memory: a map entry per stripe of the
// group (a few tens of bytes each), as a rebuild pass keeps.
func (s *Server) heldStripes(g gcGroup) (map[gcStripe]int, error) {
	held := map[gcStripe]int{}
	err := s.store.Scan(shardVol(g.vol.ID, g.sg), 0, 1<<64-1, func(e store.Entry) bool {
		held[gcStripe{vol: g.vol.ID, sg: g.sg, chunk: e.Block / g.per, seq: e.Gen}]++
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("list stripes held: %w", err)
	}
	return held, nil
}

// askStripeRefs asks PG pg's primary which of ids are referenced.
func (s *Server) askStripeRefs(ctx context.Context, m *clustermap.Map, g gcGroup, pg uint32, ids []gcStripe) (map[gcStripe]bool, error) {
	primary := g.vol.PGs[pg].Primary()
	if primary == "" {
		return nil, fmt.Errorf("no primary at map epoch %d", m.Epoch)
	}
	cl, err := s.peers.client(m, primary)
	if err != nil {
		return nil, err
	}
	req := &pb.StripeRefsRequest{MapEpoch: m.Epoch, Vol: g.vol.ID, Pg: pg, Stripes: make([]*pb.StripeRef, len(ids))}
	for i, id := range ids {
		req.Stripes[i] = &pb.StripeRef{Chunk: id.chunk, Sg: uint32(id.sg), StripeSeq: id.seq}
	}
	ctx, cancel := context.WithTimeout(ctx, stripeGCRPCTimeout)
	defer cancel()
	resp, err := cl.StripeRefs(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("stripe refs from %s: %w", primary, err)
	}
	out := map[gcStripe]bool{}
	for _, r := range resp.Referenced {
		out[gcStripe{vol: g.vol.ID, sg: uint16(r.Sg), chunk: r.Chunk, seq: r.StripeSeq}] = true
	}
	return out, nil
}

// deleteStripes deletes each stripe of doomed from every member of g's
// group, this brick last, while it still leads the group healthy in its
// newest map. The stripes it did not delete (a member failed, or the
// group changed) stay in next with their times, so the next sweep that
// still finds them unreferenced deletes them at once.
func (s *Server) deleteStripes(ctx context.Context, g gcGroup, doomed []gcStripe, held map[gcStripe]int, next map[gcStripe]time.Time) (int, int64, error) {
	n := 0
	var bytes int64
	for i, id := range doomed {
		m := s.latest.Load()
		err := ctx.Err()
		if err == nil && s.leadsHealthy(m, g.vol.ID, g.sg) {
			err = s.deleteStripeEverywhere(ctx, m, g, id)
		}
		if err != nil || !s.leadsHealthy(m, g.vol.ID, g.sg) {
			for _, id := range doomed[i:] {
				next[id] = s.gc.unref[id]
			}
			if err != nil {
				err = fmt.Errorf("delete stripe %d of chunk %d: %w", id.seq, id.chunk, err)
			}
			return n, bytes, err
		}
		n++
		bytes += int64(held[id]) * limits.BlockBytes * int64(g.shards)
	}
	return n, bytes, nil
}

// deleteStripeEverywhere deletes stripe id from the other members of
// its group, then from this brick: while any member may still hold it,
// the leader lists it and a later sweep finishes the job.
func (s *Server) deleteStripeEverywhere(ctx context.Context, m *clustermap.Map, g gcGroup, id gcStripe) error {
	for _, member := range m.VolumeByID(g.vol.ID).SGs[g.sg].Bricks {
		if member == s.cfg.Name {
			continue
		}
		cl, err := s.peers.client(m, member)
		if err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, stripeGCRPCTimeout)
		_, err = cl.ShardDelete(rctx, &pb.ShardDeleteRequest{MapEpoch: m.Epoch, Vol: g.vol.ID, Sg: uint32(g.sg), Chunk: id.chunk, StripeSeq: id.seq})
		cancel()
		if err != nil {
			return fmt.Errorf("on %s: %w", member, err)
		}
	}
	return s.deleteStripe(ctx, shardVol(g.vol.ID, g.sg), int(g.per), id.chunk, id.seq)
}

// StripeRefs answers, at the primary of a PG, which of the request's
// stripes some entry of any gen of its chunk's blocks refers to. Each
// chunk is read admitted as a read is (lease, reconciled replicas) and
// holding its blocks shared, so a swap to refs in flight (which holds
// them exclusively) is seen whole or not at all, in ticket order. A ref
// this brick cannot read or decode may name any stripe: the chunk's
// stripes are then all answered referenced.
func (s *Server) StripeRefs(ctx context.Context, r *pb.StripeRefsRequest) (*pb.StripeRefsResponse, error) {
	if len(r.Stripes) > stripeRefsBatchMax {
		return nil, status.Errorf(codes.InvalidArgument, "stripe refs of %d stripes: at most %d at once", len(r.Stripes), stripeRefsBatchMax)
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
		return nil, status.Errorf(codes.FailedPrecondition, "stale map epoch %d: brick %s does not lead volume %s pg %d at epoch %d (%s does)", r.MapEpoch, s.cfg.Name, v.Name, r.Pg, m.Epoch, p.Primary())
	}
	per := uint64(v.ChunkBytes) / limits.BlockBytes
	byChunk := map[uint64][]*pb.StripeRef{}
	for _, st := range r.Stripes {
		if st.Chunk > (1<<64-1)/per-1 || clustermap.PGOfChunk(v.ID, st.Chunk, len(v.PGs)) != r.Pg {
			return nil, status.Errorf(codes.InvalidArgument, "stripe refs: chunk %d of volume %s is not in pg %d", st.Chunk, v.Name, r.Pg)
		}
		byChunk[st.Chunk] = append(byChunk[st.Chunk], st)
	}
	resp := &pb.StripeRefsResponse{}
	for _, c := range slices.Sorted(maps.Keys(byChunk)) {
		refs, all, err := s.chunkRefs(ctx, m, v, r.Pg, p, r.MapEpoch, c*per, (c+1)*per)
		if err != nil {
			return nil, err
		}
		for _, st := range byChunk[c] {
			if all || refs[[2]uint64{uint64(st.Sg), st.StripeSeq}] {
				resp.Referenced = append(resp.Referenced, st)
			}
		}
	}
	return resp, nil
}

// chunkRefs returns the (stripe group, stripe seq) of every ref among the
// entries of blocks [lo, hi), holding them shared; all says a ref could
// not be read (any stripe may be named).
func (s *Server) chunkRefs(ctx context.Context, m *clustermap.Map, v *clustermap.Volume, pg uint32, p *clustermap.PG, epoch, lo, hi uint64) (refs map[[2]uint64]bool, all bool, err error) {
	unlock, err := s.admit(ctx, m, v, pg, p, epoch, nil, []span{{lo, hi}})
	if err != nil {
		return nil, false, err
	}
	defer unlock()
	refs = map[[2]uint64]bool{}
	var bad error
	err = s.store.Scan(v.ID, lo, hi, func(e store.Entry) bool {
		if !e.Ref {
			return true
		}
		data, _, err := s.store.Get(e.Key)
		if err != nil {
			bad = err
			return false
		}
		ref, err := ec.DecodeRef(data)
		if err != nil {
			bad = err
			return false
		}
		refs[[2]uint64{uint64(ref.SG), ref.StripeSeq}] = true
		return true
	})
	if err != nil {
		return nil, false, storeErr(err, "stripe refs")
	}
	if bad != nil {
		s.log.Warn("stripe refs: a ref of the chunk is unreadable; answering every stripe of it referenced", "vol", v.Name, "blocks", fmt.Sprintf("[%d, %d)", lo, hi), "err", bad)
		return nil, true, nil
	}
	return refs, false, nil
}
