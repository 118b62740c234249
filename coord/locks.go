package coord

import (
	"context"
	"fmt"
	"time"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// The lock service's requests to the coordinator (issue B). The map holds
// the lock-group assignment, the session registry, fences in force and
// recovery records; lock servers derive their events from it.

func (s *Server) RegisterLockServer(ctx context.Context, r *pb.RegisterLockServerRequest) (*pb.RegisterLockServerResponse, error) {
	return forward(s, ctx, func() (*pb.RegisterLockServerResponse, error) {
		s.mu.Lock()
		s.mu.seen[r.Name] = time.Now()
		s.mu.Unlock()
		m, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			return clustermap.PutLockServer(m, r.Name, r.Addr)
		})
		if err != nil {
			return nil, err
		}
		s.log.InfoContext(ctx, "lock server registered", "name", r.Name, "addr", r.Addr, "incarnation", m.LockServer(r.Name).Incarnation)
		return &pb.RegisterLockServerResponse{MapJson: clustermap.Encode(m)}, nil
	}, func(cl pb.CoordinatorClient) (*pb.RegisterLockServerResponse, error) {
		return cl.RegisterLockServer(ctx, r)
	})
}

func (s *Server) OpenSession(ctx context.Context, r *pb.OpenSessionRequest) (*pb.OpenSessionResponse, error) {
	return forward(s, ctx, func() (*pb.OpenSessionResponse, error) {
		var session uint64
		m, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			n, sess, err := clustermap.OpenSession(m, r.Clerk, r.Tables)
			session = sess
			return n, err
		})
		if err != nil {
			return nil, err
		}
		if err := s.fenceInForce(r.Clerk, m.FenceEpoch(r.Clerk), m.Epoch); err != nil {
			return nil, err
		}
		s.log.InfoContext(ctx, "session opened", "clerk", r.Clerk, "session", session, "tables", r.Tables)
		return &pb.OpenSessionResponse{Session: session}, nil
	}, func(cl pb.CoordinatorClient) (*pb.OpenSessionResponse, error) { return cl.OpenSession(ctx, r) })
}

// fenceInForce waits until every brick serves the map of epoch mapEpoch
// (so writes of the clerk below fence are refused), then records the fence
// as in force for the lock servers.
func (s *Server) fenceInForce(clerk string, fence, mapEpoch uint64) error {
	if pending := s.waitInstalled(mapEpoch, limits.FenceWaitMax); len(pending) > 0 {
		return fmt.Errorf("fence of %s recorded at map epoch %d, but bricks %v have not confirmed it yet; retry", clerk, mapEpoch, pending)
	}
	_, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
		return clustermap.MarkFenceInForce(m, clerk, fence), nil
	})
	return err
}

func (s *Server) RecordRecovered(ctx context.Context, r *pb.RecordRecoveredRequest) (*pb.RecordRecoveredResponse, error) {
	return forward(s, ctx, func() (*pb.RecordRecoveredResponse, error) {
		fresh := false
		_, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			for _, rec := range m.Recovered {
				if rec.Clerk == r.Clerk && rec.Session >= r.Session && rec.Table == r.Table {
					return nil, nil // recorded already
				}
			}
			fresh = true
			return clustermap.RecordRecovered(m, r.Clerk, r.Session, r.Table)
		})
		if err != nil {
			return nil, err
		}
		if fresh {
			s.recoveriesRecorded.Add(1)
		}
		s.log.InfoContext(ctx, "recovery recorded", "clerk", r.Clerk, "session", r.Session, "table", r.Table)
		return &pb.RecordRecoveredResponse{}, nil
	}, func(cl pb.CoordinatorClient) (*pb.RecordRecoveredResponse, error) { return cl.RecordRecovered(ctx, r) })
}

func (s *Server) CloseSession(ctx context.Context, r *pb.CloseSessionRequest) (*pb.CloseSessionResponse, error) {
	return forward(s, ctx, func() (*pb.CloseSessionResponse, error) {
		_, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			return clustermap.CloseSession(m, r.Clerk, r.Session, r.Table), nil
		})
		if err != nil {
			return nil, err
		}
		s.log.Info("session closed", "clerk", r.Clerk, "session", r.Session, "table", r.Table)
		return &pb.CloseSessionResponse{}, nil
	}, func(cl pb.CoordinatorClient) (*pb.CloseSessionResponse, error) { return cl.CloseSession(ctx, r) })
}

// lockServersAlive returns the lock servers heard from within DeadAfter.
func (s *Server) lockServersAlive(m *clustermap.Map, now time.Time) map[string]bool {
	up := map[string]bool{}
	for _, l := range m.LockServers {
		up[l.Name] = l.State == clustermap.BrickUp
	}
	return s.heardFrom(up, now)
}
