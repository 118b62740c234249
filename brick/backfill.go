package brick

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/plumeria-fs/plumeria/brick/store"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

const (
	backfillBatchOps   = 256
	backfillRetryDelay = time.Second
)

// startBackfill starts a backfill of k's target (the core asks for one for
// every syncing member of a PG this brick leads), unless one runs already.
func (s *Server) startBackfill(k bfKey) {
	s.bf.Lock()
	if s.bf.running[k] {
		s.bf.Unlock()
		return
	}
	s.bf.running[k] = true
	s.bf.Unlock()
	s.wg.Add(1)
	go s.backfillLoop(k)
}

// stillNeeded reports whether this brick still leads k's PG and k's target
// is still syncing, in the serving map: the map the PG's writes are
// forwarded under. A pass must run under a map in which the target is a
// member, with the Since it reports (PGSynced): the coordinator accepts the
// report only if the PG did not change since, so every write during the
// pass went to the target. Under the newest map instead, a pass could
// complete while writes still ran under an older serving map without the
// target (found by the replication simulator: a member marked in sync
// without writes made during its pass).
func (s *Server) stillNeeded(k bfKey) (*clustermap.Map, bool) {
	m := s.serving.Load()
	v := m.VolumeByID(k.Vol)
	if v == nil || int(k.PG) >= len(v.PGs) {
		return m, false
	}
	p := v.PGs[k.PG]
	return m, p.Primary() == s.cfg.Name && slices.Contains(p.Syncing, k.target)
}

func (s *Server) backfillLoop(k bfKey) {
	defer s.wg.Done()
	defer func() {
		s.bf.Lock()
		delete(s.bf.running, k)
		s.bf.Unlock()
	}()
	ctx := s.ctx()
	for {
		if _, ok := s.stillNeeded(k); !ok {
			return
		}
		n, since, err := s.backfill(ctx, k)
		if err == nil {
			s.log.Info("backfill done", "vol", k.Vol, "pg", k.PG, "target", k.target, "blocks", n)
			err = s.cfg.Coord.Call(ctx, func(ctx context.Context, cl pb.CoordinatorClient) error {
				_, err := cl.PGSynced(ctx, &pb.PGSyncedRequest{Vol: k.Vol, Pg: k.PG, Brick: k.target, Since: since, Primary: s.cfg.Name})
				return err
			})
			if err == nil {
				return
			}
		}
		if !errors.Is(err, errStopped) {
			s.log.Warn("backfill failed; retrying", "vol", k.Vol, "pg", k.PG, "target", k.target, "err", err)
		}
		select {
		case <-s.stop:
			return
		case <-time.After(backfillRetryDelay):
		}
	}
}

// backfill brings one syncing member of a PG up to this primary's state:
// take the primary's inventory and horizon under the PG lock (writes after
// it reach the target by forwarding), ask the target for its inventory,
// and send the difference. Each batch goes out under the brick's newest
// map; the loop stops if this brick no longer leads the PG.
func (s *Server) backfill(ctx context.Context, k bfKey) (sent int64, since uint64, err error) {
	m, ok := s.stillNeeded(k)
	if !ok {
		return 0, 0, errors.New("backfill no longer needed")
	}
	v := m.VolumeByID(k.Vol)
	since = v.PGs[k.PG].Since
	sent, err = s.sendBackfill(ctx, k, m, v)
	return sent, since, err
}

func (s *Server) sendBackfill(ctx context.Context, k bfKey, m *clustermap.Map, v *clustermap.Volume) (int64, error) {
	unlock := s.lockPG(k.pgKey)
	horizon := s.horizon(k.pgKey)
	mine, err := s.pgEntries(v, k.PG)
	unlock()
	if err != nil {
		return 0, fmt.Errorf("own inventory: %w", err)
	}
	cl, err := s.peers.client(m, k.target)
	if err != nil {
		return 0, err
	}
	theirs, err := inventory(ctx, cl, &pb.InventoryRequest{MapEpoch: m.Epoch, Vol: k.Vol, Pg: k.PG})
	if err != nil {
		return 0, fmt.Errorf("inventory of %s: %w", k.target, err)
	}
	sent, err := pushDiff(mine, theirs, func(keys []store.Key) (int64, error) {
		return s.backfillBatch(ctx, k, v, keys, theirs, horizon)
	})
	if err != nil {
		return sent, err
	}
	select {
	case <-s.stop:
		return sent, errStopped
	default:
	}
	return sent, nil
}

// backfillBatch sends the current state of keys to the target while holding
// the PG's lock, so no write or decommit of the PG is forwarded between the
// read of a block here and its arrival there.
func (s *Server) backfillBatch(ctx context.Context, k bfKey, v *clustermap.Volume, keys []store.Key, theirs map[store.Key]uint64, horizon uint64) (int64, error) {
	unlock := s.lockPG(k.pgKey)
	defer unlock()
	m, ok := s.stillNeeded(k)
	if !ok {
		return 0, fmt.Errorf("no longer primary of pg %d or %s no longer syncing", k.PG, k.target)
	}
	return s.pushKeys(ctx, m, v, k.pgKey, k.target, keys, theirs, horizon)
}

// pushKeys sends this brick's copies of keys to target as one backfill
// batch under horizon (keys this brick no longer holds go as REMOVE with
// the seq target reported in theirs). The caller holds the PG's lock.
func (s *Server) pushKeys(ctx context.Context, m *clustermap.Map, v *clustermap.Volume, k pgKey, target string, keys []store.Key, theirs map[store.Key]uint64, horizon uint64) (int64, error) {
	var ops []store.Op
	for _, key := range keys {
		data, cur, err := s.store.Get(key)
		switch {
		case errors.Is(err, store.ErrNotFound):
			if seq, only := theirs[key]; only {
				ops = append(ops, store.Op{Kind: store.OpRemove, Key: key, Seq: seq})
			}
			continue
		case errors.Is(err, store.ErrCorrupt):
			op, err := s.repair(ctx, m, v, &v.PGs[k.PG], key)
			if err != nil {
				return 0, err
			}
			ops = append(ops, op)
			continue
		case err != nil:
			return 0, fmt.Errorf("read %v: %w", key, err)
		}
		ops = append(ops, entryOp(key, cur, data))
	}
	if len(ops) == 0 {
		return 0, nil
	}
	cl, err := s.peers.client(m, target)
	if err != nil {
		return 0, err
	}
	bctx, cancel := context.WithTimeout(ctx, replicateTimeout)
	defer cancel()
	_, err = cl.Backfill(bctx, &pb.BackfillRequest{MapEpoch: m.Epoch, Vol: k.Vol, Pg: k.PG, Primary: s.cfg.Name, Ops: toPB(ops), Horizon: horizon})
	if err != nil {
		return 0, fmt.Errorf("backfill to %s: %s", target, errMsg(err))
	}
	backfilled.Add(float64(len(ops)))
	return int64(len(ops)), nil
}

// entryOp is the op that stores, at another brick, the entry e this
// brick read with data (a put's block, a ref's payload: a ref is sent as
// the ref it is).
func entryOp(key store.Key, e store.Entry, data []byte) store.Op {
	switch {
	case e.Tombstone:
		return store.Op{Kind: store.OpTombstone, Key: key, Seq: e.Seq}
	case e.Ref:
		return store.Op{Kind: store.OpRef, Key: key, Seq: e.Seq, Ref: data}
	}
	return store.Op{Kind: store.OpPut, Key: key, Seq: e.Seq, Data: data}
}

// pushDiff sends, through send in batches of at most backfillBatchOps,
// the keys whose copy at a peer (theirs: key -> seq, from its inventory)
// differs from mine: another seq, or held by one side only. A seq names
// one change, so a ref and the put it replaced never share one (the swap
// to a ref is a change of its own, swapToRefs). It deletes
// from theirs every key mine holds, leaving the keys only the peer holds
// (send turns those it no longer finds here into REMOVEs).
func pushDiff(mine []store.Entry, theirs map[store.Key]uint64, send func(keys []store.Key) (int64, error)) (int64, error) {
	var keys []store.Key
	for _, e := range mine {
		if seq, ok := theirs[e.Key]; !ok || seq != e.Seq {
			keys = append(keys, e.Key)
		}
		delete(theirs, e.Key)
	}
	for key := range theirs {
		keys = append(keys, key)
	}
	var sent int64
	for len(keys) > 0 {
		n := min(len(keys), backfillBatchOps)
		done, err := send(keys[:n])
		sent += done
		if err != nil {
			return sent, err
		}
		keys = keys[n:]
	}
	return sent, nil
}

func inventory(ctx context.Context, cl pb.BrickClient, r *pb.InventoryRequest) (map[store.Key]uint64, error) {
	out := map[store.Key]uint64{}
	err := pb.ReadInventory(ctx, cl, r, func(e *pb.InventoryEntry) {
		out[store.Key{Vol: r.Vol, Block: e.Block, Gen: e.Gen}] = e.Seq
	})
	return out, err
}
