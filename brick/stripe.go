package brick

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/brick/ec"
	"github.com/plumeria-fs/plumeria/brick/store"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// Coding chunks into stripes and reading them back, at the home primary
// (docs/plan-j.md, "Erasure coding"). codeChunk reads a chunk's live
// blocks, codes them under a profile, stores the K+M shards on a stripe
// group (ShardPut, all or nothing) and then swaps each block whose entry
// did not change meanwhile for a ref to the stripe (swapToRefs). A read
// that meets a ref asks resolveRef, which reads the block's data shard
// and, when that member is down, lacks the block or holds it corrupt,
// reconstructs it from any K others and writes the repaired shard back.

var (
	stripesCoded = promauto.NewCounter(prometheus.CounterOpts{Name: "plumeria_brick_stripes_coded_total",
		Help: "Chunks this brick coded into stripes as a PG primary (erasure coding or mirror profiles)."})
	stripeRepairs = promauto.NewCounter(prometheus.CounterOpts{Name: "plumeria_brick_stripe_blocks_repaired_total",
		Help: "Shard blocks a read found missing or corrupt on their member, rebuilt from the others and written back."})
	stripeDegradedReads = promauto.NewCounter(prometheus.CounterOpts{Name: "plumeria_brick_stripe_degraded_reads_total",
		Help: "Shards of stripes rebuilt from the others for a read (member down, missing or corrupt blocks)."})
)

// stripeKey names one shard of one stripe. A stripe is (vol, sg, chunk,
// seq): seqs are epoch<<32 | a counter of the brick that coded it, so two
// primaries under one epoch may both code a stripe with the same seq on
// one group, for different chunks (a chunk's primary changes only with the
// epoch, so (chunk, seq) is unique). Stripes are immutable, so a shard's
// bytes under a key never change: the cache needs no invalidation.
type stripeKey struct {
	vol   uint64
	sg    uint16
	chunk uint64
	seq   uint64
	shard int
}

// stripeCache keeps recently read shards (their first Len blocks), so a
// read of a coded chunk costs one shard read per member, not one per block.
// Bounded by stripeCacheBytes.
type stripeCache struct {
	mu    sync.Mutex
	max   int
	bytes int
	lru   *list.List // of *stripeEntry, most recent first
	index map[stripeKey]*list.Element
}

type stripeEntry struct {
	key  stripeKey
	data []byte
}

const stripeCacheBytes = 32 << 20

func newStripeCache(max int) *stripeCache {
	return &stripeCache{max: max, lru: list.New(), index: map[stripeKey]*list.Element{}}
}

func (c *stripeCache) get(k stripeKey) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.index[k]
	if e == nil {
		return nil
	}
	c.lru.MoveToFront(e)
	return e.Value.(*stripeEntry).data
}

func (c *stripeCache) put(k stripeKey, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.index[k]; e != nil || len(data) > c.max {
		return
	}
	c.index[k] = c.lru.PushFront(&stripeEntry{key: k, data: data})
	c.bytes += len(data)
	for c.bytes > c.max {
		last := c.lru.Back()
		en := last.Value.(*stripeEntry)
		c.lru.Remove(last)
		delete(c.index, en.key)
		c.bytes -= len(en.data)
	}
}

// stripeOf is what a ref names, checked against a map.
type stripeOf struct {
	vol *clustermap.Volume
	sg  *clustermap.StripeGroup
	geo ec.Geometry
	ref ec.Ref
}

// locateStripe checks ref against m: its stripe group exists, with a
// profile whose geometry holds Len blocks per shard.
func locateStripe(m *clustermap.Map, vol uint64, ref ec.Ref) (stripeOf, error) {
	v := m.VolumeByID(vol)
	if v == nil || int(ref.SG) >= len(v.SGs) {
		return stripeOf{}, status.Errorf(codes.DataLoss, "ref to stripe group %d of volume %d, which map epoch %d lacks", ref.SG, vol, m.Epoch)
	}
	g := &v.SGs[ref.SG]
	p := v.Profile(g.Profile)
	if p == nil {
		return stripeOf{}, status.Errorf(codes.Internal, "volume %s stripe group %d: profile %d missing from the map", v.Name, ref.SG, g.Profile)
	}
	geo, err := ec.NewGeometry(ec.Profile{K: p.K, M: p.M}, int(v.ChunkBytes))
	if err != nil {
		return stripeOf{}, status.Errorf(codes.Internal, "volume %s stripe group %d: %v", v.Name, ref.SG, err)
	}
	if int(ref.Len) > geo.ShardBlocks() {
		return stripeOf{}, status.Errorf(codes.DataLoss, "ref to stripe %d of volume %s: %d blocks per shard, a shard holds %d", ref.StripeSeq, v.Name, ref.Len, geo.ShardBlocks())
	}
	return stripeOf{vol: v, sg: g, geo: geo, ref: ref}, nil
}

// readCoded returns the data of block (of the live volume's chunk) from
// the stripe ref names.
func (s *Server) readCoded(ctx context.Context, vol, block uint64, ref ec.Ref) ([]byte, error) {
	m := s.latest.Load()
	st, err := locateStripe(m, vol, ref)
	if err != nil {
		return nil, err
	}
	per := uint64(st.geo.ChunkBlocks())
	chunk, b := block/per, int(block%per)
	j, o := st.geo.BlockPlace(b)
	if o >= int(ref.Len) {
		return make([]byte, limits.BlockBytes), nil // past the stripe's live end: zeros
	}
	shard, err := s.stripeShard(ctx, m, st, chunk, j, o)
	if err != nil {
		return nil, err
	}
	return slices.Clone(shard[o*limits.BlockBytes : (o+1)*limits.BlockBytes]), nil
}

// stripeShard returns shard j of the stripe (its first Len blocks), from
// the cache, from its member, or rebuilt from K others (and then written
// back to a member that lacked blocks of it or held them corrupt). Its
// block o must be good; others may not be when some offset of the stripe
// lacks K good blocks.
func (s *Server) stripeShard(ctx context.Context, m *clustermap.Map, st stripeOf, chunk uint64, j, o int) ([]byte, error) {
	key := stripeKey{st.vol.ID, st.ref.SG, chunk, st.ref.StripeSeq, j}
	if d := s.stripes.get(key); d != nil {
		return d, nil
	}
	// A reader walking the chunk (another data shard of this stripe is
	// cached) will want the rest too: fetch them in parallel with j, so a
	// chunk costs two rounds of shard reads, not K. A lone read of a
	// block fetches its own shard only.
	var prefetch sync.WaitGroup
	if s.stripeWalked(st, chunk, j) {
		for i := range st.geo.Profile().K {
			if i == j || s.stripes.get(stripeKey{st.vol.ID, st.ref.SG, chunk, st.ref.StripeSeq, i}) != nil {
				continue
			}
			prefetch.Go(func() {
				if d, bad, err := s.fetchShard(ctx, m, st, chunk, i); err == nil && len(bad) == 0 {
					s.stripes.put(stripeKey{st.vol.ID, st.ref.SG, chunk, st.ref.StripeSeq, i}, d)
				}
			})
		}
	}
	d, bad, err := s.fetchShard(ctx, m, st, chunk, j)
	prefetch.Wait()
	if err == nil && len(bad) == 0 {
		s.stripes.put(key, d)
		return d, nil
	}
	stripeDegradedReads.Inc()
	if err != nil {
		d = nil // not read: every block of it is rebuilt
	}
	shards, short, err2 := s.reconstruct(ctx, m, st, chunk, j, d, bad)
	if err2 == nil && short != nil {
		if in, lost := short.At(o); in {
			code := codes.Unavailable // an unread shard may come back
			if lost {
				code = codes.DataLoss
			}
			err2 = status.Errorf(code, "stripe %d of volume %s stripe group %d: %v", st.ref.StripeSeq, st.vol.Name, st.ref.SG, short)
		}
	}
	if err2 != nil {
		return nil, fmt.Errorf("%w (shard %d: %v)", err2, j, errOr(err, fmt.Errorf("blocks %v missing or corrupt", bad)))
	}
	return shards[j], nil
}

// stripeWalked reports whether a data shard of the stripe other than j is
// cached.
func (s *Server) stripeWalked(st stripeOf, chunk uint64, j int) bool {
	for i := range st.geo.Profile().K {
		if i != j && s.stripes.get(stripeKey{st.vol.ID, st.ref.SG, chunk, st.ref.StripeSeq, i}) != nil {
			return true
		}
	}
	return false
}

func errOr(err, alt error) error {
	if err != nil {
		return err
	}
	return alt
}

// fetchShard reads shard j's first Len blocks from its member. bad lists
// the blocks the member lacks or found corrupt. A syncing member (being
// rebuilt) is not asked.
func (s *Server) fetchShard(ctx context.Context, m *clustermap.Map, st stripeOf, chunk uint64, j int) (data []byte, bad []uint32, err error) {
	member := st.sg.Bricks[j]
	if slices.Contains(st.sg.Syncing, member) {
		return nil, nil, fmt.Errorf("member %s is being rebuilt", member)
	}
	if b := m.Brick(member); b == nil || b.State != clustermap.BrickUp {
		return nil, nil, fmt.Errorf("member %s is down", member)
	}
	cl, err := s.peers.client(m, member)
	if err != nil {
		return nil, nil, err
	}
	r, err := cl.ShardRead(ctx, &pb.ShardReadRequest{MapEpoch: m.Epoch, Vol: st.vol.ID, Sg: uint32(st.ref.SG), Shard: uint32(j),
		Chunk: chunk, StripeSeq: st.ref.StripeSeq, First: 0, Blocks: uint32(st.ref.Len)})
	if err != nil {
		return nil, nil, fmt.Errorf("shard read from %s: %w", member, err)
	}
	if len(r.Data) != int(st.ref.Len)*limits.BlockBytes {
		return nil, nil, fmt.Errorf("shard read from %s: %d bytes, want %d", member, len(r.Data), int(st.ref.Len)*limits.BlockBytes)
	}
	return r.Data, append(r.Missing, r.Corrupt...), nil
}

// reconstruct reads the stripe's other shards and rebuilds, block offset
// by block offset, every data shard and shard j (given as read: dj nil if
// it could not be, badj its blocks the member lacked or held corrupt). A
// block needs K good blocks at its own offset, so shards each with a few
// bad blocks at different offsets still serve (a whole-shard rule would
// count each as lost). Offsets that lack K good blocks are named in short;
// the shards' blocks there are not good, and nothing is cached then (a
// stripe losing data). Every bad block a member reported that could be
// rebuilt is written back to it.
func (s *Server) reconstruct(ctx context.Context, m *clustermap.Map, st stripeOf, chunk uint64, j int, dj []byte, badj []uint32) (shards [][]byte, short *ec.BlocksLostError, err error) {
	p := st.geo.Profile()
	n := int(st.ref.Len)
	shards, bad := make([][]byte, p.Shards()), make([][]uint32, p.Shards())
	shards[j], bad[j] = dj, badj
	var mu sync.Mutex
	var g errgroup.Group
	for i := range shards {
		if i == j {
			continue
		}
		g.Go(func() error {
			d := s.stripes.get(stripeKey{st.vol.ID, st.ref.SG, chunk, st.ref.StripeSeq, i})
			var b []uint32
			if d == nil {
				var err error
				if d, b, err = s.fetchShard(ctx, m, st, chunk, i); err != nil {
					return nil // unread: each of its blocks one erasure more
				}
			}
			mu.Lock()
			shards[i], bad[i] = d, b
			mu.Unlock()
			return nil
		})
	}
	_ = g.Wait()
	want := make([]bool, len(shards))
	for i := range want {
		want[i] = i < p.K || i == j
	}
	coder, err := s.coder(p, st.geo.ChunkBytes())
	if err != nil {
		return nil, nil, err
	}
	// Shards with bad blocks were just read, not taken from the cache:
	// rebuilding their blocks in place changes no cached shard.
	if err := coder.ReconstructBlocks(shards, bad, n, want); err != nil && !errors.As(err, &short) {
		return nil, nil, status.Errorf(codes.Internal, "stripe %d of volume %s stripe group %d: %v", st.ref.StripeSeq, st.vol.Name, st.ref.SG, err)
	}
	for i := range shards {
		if !want[i] {
			continue
		}
		fixed := bad[i]
		if short == nil {
			s.stripes.put(stripeKey{st.vol.ID, st.ref.SG, chunk, st.ref.StripeSeq, i}, shards[i])
		} else { // some blocks are not good: nothing cached, only what was rebuilt written back
			fixed = slices.DeleteFunc(slices.Clone(fixed), func(o uint32) bool { in, _ := short.At(int(o)); return in })
		}
		if len(fixed) > 0 {
			s.repairShard(ctx, m, st, chunk, i, shards[i], fixed)
		}
	}
	return shards, short, nil
}

func lostOnly(n, lost int) []bool {
	w := make([]bool, n)
	w[lost] = true
	return w
}

// repairShard writes back the blocks of shard j its member lacked or held
// corrupt, best effort (a failure leaves the next read to try again).
func (s *Server) repairShard(ctx context.Context, m *clustermap.Map, st stripeOf, chunk uint64, j int, d []byte, bad []uint32) {
	member := st.sg.Bricks[j]
	cl, err := s.peers.client(m, member)
	if err != nil {
		return
	}
	for _, o := range bad {
		if int(o) >= int(st.ref.Len) {
			continue
		}
		_, err := cl.ShardPut(ctx, &pb.ShardPutRequest{MapEpoch: m.Epoch, Vol: st.vol.ID, Sg: uint32(st.ref.SG), Shard: uint32(j), Chunk: chunk,
			StripeSeq: st.ref.StripeSeq, First: o, Data: d[int(o)*limits.BlockBytes : int(o+1)*limits.BlockBytes]})
		if err != nil {
			s.log.Warn("stripe repair", "vol", st.vol.ID, "sg", st.ref.SG, "stripe", st.ref.StripeSeq, "shard", j, "member", member, "err", err)
			return
		}
		stripeRepairs.Inc()
	}
}

// coder returns a shared coder for profile p and chunks of chunkBytes.
func (s *Server) coder(p ec.Profile, chunkBytes int) (*ec.Coder, error) {
	s.codersMu.Lock()
	defer s.codersMu.Unlock()
	k := [3]int{p.K, p.M, chunkBytes}
	if c := s.coders[k]; c != nil {
		return c, nil
	}
	c, err := ec.NewCoder(p, chunkBytes)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "coder %s for chunks of %d bytes: %v", p, chunkBytes, err)
	}
	if s.coders == nil {
		s.coders = map[[3]int]*ec.Coder{}
	}
	s.coders[k] = c
	return c, nil
}

// codeStats is what coding one chunk did.
type codeStats struct {
	coded   bool  // a stripe was made and at least one block swapped
	swapped int   // blocks now refs to it
	changed int   // blocks left as they were (written or decommitted meanwhile)
	bytes   int64 // shard bytes stored (all K+M)
}

// codeChunk codes the live blocks of chunk (of PG pg of vol, which this
// brick leads) into a stripe of profile on one of its healthy stripe
// groups and swaps them for refs. Blocks already refs are read and coded
// again (into the new stripe), so a chunk written after it was coded gets
// one stripe again. A chunk with no data, or whose live blocks are all
// refs to stripes of profile already, is left alone. Shards are stored
// before any ref names them, all of them or none (a failed ShardPut
// deletes the others: a stripe is never made degraded).
func (s *Server) codeChunk(ctx context.Context, vol uint64, pg uint32, chunk uint64, profile uint16) (codeStats, error) {
	m := s.serving.Load()
	v := m.VolumeByID(vol)
	if v == nil {
		return codeStats{}, status.Errorf(codes.NotFound, "volume %d not in map epoch %d", vol, m.Epoch)
	}
	prof := v.Profile(profile)
	if prof == nil {
		return codeStats{}, status.Errorf(codes.InvalidArgument, "volume %s has no profile %d (plumeria policy set adds it)", v.Name, profile)
	}
	if got := clustermap.PGOfChunk(vol, chunk, len(v.PGs)); got != pg {
		return codeStats{}, status.Errorf(codes.InvalidArgument, "chunk %d of volume %s is in pg %d, not %d", chunk, v.Name, got, pg)
	}
	ep := ec.Profile{K: prof.K, M: prof.M}
	geo, err := ec.NewGeometry(ep, int(v.ChunkBytes))
	if err != nil {
		return codeStats{}, status.Errorf(codes.Internal, "%v", err)
	}
	per := uint64(geo.ChunkBlocks())
	lo := chunk * per
	blocks, err := s.store.LatestRangeAt(vol, lo, lo+per, store.Reader{Gen: v.LiveReadGen()}, nil)
	if err != nil {
		return codeStats{}, storeErr(err, "code chunk")
	}
	data := make([]byte, geo.ChunkBytes())
	type live struct {
		block, gen, seq uint64
	}
	var lives []live
	end := 0
	done := true // every live block already a ref to a stripe of profile
	for _, b := range blocks {
		if b.Err != nil {
			return codeStats{}, storeErr(b.Err, fmt.Sprintf("code chunk %d of volume %s", chunk, v.Name)) // repaired by a read first
		}
		if b.Entry.Tombstone {
			continue
		}
		d := b.Data
		if b.Entry.Ref {
			if r, err := ec.DecodeRef(b.Ref); err != nil || int(r.SG) >= len(v.SGs) || v.SGs[r.SG].Profile != profile {
				done = false
			}
			if d, err = s.resolveRef(ctx, vol, b.Entry.Block, b.Ref); err != nil {
				return codeStats{}, err
			}
		} else {
			done = false
		}
		i := int(b.Entry.Block - lo)
		copy(data[i*limits.BlockBytes:], d)
		lives = append(lives, live{b.Entry.Block, b.Entry.Gen, b.Entry.Seq})
		end = i + 1
	}
	if len(lives) == 0 || done {
		return codeStats{}, nil // nothing to code, or coded already: no new stripe, no garbage
	}
	coder, err := s.coder(ep, geo.ChunkBytes())
	if err != nil {
		return codeStats{}, err
	}
	shards, err := coder.Encode(data[:end*limits.BlockBytes])
	if err != nil {
		return codeStats{}, status.Errorf(codes.Internal, "code chunk %d of volume %s: %v", chunk, v.Name, err)
	}
	seq, err := s.nextSeq(m.Epoch)
	if err != nil {
		return codeStats{}, err
	}
	sg, ok := clustermap.PickStripeGroup(m, v, profile, chunk*0x9e3779b97f4a7c15^seq)
	if !ok {
		return codeStats{}, status.Errorf(codes.Unavailable, "volume %s: no stripe group of profile %s is healthy (all members up, in sync, not full)", v.Name, prof)
	}
	n := geo.ShardLen(end) // = len(shards[i]) in blocks
	ref := ec.Ref{SG: sg, StripeSeq: seq, Len: uint16(n)}
	st := stripeOf{vol: v, sg: &v.SGs[sg], geo: geo, ref: ref}
	// The stripe collector may delete a stripe that two sweeps a grace
	// apart found unreferenced: swap within half the grace of the first
	// shard write, or not at all (the argument: stripegc.go).
	stored := time.Now()
	if err := s.putStripe(ctx, m, st, chunk, shards, n); err != nil {
		return codeStats{}, err
	}
	payload := ec.EncodeRef(ref)
	swaps := make([]refSwap, len(lives))
	for i, l := range lives {
		swaps[i] = refSwap{block: l.block, gen: l.gen, seq: l.seq, ref: payload}
	}
	grace := s.stripeGrace()
	swapped, err := s.swapToRefs(ctx, vol, pg, swaps, stored.Add(grace/2))
	if errors.Is(err, errSwapLate) {
		s.deleteStripeOn(context.WithoutCancel(ctx), m, st, chunk) // no ref names it
		return codeStats{}, status.Errorf(codes.Aborted, "code chunk %d of volume %s: %v (more than half the stripe collector's grace of %v since its shards were stored): abandoned, retry", chunk, v.Name, err, grace)
	}
	if err != nil {
		// Some member may hold refs to the stripe: keep it (the stripe
		// collector deletes it once no ref names it).
		return codeStats{}, err
	}
	stats := codeStats{swapped: swapped, changed: len(swaps) - swapped, bytes: int64(n) * limits.BlockBytes * int64(ep.Shards())}
	if swapped == 0 {
		s.deleteStripeOn(ctx, m, st, chunk)
		stats.bytes = 0
		return stats, nil
	}
	stats.coded = true
	for i := range shards {
		s.stripes.put(stripeKey{v.ID, sg, chunk, seq, i}, shards[i])
	}
	stripesCoded.Inc()
	return stats, nil
}

// putStripe stores the first n blocks of each shard on its member of the
// stripe group, in parallel; on any failure it deletes what it stored.
func (s *Server) putStripe(ctx context.Context, m *clustermap.Map, st stripeOf, chunk uint64, shards [][]byte, n int) error {
	var g errgroup.Group
	for i, member := range st.sg.Bricks {
		g.Go(func() error {
			cl, err := s.peers.client(m, member)
			if err != nil {
				return err
			}
			_, err = cl.ShardPut(ctx, &pb.ShardPutRequest{MapEpoch: m.Epoch, Vol: st.vol.ID, Sg: uint32(st.ref.SG), Shard: uint32(i),
				Chunk: chunk, StripeSeq: st.ref.StripeSeq, Data: shards[i][:n*limits.BlockBytes]})
			if err != nil {
				return fmt.Errorf("shard %d to %s: %w", i, member, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		s.deleteStripeOn(context.WithoutCancel(ctx), m, st, chunk)
		return status.Errorf(status.Code(err), "store stripe of chunk %d of volume %s on stripe group %d: %v", chunk, st.vol.Name, st.ref.SG, err)
	}
	return nil
}

// deleteStripeOn deletes the stripe's shards from every member, best
// effort (the stripe collector removes what is left).
func (s *Server) deleteStripeOn(ctx context.Context, m *clustermap.Map, st stripeOf, chunk uint64) {
	for _, member := range st.sg.Bricks {
		cl, err := s.peers.client(m, member)
		if err != nil {
			continue
		}
		_, _ = cl.ShardDelete(ctx, &pb.ShardDeleteRequest{MapEpoch: m.Epoch, Vol: st.vol.ID, Sg: uint32(st.ref.SG), Chunk: chunk, StripeSeq: st.ref.StripeSeq})
	}
}

// relayoutSlotsMax bounds the chunks a brick codes at once (each holds
// the chunk and its K+M shards in memory: about 2.5 chunks' bytes).
const relayoutSlotsMax = 4

// Relayout codes one chunk of a PG this brick leads into a stripe of the
// request's profile (codeChunk).
func (s *Server) Relayout(ctx context.Context, r *pb.RelayoutRequest) (*pb.RelayoutResponse, error) {
	if r.Profile > 0xffff {
		return nil, status.Errorf(codes.InvalidArgument, "relayout to profile %d: give a profile of the volume (0..65535)", r.Profile)
	}
	m, done, err := s.begin(ctx, r.MapEpoch, r.Vol, r.Pg)
	if err != nil {
		return nil, err
	}
	v, p, err := pgOf(m, r.Vol, r.Pg, 0, 0)
	done()
	if err != nil {
		return nil, err
	}
	if p.Primary() != s.cfg.Name {
		return nil, status.Errorf(codes.FailedPrecondition, "stale map epoch %d: brick %s does not lead volume %s pg %d at epoch %d (%s does)", r.MapEpoch, s.cfg.Name, v.Name, r.Pg, m.Epoch, p.Primary())
	}
	select {
	case s.relayoutSlots <- struct{}{}:
		defer func() { <-s.relayoutSlots }()
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	code := s.codeChunk
	if r.Profile == 0 {
		code = func(ctx context.Context, vol uint64, pg uint32, chunk uint64, _ uint16) (codeStats, error) {
			return s.decodeChunk(ctx, vol, pg, chunk)
		}
	}
	st, err := code(ctx, r.Vol, r.Pg, r.Chunk, uint16(r.Profile))
	if err != nil {
		return nil, err
	}
	return &pb.RelayoutResponse{Swapped: uint32(st.swapped), Changed: uint32(st.changed), StripeBytes: st.bytes}, nil
}

// decodeChunk moves the coded blocks of chunk (of PG pg of vol, which this
// brick leads) back home: each live ref whose entry is unchanged since it
// was read is replaced by a put of its data (read from its stripe), under
// the blocks' exclusive locks like a swap to refs. The stripes they named
// are collected once nothing names them (stripegc.go).
func (s *Server) decodeChunk(ctx context.Context, vol uint64, pg uint32, chunk uint64) (codeStats, error) {
	m := s.serving.Load()
	v := m.VolumeByID(vol)
	if v == nil {
		return codeStats{}, status.Errorf(codes.NotFound, "volume %d not in map epoch %d", vol, m.Epoch)
	}
	if got := clustermap.PGOfChunk(vol, chunk, len(v.PGs)); got != pg {
		return codeStats{}, status.Errorf(codes.InvalidArgument, "chunk %d of volume %s is in pg %d, not %d", chunk, v.Name, got, pg)
	}
	per := uint64(v.ChunkBytes) / limits.BlockBytes
	lo := chunk * per
	blocks, err := s.store.LatestRangeAt(vol, lo, lo+per, store.Reader{Gen: v.LiveReadGen()}, nil)
	if err != nil {
		return codeStats{}, storeErr(err, "move chunk home")
	}
	var swaps []refSwap
	for _, b := range blocks {
		if b.Err != nil {
			return codeStats{}, storeErr(b.Err, fmt.Sprintf("move chunk %d of volume %s home", chunk, v.Name))
		}
		if !b.Entry.Ref {
			continue
		}
		d, err := s.resolveRef(ctx, vol, b.Entry.Block, b.Ref)
		if err != nil {
			return codeStats{}, err
		}
		swaps = append(swaps, refSwap{block: b.Entry.Block, gen: b.Entry.Gen, seq: b.Entry.Seq, data: d})
	}
	if len(swaps) == 0 {
		return codeStats{}, nil
	}
	swapped, err := s.swapToRefs(ctx, vol, pg, swaps, time.Time{})
	if err != nil {
		return codeStats{}, err
	}
	return codeStats{coded: swapped > 0, swapped: swapped, changed: len(swaps) - swapped}, nil
}
