package coord

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/plumeria-fs/plumeria/internal/pb"
)

// Membership of the coordinator group. Adding a coordinator is starting
// one with --join (Join); removing one is RemoveCoordinator, on the
// leader, after checkRemove agrees.

// ErrRemoveRefused is wrapped by every refusal of checkRemove.
var ErrRemoveRefused = errors.New("coord: refusing to remove coordinator")

// coordinatorsLocked lists the Raft configuration's servers with what
// this coordinator (the leader, for a useful answer) knows of them. A
// member is up if it leads or sent a heartbeat within DeadAfter. s.mu
// must be held.
func (s *Server) coordinatorsLocked(leaderID raft.ServerID, now time.Time) ([]CoordinatorStatus, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("coord: read raft configuration: %w", err)
	}
	var out []CoordinatorStatus
	for _, srv := range f.Configuration().Servers {
		c := CoordinatorStatus{Name: string(srv.ID), Addr: string(srv.Address), Leader: srv.ID == leaderID,
			Voter: srv.Suffrage == raft.Voter, LastSeen: msAgo(s.mu.seen, string(srv.ID), now)}
		c.Up = c.Leader || c.LastSeen >= 0 && time.Duration(c.LastSeen)*time.Millisecond < s.cfg.DeadAfter
		out = append(out, c)
	}
	return out, nil
}

// checkRemove decides whether the coordinator name may leave a group with
// these members: it must be a member and not the last one, and the voters
// that stay must still have a majority up, or the group could not elect a
// leader nor commit anything (the cluster map would be frozen). Errors
// wrap ErrRemoveRefused, except for an unknown name.
func checkRemove(members []CoordinatorStatus, name string) error {
	var names, staying, up []string
	found := false
	for _, m := range members {
		names = append(names, m.Name)
		if m.Name == name {
			found = true
			continue
		}
		if m.Voter {
			staying = append(staying, m.Name)
			if m.Up {
				up = append(up, m.Name)
			}
		}
	}
	switch {
	case !found:
		return fmt.Errorf("coord: no coordinator %q (members: %s)", name, strings.Join(names, ", "))
	case len(members) == 1:
		return fmt.Errorf("%w %s: it is the last member; the cluster map lives only in the coordinator group", ErrRemoveRefused, name)
	case len(staying) == 0:
		return fmt.Errorf("%w %s: it is the only voter", ErrRemoveRefused, name)
	}
	if need := len(staying)/2 + 1; len(up) < need {
		return fmt.Errorf("%w %s: of the %d voters that would stay (%s) only %d are up (%s), and a majority (%d) must be; bring members back or add one first",
			ErrRemoveRefused, name, len(staying), strings.Join(staying, ", "), len(up), strings.Join(up, ", "), need)
	}
	return nil
}

func (s *Server) RemoveCoordinator(ctx context.Context, r *pb.RemoveCoordinatorRequest) (*pb.RemoveCoordinatorResponse, error) {
	return forward(s, ctx, func() (*pb.RemoveCoordinatorResponse, error) {
		// One membership change at a time, against the current configuration.
		s.propMu.Lock()
		defer s.propMu.Unlock()
		if !s.isLeader() {
			return nil, ErrNotLeader
		}
		_, leaderID := s.raft.LeaderWithID()
		s.mu.Lock()
		members, err := s.coordinatorsLocked(leaderID, time.Now())
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if err := checkRemove(members, r.Name); err != nil {
			return nil, err
		}
		if err := s.raft.RemoveServer(raft.ServerID(r.Name), 0, 10*time.Second).Error(); err != nil {
			return nil, fmt.Errorf("remove coordinator %s: %w", r.Name, err)
		}
		s.mu.Lock()
		delete(s.mu.seen, r.Name)
		delete(s.mu.epochs, r.Name)
		s.mu.Unlock()
		s.log.InfoContext(ctx, "coordinator removed", "name", r.Name)
		return &pb.RemoveCoordinatorResponse{}, nil
	}, func(cl pb.CoordinatorClient) (*pb.RemoveCoordinatorResponse, error) {
		return cl.RemoveCoordinator(ctx, r)
	})
}

// noteRemoved logs once that Raft shut down under a running coordinator:
// it applied its own removal from the group.
func (s *Server) noteRemoved() {
	if s.removedNoted.CompareAndSwap(false, true) {
		s.log.Warn("this coordinator was removed from the coordinator group; stop the process (restarting it with --join adds it back)")
	}
}
