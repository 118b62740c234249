package volume

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// Layout returns the live blocks (of limits.BlockBytes) of [off, off+n)
// by where their data is: profile id 0 for the volume's own replication,
// else the profile (clustermap.Profile) of the stripes that hold them.
// Absent and decommitted blocks are not counted; a block only partly in
// the range counts whole. Each PG's primary counts from its index, without
// stopping writes: a snapshot of the layout, not of the data.
func (v *Volume) Layout(ctx context.Context, off, n uint64) (map[uint16]int64, error) {
	out := map[uint16]int64{}
	if n == 0 {
		return out, nil
	}
	if off+n < off && off+n != 0 {
		return nil, fmt.Errorf("%w: layout at %d length %d", ErrRange, off, n)
	}
	vol := v.Map().Volume(v.name)
	if vol == nil {
		return nil, fmt.Errorf("volume %s: %w", v.name, ErrNoVolume)
	}
	var mu sync.Mutex
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, pg := range decommitPGs(vol, off, n) {
		g.Go(func() error {
			var r *pb.LayoutResponse
			err := v.retry(ctx, func(ctx context.Context, m *clustermap.Map, vol *clustermap.Volume) error {
				cl, err := v.brick(m, vol.PGs[pg].Primary())
				if err != nil {
					return err
				}
				r, err = cl.Layout(ctx, &pb.LayoutRequest{MapEpoch: m.Epoch, Vol: vol.ID, Pg: uint32(pg), Offset: off, Length: n})
				return err
			})
			if err != nil {
				return fmt.Errorf("layout of pg %d: %w", pg, err)
			}
			mu.Lock()
			for _, p := range r.Profiles {
				if p.Profile <= 0xffff {
					out[uint16(p.Profile)] += p.Blocks
				}
			}
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}
