package coord

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// SetSnapshotSchedule sets or clears a volume's snapshot schedule. The
// schedule is run by the process of the leader (node's scheduler).
func (s *Server) SetSnapshotSchedule(ctx context.Context, r *pb.SetSnapshotScheduleRequest) (*pb.SetSnapshotScheduleResponse, error) {
	return forward(s, ctx, func() (*pb.SetSnapshotScheduleResponse, error) {
		var sched *clustermap.SnapshotSchedule
		if r.EveryS != 0 {
			sched = &clustermap.SnapshotSchedule{EverySeconds: r.EveryS, Keep: int(r.Keep), KeepHourly: int(r.KeepHourly), KeepDaily: int(r.KeepDaily)}
			if err := sched.Validate(); err != nil {
				return nil, status.Error(codes.InvalidArgument, err.Error())
			}
		}
		_, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			if m.Volume(r.Volume) == nil {
				return nil, status.Errorf(codes.NotFound, "snapshot schedule: no volume %q", r.Volume)
			}
			n := m.Clone()
			n.Volume(r.Volume).Schedule = sched
			return n, nil
		})
		if err != nil {
			return nil, err
		}
		desc := "none"
		if sched != nil {
			desc = sched.String()
		}
		s.log.InfoContext(ctx, "snapshot schedule set", "volume", r.Volume, "schedule", desc)
		return &pb.SetSnapshotScheduleResponse{}, nil
	}, func(cl pb.CoordinatorClient) (*pb.SetSnapshotScheduleResponse, error) {
		return cl.SetSnapshotSchedule(ctx, r)
	})
}
