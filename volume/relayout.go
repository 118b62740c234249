package volume

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// RelayoutStats is what Relayout did.
type RelayoutStats struct {
	Chunks      int64 // chunks asked about
	Coded       int64 // chunks that got a stripe
	Swapped     int64 // blocks now in stripes
	Changed     int64 // blocks written or decommitted during the relayout, left as they were
	StripeBytes int64 // shard bytes stored, all shards counted
}

// relayoutParallel is how many chunks Relayout asks primaries to code at
// once (each primary codes at most 4 at a time itself).
const relayoutParallel = 8

// Relayout moves the live data of [off, off+n) into stripes of the
// volume's profile (an id from EnsureProfile), chunk by chunk: the
// primary of each chunk's PG codes it, stores the shards on a stripe group
// of the profile and swaps each block that did not change meanwhile for a
// ref. Profile 0 moves coded blocks back home (each ref replaced by a put
// of its data). Reads see the same bytes throughout. progress (may be nil)
// is called after each chunk with the chunks done and the total.
func (v *Volume) Relayout(ctx context.Context, off, n uint64, profile uint16, progress func(done, total int64)) (RelayoutStats, error) {
	vol := v.Map().Volume(v.name)
	if vol != nil && vol.Profile(profile) == nil && profile != 0 {
		if err := v.refresh(ctx, 0); err != nil { // the profile may be newer than our map
			return RelayoutStats{}, err
		}
		vol = v.Map().Volume(v.name)
	}
	if vol == nil {
		return RelayoutStats{}, fmt.Errorf("volume %s: %w", v.name, ErrNoVolume)
	}
	if profile != 0 && vol.Profile(profile) == nil {
		return RelayoutStats{}, fmt.Errorf("volume %s: relayout: no profile %d (EnsureProfile first)", v.name, profile)
	}
	if n == 0 {
		return RelayoutStats{}, nil
	}
	if off+n < off && off+n != 0 {
		return RelayoutStats{}, fmt.Errorf("%w: relayout at %d length %d", ErrRange, off, n)
	}
	cb := uint64(vol.ChunkBytes)
	first, last := off/cb, (off+n-1)/cb
	total := int64(last - first + 1)
	var st RelayoutStats
	var mu sync.Mutex
	var done atomic.Int64
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(relayoutParallel)
	for c := first; ; c++ {
		g.Go(func() error {
			var r *pb.RelayoutResponse
			err := v.retry(ctx, func(ctx context.Context, m *clustermap.Map, vol *clustermap.Volume) error {
				pg := clustermap.PGOfChunk(vol.ID, c, len(vol.PGs))
				cl, err := v.brick(m, vol.PGs[pg].Primary())
				if err != nil {
					return err
				}
				r, err = cl.Relayout(ctx, &pb.RelayoutRequest{MapEpoch: m.Epoch, Vol: vol.ID, Pg: pg, Chunk: c, Profile: uint32(profile)})
				return err
			})
			if err != nil {
				return fmt.Errorf("relayout chunk %d: %w", c, err)
			}
			mu.Lock()
			st.Chunks++
			if r.Swapped > 0 {
				st.Coded++
			}
			st.Swapped += int64(r.Swapped)
			st.Changed += int64(r.Changed)
			st.StripeBytes += r.StripeBytes
			mu.Unlock()
			if progress != nil {
				progress(done.Add(1), total)
			}
			return nil
		})
		if c == last {
			break
		}
	}
	err := g.Wait()
	return st, err
}
