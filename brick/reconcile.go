package brick

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/brick/repl"
	"github.com/plumeria-fs/plumeria/brick/store"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// Reconciliation when a brick takes the lead of a PG.
//
// A primary acknowledges a change only once every member applied it, but a
// change it failed may have reached some members and not others, and the
// record of which member missed it (fault.go) lives in that primary's
// memory: if it dies or is cut off before reporting it, nobody resyncs the
// member that missed it, and the in-sync members differ on a block that no
// acknowledged write changed (a later failover would change what reads
// see). So a brick that takes the lead of a PG (a new pgLead epoch,
// including its first map after a start) makes every other in-sync member
// hold exactly what it holds before it serves the PG: it compares
// inventories and sends the difference as a backfill under its horizon
// (below every seq it assigns from now on), so its copy wins over anything
// older. A member it cannot reconcile is reported as having missed a change
// (it becomes syncing and is backfilled); the PG refuses requests meanwhile.
// The new primary was in sync, so it applied every acknowledged change:
// only unacknowledged ones are dropped or spread, and from then on every
// in-sync member answers alike.

const reconcileRetry = 500 * time.Millisecond

// horizon is the backfill horizon of a PG this brick leads (repl.Core.Horizon).
func (s *Server) horizon(k pgKey) uint64 {
	s.pgMu.Lock()
	defer s.pgMu.Unlock()
	return s.core.Horizon(k)
}

// needsReconcile reports whether k's current lead has not been reconciled.
func (s *Server) needsReconcile(k pgKey) (lead uint64, need bool) {
	s.pgMu.Lock()
	defer s.pgMu.Unlock()
	return s.core.NeedsReconcile(k)
}

// ensureReconciled reconciles PG pg of v under the serving map m, unless
// that was done for the current lead (checked again under the PG's lock:
// another request may have done it meanwhile). The caller holds mapMu
// shared and has checked that this brick leads the PG (checkPrimary).
func (s *Server) ensureReconciled(ctx context.Context, m *clustermap.Map, v *clustermap.Volume, pg uint32, p *clustermap.PG) error {
	k := pgKey{Vol: v.ID, PG: pg}
	unlock := s.lockPG(k)
	defer unlock()
	lead, need := s.needsReconcile(k)
	if !need {
		return nil
	}
	missed, err := s.reconcile(ctx, m, v, pg, p)
	if err != nil {
		return status.Errorf(codes.Unavailable, "brick %s: new primary of volume %s pg %d cannot reconcile its replicas yet: %v; retry", s.cfg.Name, v.Name, pg, err)
	}
	s.pgMu.Lock()
	s.core.Reconciled(k, lead, p.Since, missed)
	s.pgMu.Unlock()
	if len(missed) > 0 {
		s.kickCore()
	}
	return nil
}

// reconcile makes every other in-sync member of the PG hold what this brick
// holds. It returns the members that could not be reached or refused: they
// count as having missed a change. The caller holds the PG's lock.
func (s *Server) reconcile(ctx context.Context, m *clustermap.Map, v *clustermap.Volume, pg uint32, p *clustermap.PG) (missed []string, err error) {
	k := pgKey{Vol: v.ID, PG: pg}
	horizon := s.horizon(k)
	mine, err := s.pgEntries(v, pg)
	if err != nil {
		return nil, fmt.Errorf("own inventory: %w", err)
	}
	for _, b := range p.InSync() {
		if b == s.cfg.Name {
			continue
		}
		n, err := s.reconcileMember(ctx, m, v, k, b, mine, horizon)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			s.log.Warn("cannot reconcile an in-sync replica; it will be resynced", "vol", v.Name, "pg", pg, "target", b, "err", err)
			missed = append(missed, b)
			continue
		}
		if n > 0 {
			reconciled.Add(float64(n))
			s.log.Info("reconciled an in-sync replica with the new primary", "vol", v.Name, "pg", pg, "target", b, "blocks", n)
		}
	}
	return missed, nil
}

// reconcileMember sends target the difference between its copy of the PG
// and mine (this brick's entries).
func (s *Server) reconcileMember(ctx context.Context, m *clustermap.Map, v *clustermap.Volume, k pgKey, target string, mine []store.Entry, horizon uint64) (int64, error) {
	cl, err := s.peers.client(m, target)
	if err != nil {
		return 0, err
	}
	ictx, cancel := context.WithTimeout(ctx, replicateTimeout)
	theirs, err := inventory(ictx, cl, &pb.InventoryRequest{MapEpoch: m.Epoch, Vol: k.Vol, Pg: k.PG})
	cancel()
	if err != nil {
		return 0, fmt.Errorf("inventory of %s: %w", target, err)
	}
	return pushDiff(mine, theirs, func(keys []store.Key) (int64, error) {
		return s.pushKeys(ctx, m, v, k, target, keys, theirs, horizon)
	})
}

// startReconciles reconciles, in the background, the PGs this brick took
// the lead of, so that an idle PG's replicas agree too (requests reconcile
// their PG first themselves). One loop runs at a time; it retries until
// every PG this brick leads is reconciled or the brick stops.
func (s *Server) startReconciles() {
	s.pgMu.Lock()
	if s.reconciling {
		s.reconcileAgain = true
		s.pgMu.Unlock()
		return
	}
	s.reconciling = true
	s.pgMu.Unlock()
	s.wg.Add(1)
	go s.reconcileLoop()
}

func (s *Server) reconcileLoop() {
	defer s.wg.Done()
	for {
		left := s.reconcileLed()
		s.pgMu.Lock()
		if left == 0 && !s.reconcileAgain {
			s.reconciling = false
			s.pgMu.Unlock()
			return
		}
		s.reconcileAgain = false
		s.pgMu.Unlock()
		select {
		case <-s.stop:
			s.pgMu.Lock()
			s.reconciling = false
			s.pgMu.Unlock()
			return
		case <-time.After(reconcileRetry):
		}
	}
}

// reconcileLed tries to reconcile every PG this brick leads and returns how
// many are left (not yet allowed to serve, or failed). Each PG is
// reconciled under the serving map of that moment, holding mapMu shared for
// that PG only, so a map install waits for one PG at most.
func (s *Server) reconcileLed() (left int) {
	var todo []pgKey
	for _, v := range s.serving.Load().Volumes {
		for i, p := range v.PGs {
			k := pgKey{Vol: v.ID, PG: uint32(i)}
			if _, need := s.needsReconcile(k); need && p.Primary() == s.cfg.Name {
				todo = append(todo, k)
			}
		}
	}
	for _, k := range todo {
		select {
		case <-s.stop:
			return left + 1
		default:
		}
		if err := s.reconcileOne(k); err != nil {
			s.log.Debug("reconcile", "vol", k.Vol, "pg", k.PG, "err", err)
			left++
		}
	}
	return left
}

// reconcileOne reconciles k if this brick leads it under the serving map
// and may serve it (nil too when it no longer leads it).
func (s *Server) reconcileOne(k pgKey) error {
	s.mapMu.RLock()
	defer s.mapMu.RUnlock()
	m := s.serving.Load()
	v := m.VolumeByID(k.Vol)
	if v == nil || int(k.PG) >= len(v.PGs) || v.PGs[k.PG].Primary() != s.cfg.Name {
		return nil
	}
	p := &v.PGs[k.PG]
	s.pgMu.Lock()
	need, err := s.core.Admit(m, repl.Request{PG: k, Epoch: m.Epoch, Now: time.Now().UnixNano()})
	s.pgMu.Unlock()
	if err != nil || !need {
		return grpcErr(err)
	}
	return s.ensureReconciled(s.ctx(), m, v, k.PG, p)
}
