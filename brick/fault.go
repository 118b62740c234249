package brick

import (
	"cmp"
	"context"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// A PG is faulty at its primary when a member failed to apply a change the
// primary (and maybe other members) applied. Until the map shows each such
// member as syncing or gone, the primary refuses the PG's requests: a retry
// must not succeed while a replica that may later lead lacks the change.
// The member may be the primary itself (its own apply failed, say its disk
// is full, while a backup applied the change): it then hands the lead to an
// in-sync member that has the change and is backfilled from it, so reads
// never see the change come and go with the primary.

const faultReportRetry = 200 * time.Millisecond

// fault is a member that missed a change while the PG's Since was since.
// It is resolved once the member is gone, or syncing under a newer Since
// (a backfill pass that starts after the miss).
type fault struct {
	brick string
	since uint64
}

// markFault records failed members of a PG and reports them.
func (s *Server) markFault(k pgKey, since uint64, failed []string) {
	s.pgMu.Lock()
	cur := s.pgFault[k]
	for _, b := range failed {
		if !slices.Contains(cur, fault{b, since}) {
			cur = append(cur, fault{b, since})
		}
	}
	s.pgFault[k] = cur
	s.startReportLocked(k)
	s.pgMu.Unlock()
}

// startReportLocked starts reporting k's fault unless that runs already.
// The caller holds pgMu.
func (s *Server) startReportLocked(k pgKey) {
	if s.pgFaultReporting[k] {
		return
	}
	s.pgFaultReporting[k] = true
	s.wg.Add(1)
	go s.reportFault(k)
}

// faultResolved reports whether every failed member of k is syncing under
// a newer Since (a backfill pass that starts after the miss) or no longer a
// member in m, clearing the fault if so; otherwise it lists the members
// left: the PG must not serve until they are.
func (s *Server) faultResolved(m *clustermap.Map, k pgKey) (left []string, ok bool) {
	s.pgMu.Lock()
	defer s.pgMu.Unlock()
	failed := s.pgFault[k]
	if len(failed) == 0 {
		return nil, true
	}
	v := m.VolumeByID(k.vol)
	if v == nil || int(k.pg) >= len(v.PGs) {
		return []string{failed[0].brick}, false
	}
	p := v.PGs[k.pg]
	var rest []fault
	for _, f := range failed {
		if f.brick == s.cfg.Name && p.Primary() == s.cfg.Name && len(p.InSync()) == 1 {
			// This brick missed a change others applied, but none of
			// them is in sync any more: they are backfilled from here.
			continue
		}
		if slices.Contains(p.Bricks, f.brick) && (!slices.Contains(p.Syncing, f.brick) || p.Since <= f.since) {
			rest = append(rest, f)
			left = append(left, f.brick)
		}
	}
	if len(rest) == 0 {
		delete(s.pgFault, k)
		return nil, true
	}
	s.pgFault[k] = rest
	return left, false
}

// checkFault refuses requests of a faulty PG under the serving map m. A
// fault recorded while this brick led the PG, and still unresolved now that
// it leads it again, is reported again: its member must be resynced before
// the PG serves (reporting stopped when this brick stopped leading).
func (s *Server) checkFault(m *clustermap.Map, v *clustermap.Volume, pg uint32) error {
	k := pgKey{v.ID, pg}
	if left, ok := s.faultResolved(m, k); !ok {
		s.pgMu.Lock()
		s.startReportLocked(k)
		s.pgMu.Unlock()
		return status.Errorf(codes.Unavailable, "volume %s pg %d: replicas %v missed a change and are being resynced; retry", v.Name, pg, left)
	}
	return nil
}

// reportFault asks the coordinator to mark the failed members syncing,
// until the serving map shows they are (or this brick no longer leads).
func (s *Server) reportFault(k pgKey) {
	defer s.wg.Done()
	defer func() {
		s.pgMu.Lock()
		delete(s.pgFaultReporting, k)
		s.pgMu.Unlock()
	}()
	for {
		m := s.serving.Load()
		left, ok := s.faultResolved(m, k)
		v := m.VolumeByID(k.vol)
		if ok || v == nil || int(k.pg) >= len(v.PGs) || v.PGs[k.pg].Primary() != s.cfg.Name {
			return
		}
		// This brick last: the coordinator hands the lead to the next
		// member in sync, which must not be one that missed the change.
		slices.SortStableFunc(left, func(a, b string) int {
			return cmp.Compare(boolInt(a == s.cfg.Name), boolInt(b == s.cfg.Name))
		})
		for _, b := range left {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := s.replicaFailed(ctx, k, b)
			cancel()
			if err != nil {
				s.log.Warn("report failed replica", "vol", k.vol, "pg", k.pg, "brick", b, "err", err)
				break // in order: try again
			}
		}
		select {
		case <-s.stop:
			return
		case <-time.After(faultReportRetry):
		}
	}
}

// reportReplicaFailed asks the coordinator to mark brick syncing in k.
func (s *Server) reportReplicaFailed(ctx context.Context, k pgKey, brick string) error {
	return s.cfg.Coord.Call(ctx, func(ctx context.Context, cl pb.CoordinatorClient) error {
		_, err := cl.ReplicaFailed(ctx, &pb.ReplicaFailedRequest{Vol: k.vol, Pg: k.pg, Brick: brick, Primary: s.cfg.Name})
		return err
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
