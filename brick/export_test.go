package brick

import (
	"context"
	"time"

	"github.com/plumeria-fs/plumeria/brick/store"
)

// Exported for the tests of package brick_test.

// RefSwap is refSwap.
type RefSwap = refSwap

// NewRefSwap returns the swap of block at gen, read with seq, to ref.
func NewRefSwap(block, gen, seq uint64, ref []byte) RefSwap {
	return refSwap{block: block, gen: gen, seq: seq, ref: ref}
}

// SwapToRefs is swapToRefs.
func (s *Server) SwapToRefs(ctx context.Context, vol uint64, pg uint32, blocks []RefSwap) (int, error) {
	return s.swapToRefs(ctx, vol, pg, blocks, time.Time{})
}

// Repair runs repair of key (of PG pg) under the serving map: the key is
// fetched from another in-sync member and rewritten here.
func (s *Server) Repair(ctx context.Context, pg uint32, key store.Key) (store.Op, error) {
	m := s.serving.Load()
	v := m.VolumeByID(key.Vol)
	return s.repair(ctx, m, v, &v.PGs[pg], key)
}

// DropStripeCache forgets the shards this brick cached, so the next read
// of a coded block fetches (or rebuilds) its shard.
func (s *Server) DropStripeCache() { s.stripes = newStripeCache(stripeCacheBytes) }

// SweepStripes runs one sweep of the stripe collector now (stripegc.go)
// and returns the stripes it deleted.
func (s *Server) SweepStripes(ctx context.Context) int { return s.sweepStripes(ctx) }

// SetStripeGCGrace sets the collector's grace (Config.StripeGCGrace);
// a coding step at this brick then swaps within half of it.
func (s *Server) SetStripeGCGrace(d time.Duration) { s.gc.grace.Store(int64(d)) }

// CountEntry is countEntry: the profile counts of block version e as a
// layout scan found it.
func (s *Server) CountEntry(vol uint64, e store.Entry) (map[uint16]int64, error) {
	counts := map[uint16]int64{}
	err := s.countEntry(s.serving.Load().VolumeByID(vol), e, counts)
	return counts, err
}
