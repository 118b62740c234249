package brick

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/clustermap"
)

// Map handling. A brick keeps two views:
//
//   - latest: the newest map it has received (heartbeat, fetch). Requests
//     from other bricks (Replicate, Backfill, Inventory) are checked against
//     it and never wait for an install: a primary waiting for its backups
//     while an install waits for that primary must not be waited on in turn.
//   - serving: the map the primary-side handlers (Write, Read, Decommit) run
//     under. The installer switches it while holding mapMu exclusively, which
//     waits for every handler still running under the old one. The brick
//     reports its serving epoch in heartbeats, so when the coordinator sees
//     every brick at epoch E (fence, snapshot, primary hand-off), no primary
//     still serves an older map.

// setLatest records m if it is newer (the core notes the PGs whose primary
// changed: repl.Core.Learn) and wakes the installer.
func (s *Server) setLatest(m *clustermap.Map) {
	s.pgMu.Lock()
	if !s.core.Learn(m) {
		s.pgMu.Unlock()
		return
	}
	s.latest.Store(m)
	s.pgMu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// installer makes the latest map the serving one, in order, until stop.
func (s *Server) installer() {
	defer s.wg.Done()
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
		}
		m := s.latest.Load()
		if m.Epoch <= s.serving.Load().Epoch {
			continue
		}
		s.mapMu.Lock()
		s.serving.Store(m)
		s.mapMu.Unlock()
		s.pgMu.Lock()
		s.core.Install(m)
		close(s.served)
		s.served = make(chan struct{})
		s.pgMu.Unlock()
		s.kickCore()  // backfills and reconciliations the new map calls for
		s.kickPrune() // a snapshot deleted, or a PG led anew
		select {      // report the serving epoch now (heartbeatLoop)
		case s.beat <- struct{}{}:
		default:
		}
	}
}

// refresh fetches a map with at least epoch from the coordinator.
func (s *Server) refresh(ctx context.Context, epoch uint64) error {
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	if s.latest.Load().Epoch >= epoch {
		return nil
	}
	m, err := s.cfg.Coord.Map(ctx, epoch)
	if err != nil {
		return err
	}
	if m.Epoch < epoch {
		return fmt.Errorf("coordinator map epoch %d is behind request epoch %d", m.Epoch, epoch)
	}
	s.setLatest(m)
	return nil
}

// catchUpLatest makes sure the latest map is at least epoch.
func (s *Server) catchUpLatest(ctx context.Context, epoch uint64) error {
	if epoch > s.latest.Load().Epoch {
		if err := s.refresh(ctx, epoch); err != nil {
			return status.Errorf(codes.Unavailable, "brick %s: cannot fetch map epoch %d: %v", s.cfg.Name, epoch, err)
		}
	}
	return nil
}

// catchUpServing waits until the serving map is at least epoch.
func (s *Server) catchUpServing(ctx context.Context, epoch uint64) error {
	if err := s.catchUpLatest(ctx, epoch); err != nil {
		return err
	}
	for {
		s.pgMu.Lock()
		ch := s.served
		s.pgMu.Unlock()
		if s.serving.Load().Epoch >= epoch {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return status.Errorf(codes.Unavailable, "brick %s: map epoch %d not installed yet: %v", s.cfg.Name, epoch, ctx.Err())
		case <-s.stop:
			return status.Errorf(codes.Unavailable, "brick %s: stopping", s.cfg.Name)
		}
	}
}
