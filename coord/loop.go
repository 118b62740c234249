package coord

import (
	"context"
	"time"

	"github.com/hashicorp/raft"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

const (
	deadAfterDefault = limits.BrickDeadAfter
	leaseDefault     = limits.BrickLease
	reconcileEvery   = 250 * time.Millisecond
)

// loop runs the leader's periodic work: failure detection and reconciling
// the map. It reads heartbeats recorded in s.mu and commits changes.
func (s *Server) loop() {
	defer s.wg.Done()
	t := time.NewTicker(reconcileEvery)
	defer t.Stop()
	wasLeader := false
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if s.raft.State() == raft.Shutdown {
			s.noteRemoved()
			continue
		}
		leader := s.raft.State() == raft.Leader
		if leader && !wasLeader {
			// A new leader has no heartbeat history: give every member a
			// full DeadAfter from now before judging it.
			s.mu.Lock()
			s.mu.leaderSince = time.Now()
			s.mu.Unlock()
		}
		if leader && !wasLeader {
			s.importTokens()
		}
		wasLeader = leader
		if !leader {
			s.heartbeatLeader()
			continue
		}
		if _, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			return clustermap.MarkFull(m, s.usageReports()), nil
		}); err != nil {
			s.log.Warn("mark full bricks", "err", err)
		}
		if _, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			return clustermap.Reconcile(m, s.alive(m, time.Now())), nil
		}); err != nil {
			s.log.Warn("reconcile", "err", err)
		}
		if _, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			if len(m.LockServers) == 0 {
				return nil, nil
			}
			alive := s.lockServersAlive(m, time.Now())
			s.mu.Lock()
			installed := make(map[string]uint64, len(m.LockServers))
			for _, l := range m.LockServers {
				installed[l.Name] = s.mu.epochs[l.Name]
			}
			s.mu.Unlock()
			return clustermap.AssignLockGroups(m, alive, installed), nil
		}); err != nil {
			s.log.Warn("assign lock groups", "err", err)
		}
	}
}

// alive returns the bricks heard from within DeadAfter.
func (s *Server) alive(m *clustermap.Map, now time.Time) map[string]bool {
	up := map[string]bool{}
	for _, b := range m.Bricks {
		up[b.Name] = b.State == clustermap.BrickUp
	}
	return s.heardFrom(up, now)
}

// heardFrom returns the members (name → shown up in the map) heard from
// within DeadAfter. During the grace period after an election, members the
// map shows up count as alive: this leader has no heartbeat history yet.
func (s *Server) heardFrom(members map[string]bool, now time.Time) map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	grace := now.Sub(s.mu.leaderSince) < s.cfg.DeadAfter
	out := map[string]bool{}
	for name, mapUp := range members {
		seen, ok := s.mu.seen[name]
		if ok && now.Sub(seen) < s.cfg.DeadAfter || !ok && grace && mapUp {
			out[name] = true
		}
	}
	return out
}

// waitInstalled waits until every up brick has either reported a map with
// at least epoch or has not been heard from for longer than its lease (so
// it can no longer act as a primary). It returns the names still unsettled
// when the wait gives up.
func (s *Server) waitInstalled(epoch uint64, maxWait time.Duration) []string {
	deadline := time.Now().Add(maxWait)
	for {
		var pending []string
		m := s.fsm.Map()
		now := time.Now()
		s.mu.Lock()
		for _, b := range m.Bricks {
			if b.State != clustermap.BrickUp {
				continue
			}
			if s.mu.epochs[b.Name] >= epoch {
				continue
			}
			if seen, ok := s.mu.seen[b.Name]; ok && now.Sub(seen) > s.cfg.Lease {
				continue
			}
			if _, ok := s.mu.seen[b.Name]; !ok && now.Sub(s.mu.leaderSince) > s.cfg.Lease {
				continue // never heard by this leader, for longer than a lease
			}
			pending = append(pending, b.Name)
		}
		s.mu.Unlock()
		if len(pending) == 0 || now.After(deadline) {
			return pending
		}
		select {
		case <-s.stop:
			return pending
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// heartbeatLeader tells the leader this follower is alive (for status).
func (s *Server) heartbeatLeader() {
	cl, err := s.leader()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = cl.Heartbeat(ctx, &pb.HeartbeatRequest{Name: s.cfg.Name, Kind: pb.HeartbeatRequest_COORDINATOR,
		MapEpoch: s.fsm.Map().Epoch, Addr: s.cfg.Addr})
}

// installedEpoch is the lowest map epoch installed by any brick that may
// still act as a primary: up in m and heard from within its lease. Until a
// new leader has seen every brick once, it claims nothing beyond what the
// bricks reported to it.
func (s *Server) installedEpoch(m *clustermap.Map, now time.Time) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	low := m.Epoch
	for _, b := range m.Bricks {
		if b.State != clustermap.BrickUp {
			continue
		}
		seen, ok := s.mu.seen[b.Name]
		if !ok {
			if now.Sub(s.mu.leaderSince) <= s.cfg.Lease {
				return 0 // it may hold a lease granted by the previous leader
			}
			continue
		}
		if now.Sub(seen) > s.cfg.Lease {
			continue
		}
		low = min(low, s.mu.epochs[b.Name])
	}
	return low
}

// usageReports returns what each brick last reported of its store's use,
// for MarkFull.
func (s *Server) usageReports() map[string]clustermap.Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]clustermap.Usage, len(s.mu.usage))
	for name, u := range s.mu.usage {
		out[name] = clustermap.Usage{Used: u.used, Capacity: u.capacity}
	}
	return out
}
