package brick

import (
	"context"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/plumeria-fs/plumeria/brick/store"
	"github.com/plumeria-fs/plumeria/clustermap"
)

// Orphaned shards: a brick replaced in a stripe group while it was down
// still holds that group's shards when it comes back. It drops them once
// the group is healthy without it (every member up, none syncing): until
// then they may be the last copy that lets a stripe be rebuilt.

var orphanShardsRemoved = promauto.NewCounter(prometheus.CounterOpts{Name: "plumeria_brick_orphan_shard_blocks_removed_total",
	Help: "Shard blocks removed because this brick no longer belongs to their stripe group."})

// shardVolOf splits a store volume id of shards (shardVol) into its
// volume and stripe group; ok is false for other ids.
func shardVolOf(key uint64) (vol uint64, sg uint16, ok bool) {
	const sgBits = 16
	if key&shardVolBit == 0 || key>>(40+sgBits) != shardVolBit>>(40+sgBits) {
		return 0, 0, false
	}
	return key & (clustermap.ShardVolMax - 1), uint16(key >> 40), true
}

func (s *Server) collectShardOrphans() {
	keys, err := s.store.Vols()
	if err != nil {
		s.log.Warn("list store volumes for orphaned shards", "err", err)
		return
	}
	for _, key := range keys {
		vol, sg, ok := shardVolOf(key)
		if ok && s.shardsOrphaned(s.latest.Load(), vol, sg) {
			s.dropShards(key, vol, sg)
		}
	}
}

// shardsOrphaned reports whether this brick may drop its shards of stripe
// group sg of vol: it is not a member, and every member is up and in sync.
// An unknown volume or group keeps them (volume deletion does not exist
// yet).
func (s *Server) shardsOrphaned(m *clustermap.Map, vol uint64, sg uint16) bool {
	v := m.VolumeByID(vol)
	if v == nil || int(sg) >= len(v.SGs) {
		return false
	}
	g := &v.SGs[sg]
	if slices.Contains(g.Bricks, s.cfg.Name) || len(g.Syncing) > 0 {
		return false
	}
	for _, b := range g.Bricks {
		if bb := m.Brick(b); bb == nil || bb.State != clustermap.BrickUp {
			return false
		}
	}
	return true
}

// dropShards removes the blocks under store volume key in batches, each
// after checking the newest map again. A shard write (ShardPut) installs
// its map before storing, so once this brick is a member again no later
// batch runs; a batch read just before that may still remove a block the
// new membership stored, which the rebuild's final inventory check finds
// (rebuild.go).
func (s *Server) dropShards(key, vol uint64, sg uint16) {
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		if !s.shardsOrphaned(s.latest.Load(), vol, sg) {
			return
		}
		var ops []store.Op
		err := s.store.Scan(key, 0, 1<<64-1, func(e store.Entry) bool {
			ops = append(ops, store.Op{Kind: store.OpRemove, Key: e.Key, Seq: e.Seq})
			return len(ops) < orphanBatchOps
		})
		if err == nil && len(ops) > 0 {
			err = s.store.ApplyReserved(context.Background(), ops) // freeing space must work on a full brick
		}
		if err != nil {
			s.log.Warn("drop orphaned shards", "vol", vol, "sg", sg, "err", err)
			return
		}
		if len(ops) == 0 {
			return
		}
		orphanShardsRemoved.Add(float64(len(ops)))
		s.log.Debug("dropped orphaned shard blocks", "vol", vol, "sg", sg, "blocks", len(ops))
	}
}
