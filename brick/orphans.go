package brick

import (
	"context"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/plumeria-fs/plumeria/brick/store"
	"github.com/plumeria-fs/plumeria/clustermap"
)

const (
	orphanEvery    = 30 * time.Second
	orphanBatchOps = 512
)

var orphansRemoved = promauto.NewCounter(prometheus.CounterOpts{Name: "plumeria_brick_orphan_blocks_removed_total",
	Help: "Blocks removed because this brick no longer belongs to their placement group."})

// orphanLoop periodically frees blocks of placement groups this brick was
// moved out of (drain, rebalance, replaced while down), and shards of
// stripe groups it left (shardorphans.go).
func (s *Server) orphanLoop() {
	defer s.wg.Done()
	t := time.NewTicker(orphanEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.collectOrphans()
		s.collectShardOrphans()
	}
}

// orphaned reports whether this brick may drop its copy of a PG: it is not
// a member, and the PG is healthy without it (every member up and in sync,
// at full count), so the copy is not somebody's last hope.
func (s *Server) orphaned(m *clustermap.Map, vol uint64, pg uint32) bool {
	v := m.VolumeByID(vol)
	if v == nil || int(pg) >= len(v.PGs) {
		return false // unknown: keep (volume deletion does not exist yet)
	}
	p := v.PGs[pg]
	if slices.Contains(p.Bricks, s.cfg.Name) || len(p.Syncing) > 0 || len(p.InSync()) < v.Replicas {
		return false
	}
	for _, b := range p.Bricks {
		if bb := m.Brick(b); bb == nil || bb.State != clustermap.BrickUp {
			return false
		}
	}
	return true
}

func (s *Server) collectOrphans() {
	m := s.latest.Load()
	for _, v := range m.Volumes {
		for pg := range v.PGs {
			if s.orphaned(m, v.ID, uint32(pg)) {
				s.dropPG(v.ID, uint32(pg))
			}
		}
	}
}

// dropPG removes the PG's blocks in batches, each under the PG lock with
// membership re-checked against the newest map: requests from a primary
// (Replicate, Backfill, Inventory) install their map before taking the
// lock, so a brick that just joined the PG again never loses what it is sent.
func (s *Server) dropPG(vol uint64, pg uint32) {
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		unlock := s.lockPG(pgKey{Vol: vol, PG: pg})
		m := s.latest.Load()
		if !s.orphaned(m, vol, pg) {
			unlock()
			return
		}
		entries, err := s.pgEntries(m.VolumeByID(vol), pg)
		if err != nil || len(entries) == 0 {
			unlock()
			return
		}
		entries = entries[:min(len(entries), orphanBatchOps)]
		ops := make([]store.Op, len(entries))
		for i, e := range entries {
			ops[i] = store.Op{Kind: store.OpRemove, Key: e.Key, Seq: e.Seq}
		}
		err = s.store.Apply(context.Background(), ops)
		unlock()
		if err != nil {
			s.log.Warn("drop orphaned pg", "vol", vol, "pg", pg, "err", err)
			return
		}
		orphansRemoved.Add(float64(len(ops)))
		s.log.Debug("dropped orphaned blocks", "vol", vol, "pg", pg, "blocks", len(ops))
	}
}
