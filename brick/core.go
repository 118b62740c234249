package brick

import (
	"context"
	"time"

	"github.com/plumeria-fs/plumeria/internal/pb"
)

// The replication core (brick/repl.Core) decides; this file carries out the
// background work it asks for (repl.Ready): fault reports to the
// coordinator, reconciliations of PGs this brick took the lead of, and
// backfills of syncing members. coreLoop ticks the core's clock and drains
// its Ready; request handlers that change the core's state kick it.
//
// A PG is faulty at its primary when a member failed to apply a change the
// primary (and maybe other members) applied. Until the map shows each such
// member as syncing or gone, the primary refuses the PG's requests: a retry
// must not succeed while a replica that may later lead lacks the change.
// The member may be the primary itself (its own apply failed, say its disk
// is full, while a backup applied the change): it then hands the lead to an
// in-sync member that has the change and is backfilled from it, so reads
// never see the change come and go with the primary.

// coreTick is how often coreLoop advances the core's clock.
const coreTick = 50 * time.Millisecond

func (s *Server) coreLoop() {
	defer s.wg.Done()
	t := time.NewTicker(coreTick)
	defer t.Stop()
	for {
		s.pgMu.Lock()
		s.core.Tick(time.Now().UnixNano())
		rd := s.core.Ready()
		s.core.Advance()
		s.pgMu.Unlock()
		for _, r := range rd.Reports {
			s.startReport(r.PG, r.Bricks)
		}
		if len(rd.Reconcile) > 0 {
			s.startReconciles()
		}
		for _, b := range rd.Backfills {
			s.startBackfill(bfKey{b.PG, b.Target})
		}
		select {
		case <-s.stop:
			return
		case <-t.C:
		case <-s.coreKick:
		}
	}
}

// kickCore makes coreLoop drain the core's Ready now.
func (s *Server) kickCore() {
	select {
	case s.coreKick <- struct{}{}:
	default:
	}
}

// startReport reports, in order, the members of k that missed a change,
// unless a report for k still runs (the core offers it again every
// repl.FaultReportRetry until the map resolves the fault).
func (s *Server) startReport(k pgKey, bricks []string) {
	s.pgMu.Lock()
	if s.reporting[k] {
		s.pgMu.Unlock()
		return
	}
	s.reporting[k] = true
	s.pgMu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.pgMu.Lock()
			delete(s.reporting, k)
			s.pgMu.Unlock()
		}()
		for _, b := range bricks {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := s.replicaFailed(ctx, k, b)
			cancel()
			if err != nil {
				s.log.Warn("report failed replica", "vol", k.Vol, "pg", k.PG, "brick", b, "err", err)
				return // in order: the core offers it again
			}
		}
	}()
}

// reportReplicaFailed asks the coordinator to mark brick syncing in k.
func (s *Server) reportReplicaFailed(ctx context.Context, k pgKey, brick string) error {
	return s.cfg.Coord.Call(ctx, func(ctx context.Context, cl pb.CoordinatorClient) error {
		_, err := cl.ReplicaFailed(ctx, &pb.ReplicaFailedRequest{Vol: k.Vol, Pg: k.PG, Brick: brick, Primary: s.cfg.Name})
		return err
	})
}
