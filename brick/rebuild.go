package brick

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/sync/errgroup"

	"github.com/plumeria-fs/plumeria/brick/ec"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// Rebuild of stripe group members (docs/plan-j.md, "Erasure coding",
// "Rebuild"). When a member of a stripe group fails, the map replaces it
// in place by a brick listed in Syncing (clustermap rule 7). The group's
// leader (its first in-sync member that is up) rebuilds that position:
// it lists the stripes the in-sync members hold, reads K whole shards of
// each, reconstructs the syncing position's shard and stores it there,
// then reports SGSynced with the Since it started under. No new stripe
// lands on a group with a syncing member (PickStripeGroup), so the list
// taken at the start is complete for that Since.
//
// A syncing member's own inventory is not trusted: shard keys do not
// name a position, so a brick that was a member at another position (or
// of this group before a failure) may hold complete shards of the same
// stripes that are wrong for its new position. Every stripe is rebuilt
// except those this leader itself stored there under the same Since in an
// earlier pass (a retry after a failure).
//
// Bounds: rebuildStripesInFlight stripes at once per brick (over every
// group it rebuilds), each holding at most K+1 shards (K read, one
// reconstructed); a pass also keeps the list of the group's stripes
// (a few tens of bytes each).

const (
	rebuildEvery           = time.Second      // how often the leader looks for syncing members
	rebuildStripesInFlight = 4                // stripes being rebuilt at once, per brick
	rebuildLogEvery        = 256              // stripes between progress lines
	rebuildRetryDelay      = time.Second      // after a failed pass
	rebuildLossRetryDelay  = 30 * time.Second // after a pass that found unreadable stripes
	rebuildRPCTimeout      = 30 * time.Second // one shard read, put or inventory
)

var (
	stripeRebuiltShards = promauto.NewCounter(prometheus.CounterOpts{Name: "plumeria_brick_stripe_rebuilt_shards_total",
		Help: "Shards this brick rebuilt from the others and stored on a syncing member of a stripe group it leads."})
	stripeRebuildFailures = promauto.NewCounter(prometheus.CounterOpts{Name: "plumeria_brick_stripe_rebuild_failures_total",
		Help: "Stripes a rebuild could not read K whole shards of: data lost beyond the profile's tolerance (or members down too)."})
)

// errStripesLost is wrapped by a pass that met stripes with fewer than K
// readable shards: the member is not reported in sync.
var errStripesLost = errors.New("brick: stripes with fewer than K readable shards")

// errRebuildMoot ends a pass whose group changed (Since, leader, target
// syncing or up): the next pass starts over under the new membership.
var errRebuildMoot = errors.New("brick: stripe group changed during rebuild")

// rbKey is one syncing member of a stripe group.
type rbKey struct {
	vol    uint64
	sg     uint16
	target string
}

// stripeID names a stripe of a group: its chunk and seq.
type stripeID struct{ chunk, seq uint64 }

// rebuilder starts one goroutine per syncing member this brick must
// rebuild and bounds the stripes they work on together.
type rebuilder struct {
	s     *Server
	slots chan struct{} // rebuildStripesInFlight
	mu    sync.Mutex
	run   map[rbKey]bool
}

// rebuildLoop looks, every rebuildEvery, for syncing members of stripe
// groups this brick leads in its newest map, and rebuilds each in a
// goroutine of its own (which ends when the member is in sync, no longer
// syncing, or this brick no longer leads the group).
func (s *Server) rebuildLoop() {
	defer s.wg.Done()
	r := &rebuilder{s: s, slots: make(chan struct{}, rebuildStripesInFlight), run: map[rbKey]bool{}}
	t := time.NewTicker(rebuildEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		m := s.latest.Load()
		for _, v := range m.Volumes {
			for sg := range v.SGs {
				for _, target := range v.SGs[sg].Syncing {
					k := rbKey{vol: v.ID, sg: uint16(sg), target: target}
					if _, _, ok := r.needed(k); ok {
						r.start(k)
					}
				}
			}
		}
	}
}

func (r *rebuilder) start(k rbKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.run[k] {
		return
	}
	r.run[k] = true
	r.s.wg.Add(1)
	go r.loop(k)
}

// needed returns the newest map and the group's Since if this brick leads
// k's group there and k's target is syncing and up.
func (r *rebuilder) needed(k rbKey) (*clustermap.Map, uint64, bool) {
	m := r.s.latest.Load()
	v := m.VolumeByID(k.vol)
	if v == nil || int(k.sg) >= len(v.SGs) {
		return m, 0, false
	}
	g := &v.SGs[k.sg]
	b := m.Brick(k.target)
	ok := g.Leader(m) == r.s.cfg.Name && slices.Contains(g.Syncing, k.target) && b != nil && b.State == clustermap.BrickUp
	return m, g.Since, ok
}

// still reports whether k still needs the rebuild started under since,
// and returns the newest map.
func (r *rebuilder) still(k rbKey, since uint64) (*clustermap.Map, error) {
	m, now, ok := r.needed(k)
	if !ok || now != since {
		return m, fmt.Errorf("volume %d stripe group %d member %s (since epoch %d): %w", k.vol, k.sg, k.target, since, errRebuildMoot)
	}
	return m, nil
}

// loop runs passes over k until one succeeds and is reported, or k is
// not needed any more. stored remembers the stripes this leader put on
// the target under Since storedUnder, so a retry skips them.
func (r *rebuilder) loop(k rbKey) {
	s := r.s
	defer s.wg.Done()
	defer func() {
		r.mu.Lock()
		delete(r.run, k)
		r.mu.Unlock()
	}()
	ctx := s.ctx()
	var stored map[stripeID]bool
	var storedUnder uint64
	for {
		m, since, ok := r.needed(k)
		if !ok {
			return
		}
		if stored == nil || storedUnder != since {
			stored, storedUnder = map[stripeID]bool{}, since
		}
		n, err := r.pass(ctx, k, m, since, stored)
		if err == nil {
			s.log.Info("stripe group member rebuilt; reporting it in sync", "vol", k.vol, "sg", k.sg, "target", k.target, "stripes", n, "since", since)
			err = s.cfg.Coord.Call(ctx, func(ctx context.Context, cl pb.CoordinatorClient) error {
				_, err := cl.SGSynced(ctx, &pb.SGSyncedRequest{Vol: k.vol, Sg: uint32(k.sg), Brick: k.target, Since: since, Leader: s.cfg.Name})
				return err
			})
			if err == nil {
				return
			}
		}
		delay := rebuildRetryDelay
		switch {
		case errors.Is(err, errStripesLost):
			delay = rebuildLossRetryDelay // logged per stripe already
		case errors.Is(err, errRebuildMoot):
			s.log.Info("stripe group rebuild abandoned", "vol", k.vol, "sg", k.sg, "target", k.target, "err", err)
		case ctx.Err() == nil:
			s.log.Warn("stripe group rebuild failed; retrying", "vol", k.vol, "sg", k.sg, "target", k.target, "err", err)
		}
		select {
		case <-s.stop:
			return
		case <-time.After(delay):
		}
	}
}

// rebuildGroup is what a pass knows of its group, fixed at its start.
type rebuildGroup struct {
	k       rbKey
	vol     *clustermap.Volume
	pos     int         // the target's position
	sources []int       // positions of in-sync members up at the start
	bricks  []string    // the group's members
	geo     ec.Geometry // of the profile and the volume's chunks
	coder   *ec.Coder   // of the profile
	since   uint64      // the group's Since the pass runs under
	stored  map[stripeID]bool
	mu      sync.Mutex // guards stored
}

// pass rebuilds every stripe of k's group on the target that this leader
// did not store there already under since, and checks afterwards that
// the target holds them all. It returns the number of stripes of the
// group.
func (r *rebuilder) pass(ctx context.Context, k rbKey, m *clustermap.Map, since uint64, stored map[stripeID]bool) (int, error) {
	g, err := r.group(k, m, since, stored)
	if err != nil {
		return 0, err
	}
	stripes, err := r.groupStripes(ctx, m, g)
	if err != nil {
		return 0, err
	}
	ids := make([]stripeID, 0, len(stripes))
	for id := range stripes {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b stripeID) int { return cmp.Or(cmp.Compare(a.chunk, b.chunk), cmp.Compare(a.seq, b.seq)) })
	theirs, err := r.inventory(ctx, m, g, k.target)
	if err != nil {
		return 0, err
	}
	todo := slices.DeleteFunc(slices.Clone(ids), func(id stripeID) bool { return stored[id] && theirs[id] >= stripes[id] })
	r.s.log.Info("stripe group rebuild pass", "vol", k.vol, "sg", k.sg, "target", k.target, "position", g.pos,
		"stripes", len(ids), "to_rebuild", len(todo), "since", since)
	if err := r.rebuildAll(ctx, g, todo, stripes); err != nil {
		return 0, err
	}
	// Check what the target holds now: a put may have been undone since
	// (an orphan sweep there that began before it joined again).
	if m, err = r.still(k, since); err != nil {
		return 0, err
	}
	if theirs, err = r.inventory(ctx, m, g, k.target); err != nil {
		return 0, err
	}
	for _, id := range ids {
		if theirs[id] < stripes[id] {
			g.mu.Lock()
			delete(g.stored, id)
			g.mu.Unlock()
			return 0, fmt.Errorf("after rebuild, %s holds %d of %d blocks of stripe %d (chunk %d)", k.target, theirs[id], stripes[id], id.seq, id.chunk)
		}
	}
	return len(ids), nil
}

// group fixes the pass's view of k's group in m.
func (r *rebuilder) group(k rbKey, m *clustermap.Map, since uint64, stored map[stripeID]bool) (*rebuildGroup, error) {
	v := m.VolumeByID(k.vol)
	sg := &v.SGs[k.sg] // needed checked both exist
	p := v.Profile(sg.Profile)
	if p == nil {
		return nil, fmt.Errorf("volume %s stripe group %d: profile %d missing from map epoch %d", v.Name, k.sg, sg.Profile, m.Epoch)
	}
	ep := ec.Profile{K: p.K, M: p.M}
	geo, err := ec.NewGeometry(ep, int(v.ChunkBytes))
	if err != nil {
		return nil, fmt.Errorf("volume %s stripe group %d: %w", v.Name, k.sg, err)
	}
	coder, err := r.s.coder(ep, geo.ChunkBytes())
	if err != nil {
		return nil, err
	}
	g := &rebuildGroup{k: k, vol: v, pos: slices.Index(sg.Bricks, k.target), bricks: slices.Clone(sg.Bricks), geo: geo, coder: coder, since: since, stored: stored}
	for i, b := range sg.Bricks {
		mb := m.Brick(b)
		if i != g.pos && !slices.Contains(sg.Syncing, b) && mb != nil && mb.State == clustermap.BrickUp {
			g.sources = append(g.sources, i)
		}
	}
	if len(g.sources) < p.K {
		return nil, fmt.Errorf("volume %s stripe group %d: %d in-sync members up, %d needed: %w", v.Name, k.sg, len(g.sources), p.K, errRebuildMoot)
	}
	return g, nil
}

// groupStripes lists the stripes the group's in-sync members hold, each
// with its blocks per shard: the most any member reports (a member
// reporting fewer lost blocks).
func (r *rebuilder) groupStripes(ctx context.Context, m *clustermap.Map, g *rebuildGroup) (map[stripeID]uint32, error) {
	out := map[stripeID]uint32{}
	for _, i := range g.sources {
		inv, err := r.inventory(ctx, m, g, g.bricks[i])
		if err != nil {
			return nil, err
		}
		for id, n := range inv {
			out[id] = max(out[id], n)
		}
	}
	return out, nil
}

// inventory returns the stripes member holds of g's group, with the
// blocks it holds of each.
func (r *rebuilder) inventory(ctx context.Context, m *clustermap.Map, g *rebuildGroup, member string) (map[stripeID]uint32, error) {
	cl, err := r.s.peers.client(m, member)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, rebuildRPCTimeout)
	defer cancel()
	st, err := cl.ShardInventory(ctx, &pb.ShardInventoryRequest{MapEpoch: m.Epoch, Vol: g.k.vol, Sg: uint32(g.k.sg)})
	if err != nil {
		return nil, fmt.Errorf("shard inventory of %s: %w", member, err)
	}
	out := map[stripeID]uint32{}
	for {
		resp, err := st.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("shard inventory of %s: %w", member, err)
		}
		for _, sb := range resp.Stripes {
			out[stripeID{sb.Chunk, sb.StripeSeq}] = sb.Blocks
		}
	}
}

// rebuildAll rebuilds the stripes of todo on g's target, a few at a time,
// checking before each that the group did not change. A stripe with fewer
// than K readable shards is logged and counted, and the others go on;
// any other failure ends the pass.
func (r *rebuilder) rebuildAll(ctx context.Context, g *rebuildGroup, todo []stripeID, blocks map[stripeID]uint32) error {
	eg, ectx := errgroup.WithContext(ctx) // goroutines: at most one per slot
	var done, lost atomic.Int64
	for _, id := range todo {
		if _, err := r.still(g.k, g.since); err != nil {
			_ = eg.Wait()
			return err
		}
		acquired := false
		select {
		case r.slots <- struct{}{}:
			acquired = true
		case <-ectx.Done():
		}
		if ectx.Err() != nil {
			if acquired {
				<-r.slots
			}
			break
		}
		eg.Go(func() error {
			defer func() { <-r.slots }()
			err := r.rebuildStripe(ectx, g, id, int(blocks[id]))
			if errors.Is(err, errStripesLost) {
				lost.Add(1)
				return nil
			}
			if err != nil {
				return err
			}
			if n := done.Add(1); n%rebuildLogEvery == 0 {
				r.s.log.Info("stripe group rebuild progress", "vol", g.k.vol, "sg", g.k.sg, "target", g.k.target, "rebuilt", n, "of", len(todo))
			}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if n := lost.Load(); n > 0 {
		return fmt.Errorf("volume %d stripe group %d: %d stripes: %w", g.k.vol, g.k.sg, n, errStripesLost)
	}
	return nil
}

// rebuildStripe reads the shards of stripe id (n blocks each) from the
// in-sync members, K at first and one more at a time while some block
// offset lacks K good blocks, reconstructs the target's position block
// offset by block offset (a source with a few bad blocks still counts
// where its blocks are good) and stores it there under the newest map.
// Memory: the shards read and the target's.
func (r *rebuilder) rebuildStripe(ctx context.Context, g *rebuildGroup, id stripeID, n int) error {
	k := g.geo.Profile().K
	ns := g.geo.Profile().Shards()
	shards, bad := make([][]byte, ns), make([][]uint32, ns)
	want := lostOnly(ns, g.pos)
	have, gone, next := 0, 0, 0
	var why []string
	for next < len(g.sources) {
		wave := g.sources[next:min(len(g.sources), next+max(1, k-have))]
		next += len(wave)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, i := range wave {
			wg.Go(func() {
				d, b, absent, err := r.readShard(ctx, g, i, id, n)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					why = append(why, err.Error())
				case absent:
					gone++
					why = append(why, fmt.Sprintf("%s holds none of it", g.bricks[i]))
				default:
					if len(b) > 0 {
						why = append(why, fmt.Sprintf("%s lacks or holds corrupt blocks %v", g.bricks[i], b))
					}
					shards[i], bad[i] = d, b
					have++
				}
			})
		}
		wg.Wait()
		if err := ctx.Err(); err != nil {
			return err
		}
		if have < k {
			continue
		}
		err := g.coder.ReconstructBlocks(shards, bad, n, want)
		if err == nil {
			break
		}
		if !errors.Is(err, ec.ErrTooFewShards) {
			return fmt.Errorf("stripe %d of chunk %d: %w", id.seq, id.chunk, err)
		}
		why = append(why, err.Error())
		shards[g.pos] = nil // rebuilt whole at the next try
	}
	if shards[g.pos] == nil {
		// Members holding none of it may also mean a deletion running
		// meanwhile (a coding step that failed and removes its shards):
		// the next pass no longer lists the stripe then.
		stripeRebuildFailures.Inc()
		r.s.log.Error("stripe unrecoverable: some block offset lacks K good blocks", "vol", g.k.vol, "sg", g.k.sg, "chunk", id.chunk, "stripe", id.seq,
			"readable", have, "k", k, "members_without_it", gone, "target", g.k.target, "position", g.pos, "why", why)
		return errStripesLost
	}
	data := shards[g.pos]
	clear(shards) // let the survivors go before the put
	m, err := r.still(g.k, g.since)
	if err != nil {
		return err
	}
	cl, err := r.s.peers.client(m, g.k.target)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, rebuildRPCTimeout)
	defer cancel()
	_, err = cl.ShardPut(pctx, &pb.ShardPutRequest{MapEpoch: m.Epoch, Vol: g.k.vol, Sg: uint32(g.k.sg), Shard: uint32(g.pos),
		Chunk: id.chunk, StripeSeq: id.seq, Data: data})
	if err != nil {
		return fmt.Errorf("shard %d of stripe %d (chunk %d) to %s: %w", g.pos, id.seq, id.chunk, g.k.target, err)
	}
	stripeRebuiltShards.Inc()
	g.mu.Lock()
	g.stored[id] = true
	g.mu.Unlock()
	return nil
}

// readShard reads the first n blocks of member i's shard of stripe id.
// absent says the member holds no block of it; bad lists the blocks it
// lacks or holds corrupt (the rest are usable).
func (r *rebuilder) readShard(ctx context.Context, g *rebuildGroup, i int, id stripeID, n int) (data []byte, bad []uint32, absent bool, err error) {
	m := r.s.latest.Load()
	member := g.bricks[i]
	cl, err := r.s.peers.client(m, member)
	if err != nil {
		return nil, nil, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, rebuildRPCTimeout)
	defer cancel()
	resp, err := cl.ShardRead(ctx, &pb.ShardReadRequest{MapEpoch: m.Epoch, Vol: g.k.vol, Sg: uint32(g.k.sg), Shard: uint32(i),
		Chunk: id.chunk, StripeSeq: id.seq, Blocks: uint32(n)})
	switch {
	case err != nil:
		return nil, nil, false, fmt.Errorf("shard read from %s: %w", member, err)
	case len(resp.Missing) == n:
		return nil, nil, true, nil
	case len(resp.Data) != n*limits.BlockBytes:
		return nil, nil, false, fmt.Errorf("shard read from %s: %d bytes, want %d", member, len(resp.Data), n*limits.BlockBytes)
	}
	return resp.Data, append(resp.Missing, resp.Corrupt...), false, nil
}
