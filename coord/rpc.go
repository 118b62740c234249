package coord

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/iostat"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// rpcErr maps internal errors to gRPC status: no leader → Unavailable (the
// client retries elsewhere), everything else keeps its message.
func rpcErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotLeader), errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost):
		return status.Error(codes.Unavailable, err.Error())
	case status.Code(err) != codes.Unknown:
		return err
	}
	return status.Error(codes.FailedPrecondition, err.Error())
}

// forward runs fn on the leader when this coordinator is not it.
func forward[T any](s *Server, ctx context.Context, local func() (T, error), remote func(pb.CoordinatorClient) (T, error)) (T, error) {
	if s.isLeader() {
		v, err := local()
		return v, rpcErr(err)
	}
	cl, err := s.leader()
	if err != nil {
		var zero T
		return zero, rpcErr(err)
	}
	return remote(cl)
}

func (s *Server) Join(ctx context.Context, r *pb.JoinRequest) (*pb.JoinResponse, error) {
	return forward(s, ctx, func() (*pb.JoinResponse, error) {
		if err := clustermap.ValidName(r.Name); err != nil {
			return nil, err
		}
		if err := s.raft.AddVoter(raft.ServerID(r.Name), raft.ServerAddress(r.Addr), 0, 10*time.Second).Error(); err != nil {
			return nil, fmt.Errorf("add coordinator %s at %s: %w", r.Name, r.Addr, err)
		}
		s.log.InfoContext(ctx, "coordinator joined", "name", r.Name, "addr", r.Addr)
		return &pb.JoinResponse{}, nil
	}, func(cl pb.CoordinatorClient) (*pb.JoinResponse, error) { return cl.Join(ctx, r) })
}

func (s *Server) RegisterBrick(ctx context.Context, r *pb.RegisterBrickRequest) (*pb.RegisterBrickResponse, error) {
	return forward(s, ctx, func() (*pb.RegisterBrickResponse, error) {
		if err := clustermap.ValidName(r.Name); err != nil {
			return nil, fmt.Errorf("brick: %w", err)
		}
		if r.Class != "" {
			if err := clustermap.ValidClass(r.Class); err != nil {
				return nil, fmt.Errorf("brick %s: %w", r.Name, err)
			}
		}
		features := slices.Compact(slices.Sorted(slices.Values(r.Features)))
		if len(features) > clustermap.FeaturesMax {
			return nil, fmt.Errorf("brick %s: %d features, at most %d", r.Name, len(features), clustermap.FeaturesMax)
		}
		for _, f := range features {
			if err := clustermap.ValidName(f); err != nil {
				return nil, fmt.Errorf("brick %s: feature: %w", r.Name, err)
			}
		}
		if len(features) == 0 {
			features = nil
		}
		for k := range r.Domain {
			if k != clustermap.LevelHost && k != clustermap.LevelRack && k != clustermap.LevelSite {
				return nil, fmt.Errorf("brick %s: unknown failure-domain level %q (use host, rack, site)", r.Name, k)
			}
		}
		s.mu.Lock()
		s.mu.seen[r.Name] = time.Now()
		s.mu.Unlock()
		m, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			old := m.Brick(r.Name)
			b := clustermap.Brick{Name: r.Name, Addr: r.Addr, Domain: r.Domain, State: clustermap.BrickUp, CapacityBytes: r.CapacityBytes, Class: r.Class,
				Features: features}
			if old != nil {
				b.Draining, b.Full = old.Draining, old.Full
				if old.Addr == b.Addr && old.State == b.State && old.CapacityBytes == b.CapacityBytes && old.Class == b.Class && maps.Equal(old.Domain, b.Domain) &&
					slices.Equal(old.Features, b.Features) {
					return nil, nil
				}
			} else if len(m.Bricks) >= limits.BricksMax {
				return nil, fmt.Errorf("brick %s: the cluster already has %d bricks", r.Name, limits.BricksMax)
			}
			n := m.Clone()
			n.PutBrick(b)
			return n, nil
		})
		if err != nil {
			return nil, err
		}
		s.log.InfoContext(ctx, "brick registered", "name", r.Name, "addr", r.Addr, "domain", r.Domain, "class", r.Class)
		return &pb.RegisterBrickResponse{MapJson: clustermap.Encode(m)}, nil
	}, func(cl pb.CoordinatorClient) (*pb.RegisterBrickResponse, error) { return cl.RegisterBrick(ctx, r) })
}

func (s *Server) Heartbeat(ctx context.Context, r *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	return forward(s, ctx, func() (*pb.HeartbeatResponse, error) {
		now := time.Now()
		vols := s.fsm.Map() // which volumes exist, for the space counts
		s.mu.Lock()
		s.mu.seen[r.Name] = now
		s.mu.epochs[r.Name] = r.MapEpoch
		if r.Kind == pb.HeartbeatRequest_BRICK {
			u := brickUsage{used: r.UsedBytes, capacity: r.CapacityBytes, chunks: map[pgKey]int64{},
				space: mergeSpace(s.mu.usage[r.Name].space, r.VolumeBytes, vols, now)}
			for _, pu := range r.Usage {
				u.chunks[pgKey{pu.Vol, pu.Pg}] = pu.Chunks
			}
			if io := r.Io; io != nil {
				u.io = &iostat.Snapshot{
					Read:  iostat.Op{Ops: io.ReadOps, Bytes: io.ReadBytes, Latency: iostat.Trim(io.ReadLatency)},
					Write: iostat.Op{Ops: io.WriteOps, Bytes: io.WriteBytes, Latency: iostat.Trim(io.WriteLatency)}}
			}
			s.mu.usage[r.Name] = u
		}
		s.mu.Unlock()
		m := s.fsm.Map()
		resp := &pb.HeartbeatResponse{LeaseMs: s.cfg.Lease.Milliseconds(), InstalledEpoch: s.installedEpoch(m, now)}
		if m.Epoch > r.MapEpoch {
			resp.MapJson = clustermap.Encode(m)
		}
		return resp, nil
	}, func(cl pb.CoordinatorClient) (*pb.HeartbeatResponse, error) { return cl.Heartbeat(ctx, r) })
}

func (s *Server) GetMap(ctx context.Context, r *pb.GetMapRequest) (*pb.GetMapResponse, error) {
	if m := s.fsm.Map(); m.Epoch >= r.MinEpoch && r.MinEpoch > 0 || s.isLeader() {
		return &pb.GetMapResponse{MapJson: clustermap.Encode(m)}, nil
	}
	cl, err := s.leader()
	if err != nil {
		return nil, rpcErr(err)
	}
	return cl.GetMap(ctx, r)
}

func (s *Server) CreateVolume(ctx context.Context, r *pb.CreateVolumeRequest) (*pb.CreateVolumeResponse, error) {
	return forward(s, ctx, func() (*pb.CreateVolumeResponse, error) {
		replicas, chunk, pgs := int(r.Replicas), r.ChunkBytes, int(r.Pgs)
		if replicas == 0 {
			replicas = 3
		}
		if chunk == 0 {
			chunk = limits.ChunkBytesDefault
		}
		if pgs == 0 {
			pgs = limits.PGsPerVolumeDefault
		}
		if replicas > limits.ReplicasMax || pgs > limits.PGsPerVolumeMax {
			return nil, fmt.Errorf("volume %q: at most %d replicas and %d placement groups", r.Name, limits.ReplicasMax, limits.PGsPerVolumeMax)
		}
		m, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			if len(m.Volumes) >= limits.VolumesMax {
				return nil, fmt.Errorf("the cluster already has %d volumes", limits.VolumesMax)
			}
			n, err := clustermap.PlaceVolume(m, clustermap.VolumeSpec{Name: r.Name, Replicas: replicas, ChunkBytes: chunk, PGs: pgs,
				AllowSameDomain: r.AllowSameDomain, Class: r.Class, Domain: r.Domain})
			if err == nil && r.FileVersions {
				n.Volume(r.Name).FileVersions = true // n is a new map
			}
			return n, err
		})
		if err != nil {
			return nil, err
		}
		s.log.InfoContext(ctx, "volume created", "name", r.Name, "replicas", replicas, "chunk", chunk, "pgs", pgs, "file_versions", r.FileVersions, "class", r.Class, "domain", r.Domain)
		return &pb.CreateVolumeResponse{MapJson: clustermap.Encode(m)}, nil
	}, func(cl pb.CoordinatorClient) (*pb.CreateVolumeResponse, error) { return cl.CreateVolume(ctx, r) })
}

func (s *Server) Fence(ctx context.Context, r *pb.FenceRequest) (*pb.FenceResponse, error) {
	return forward(s, ctx, func() (*pb.FenceResponse, error) {
		if r.Writer == "" || len(r.Writer) > limits.NameBytesMax {
			return nil, fmt.Errorf("fence: writer id must be 1 to %d bytes", limits.NameBytesMax)
		}
		var epoch uint64
		m, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			cur := m.FenceEpoch(r.Writer)
			epoch = r.Epoch
			if epoch == 0 {
				epoch = cur + 1
			}
			if epoch <= cur {
				return nil, nil // already fenced at least that far
			}
			if _, ok := m.Fences[r.Writer]; !ok && len(m.Fences) >= limits.WritersMax {
				return nil, fmt.Errorf("fence: %d writers already fenced", limits.WritersMax)
			}
			n := m.Clone()
			if n.Fences == nil {
				n.Fences = map[string]uint64{}
			}
			n.Fences[r.Writer] = epoch
			return n, nil
		})
		if err != nil {
			return nil, err
		}
		if err := s.fenceInForce(r.Writer, m.FenceEpoch(r.Writer), m.Epoch); err != nil {
			return nil, status.Error(codes.DeadlineExceeded, err.Error())
		}
		s.log.InfoContext(ctx, "writer fenced", "writer", r.Writer, "epoch", m.FenceEpoch(r.Writer))
		return &pb.FenceResponse{Epoch: m.FenceEpoch(r.Writer)}, nil
	}, func(cl pb.CoordinatorClient) (*pb.FenceResponse, error) { return cl.Fence(ctx, r) })
}

func (s *Server) Snapshot(ctx context.Context, r *pb.SnapshotRequest) (*pb.SnapshotResponse, error) {
	return forward(s, ctx, func() (*pb.SnapshotResponse, error) {
		if err := clustermap.ValidName(r.Name); err != nil {
			return nil, fmt.Errorf("snapshot: %w", err)
		}
		var gen uint64
		m, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			v := m.Volume(r.Volume)
			if v == nil {
				return nil, fmt.Errorf("snapshot: no volume %q", r.Volume)
			}
			if _, ok := v.Snapshots[r.Name]; ok {
				return nil, fmt.Errorf("snapshot: volume %s already has a snapshot %q", r.Volume, r.Name)
			}
			if len(v.Snapshots) >= limits.SnapshotsPerVolumeMax {
				return nil, fmt.Errorf("snapshot: volume %s has %d snapshots already", r.Volume, limits.SnapshotsPerVolumeMax)
			}
			n := m.Clone()
			nv := n.Volume(r.Volume)
			if nv.Snapshots == nil {
				nv.Snapshots = map[string]uint64{}
			}
			gen = nv.Gen
			nv.Snapshots[r.Name] = gen
			if nv.SnapshotTimes == nil {
				nv.SnapshotTimes = map[string]int64{}
			}
			nv.SnapshotTimes[r.Name] = time.Now().UnixNano()
			nv.Gen++
			return n, nil
		})
		if err != nil {
			return nil, err
		}
		if pending := s.waitInstalled(m.Epoch, limits.FenceWaitMax); len(pending) > 0 {
			return nil, status.Errorf(codes.DeadlineExceeded, "snapshot %s recorded at map epoch %d, but bricks %v have not confirmed it yet; it may still include writes that follow", r.Name, m.Epoch, pending)
		}
		s.log.InfoContext(ctx, "snapshot taken", "volume", r.Volume, "name", r.Name, "gen", gen)
		return &pb.SnapshotResponse{Gen: gen}, nil
	}, func(cl pb.CoordinatorClient) (*pb.SnapshotResponse, error) { return cl.Snapshot(ctx, r) })
}

// DeleteSnapshot removes a snapshot from the map (clustermap.DeleteSnapshot)
// and waits, like Snapshot, until every up brick serves the new map: from
// then on no primary reads the deleted name, and the primaries prune what
// only it saw (brick/prune.go). A brick that has not confirmed by then is
// logged, not reported: the deletion is made, and a retry would only find
// the snapshot gone.
func (s *Server) DeleteSnapshot(ctx context.Context, r *pb.DeleteSnapshotRequest) (*pb.DeleteSnapshotResponse, error) {
	return forward(s, ctx, func() (*pb.DeleteSnapshotResponse, error) {
		m, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			return clustermap.DeleteSnapshot(m, r.Volume, r.Name)
		})
		if errors.Is(err, clustermap.ErrNoVolume) || errors.Is(err, clustermap.ErrNoSnapshot) {
			return nil, status.Error(codes.NotFound, err.Error())
		}
		if err != nil {
			return nil, err
		}
		if pending := s.waitInstalled(m.Epoch, limits.FenceWaitMax); len(pending) > 0 {
			s.log.WarnContext(ctx, "snapshot deleted, but some bricks have not confirmed the map yet; they serve it as they learn it",
				"volume", r.Volume, "name", r.Name, "epoch", m.Epoch, "bricks", pending)
		}
		s.log.InfoContext(ctx, "snapshot deleted", "volume", r.Volume, "name", r.Name, "epoch", m.Epoch)
		return &pb.DeleteSnapshotResponse{}, nil
	}, func(cl pb.CoordinatorClient) (*pb.DeleteSnapshotResponse, error) { return cl.DeleteSnapshot(ctx, r) })
}

func (s *Server) DrainBrick(ctx context.Context, r *pb.DrainBrickRequest) (*pb.DrainBrickResponse, error) {
	return forward(s, ctx, func() (*pb.DrainBrickResponse, error) {
		m, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			b := m.Brick(r.Name)
			if b == nil {
				return nil, fmt.Errorf("drain: no brick %q", r.Name)
			}
			if b.Draining {
				return nil, nil
			}
			n := m.Clone()
			n.Brick(r.Name).Draining = true
			if rn := clustermap.Reconcile(n, s.alive(n, time.Now())); rn != nil {
				return rn, nil
			}
			return n, nil
		})
		if err != nil {
			return nil, err
		}
		return &pb.DrainBrickResponse{PgsRemaining: int64(clustermap.PGsOn(m, r.Name) + clustermap.SGsOn(m, r.Name))}, nil
	}, func(cl pb.CoordinatorClient) (*pb.DrainBrickResponse, error) { return cl.DrainBrick(ctx, r) })
}

func (s *Server) RemoveBrick(ctx context.Context, r *pb.RemoveBrickRequest) (*pb.RemoveBrickResponse, error) {
	return forward(s, ctx, func() (*pb.RemoveBrickResponse, error) {
		_, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			if m.Brick(r.Name) == nil {
				return nil, fmt.Errorf("remove: no brick %q", r.Name)
			}
			if n := clustermap.PGsOn(m, r.Name); n > 0 {
				return nil, fmt.Errorf("remove: brick %s still holds %d placement groups; run `plumeria brick drain %s` and wait for it to finish", r.Name, n, r.Name)
			}
			if n := clustermap.SGsOn(m, r.Name); n > 0 {
				return nil, fmt.Errorf("remove: brick %s still holds shards of %d stripe groups; run `plumeria brick drain %s` and wait for it to finish", r.Name, n, r.Name)
			}
			n := m.Clone()
			n.Bricks = removeBrick(n.Bricks, r.Name)
			return n, nil
		})
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		delete(s.mu.seen, r.Name)
		delete(s.mu.usage, r.Name)
		s.mu.Unlock()
		return &pb.RemoveBrickResponse{}, nil
	}, func(cl pb.CoordinatorClient) (*pb.RemoveBrickResponse, error) { return cl.RemoveBrick(ctx, r) })
}

func removeBrick(bs []clustermap.Brick, name string) []clustermap.Brick {
	out := bs[:0]
	for _, b := range bs {
		if b.Name != name {
			out = append(out, b)
		}
	}
	return out
}

func (s *Server) PGSynced(ctx context.Context, r *pb.PGSyncedRequest) (*pb.PGSyncedResponse, error) {
	return forward(s, ctx, func() (*pb.PGSyncedResponse, error) {
		// Accepted only from the current primary, for the membership the
		// backfill started under (MarkSynced checks both).
		_, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			v := m.VolumeByID(r.Vol)
			if v == nil || int(r.Pg) >= len(v.PGs) {
				return nil, fmt.Errorf("pg synced: no pg %d of volume %d", r.Pg, r.Vol)
			}
			n := clustermap.MarkSynced(m, r.Vol, r.Pg, r.Brick, r.Primary, r.Since)
			if n == nil {
				return nil, fmt.Errorf("pg synced: report for volume %d pg %d brick %s no longer applies (membership changed since epoch %d)", r.Vol, r.Pg, r.Brick, r.Since)
			}
			return n, nil
		})
		return &pb.PGSyncedResponse{}, err
	}, func(cl pb.CoordinatorClient) (*pb.PGSyncedResponse, error) { return cl.PGSynced(ctx, r) })
}

func (s *Server) EnsureProfile(ctx context.Context, r *pb.EnsureProfileRequest) (*pb.EnsureProfileResponse, error) {
	return forward(s, ctx, func() (*pb.EnsureProfileResponse, error) {
		if r.Profile == nil {
			return nil, status.Error(codes.InvalidArgument, "ensure profile: no profile given")
		}
		const most = 1 << 10 // far above any bound; keeps the int conversion exact
		if r.Profile.K > most || r.Profile.M > most {
			return nil, status.Errorf(codes.InvalidArgument, "ensure profile: k %d, m %d out of range", r.Profile.K, r.Profile.M)
		}
		want := clustermap.Profile{K: int(r.Profile.K), M: int(r.Profile.M), Level: r.Profile.Level, Class: r.Profile.Class}
		var id uint16
		m, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			v := m.Volume(r.Volume)
			if v == nil {
				return nil, status.Errorf(codes.NotFound, "ensure profile: no volume %q", r.Volume)
			}
			n, got, err := clustermap.EnsureProfile(m, v.ID, want)
			id = got
			return n, err
		})
		if err != nil {
			return nil, err
		}
		if id != 0 {
			s.log.InfoContext(ctx, "profile in force", "volume", r.Volume, "profile", want.String(), "id", id)
		}
		return &pb.EnsureProfileResponse{Id: uint32(id), MapJson: clustermap.Encode(m)}, nil
	}, func(cl pb.CoordinatorClient) (*pb.EnsureProfileResponse, error) { return cl.EnsureProfile(ctx, r) })
}

func (s *Server) SGSynced(ctx context.Context, r *pb.SGSyncedRequest) (*pb.SGSyncedResponse, error) {
	return forward(s, ctx, func() (*pb.SGSyncedResponse, error) {
		_, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			if r.Sg > 0xffff {
				return nil, fmt.Errorf("sg synced: stripe group %d out of range", r.Sg)
			}
			n := clustermap.MarkSGSynced(m, r.Vol, uint16(r.Sg), r.Brick, r.Leader, r.Since)
			if n == nil {
				return nil, fmt.Errorf("sg synced: report for volume %d stripe group %d brick %s no longer applies (leader or membership changed since epoch %d)",
					r.Vol, r.Sg, r.Brick, r.Since)
			}
			return n, nil
		})
		if err == nil {
			s.log.InfoContext(ctx, "stripe group member rebuilt", "vol", r.Vol, "sg", r.Sg, "brick", r.Brick)
		}
		return &pb.SGSyncedResponse{}, err
	}, func(cl pb.CoordinatorClient) (*pb.SGSyncedResponse, error) { return cl.SGSynced(ctx, r) })
}

func (s *Server) ReplicaFailed(ctx context.Context, r *pb.ReplicaFailedRequest) (*pb.ReplicaFailedResponse, error) {
	return forward(s, ctx, func() (*pb.ReplicaFailedResponse, error) {
		_, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			n, ok := clustermap.MarkSyncing(m, r.Vol, r.Pg, r.Brick, r.Primary)
			if !ok {
				return nil, fmt.Errorf("replica failed: %s is not the primary of volume %d pg %d", r.Primary, r.Vol, r.Pg)
			}
			return n, nil
		})
		if err == nil {
			s.log.WarnContext(ctx, "replica missed a change; resyncing it", "vol", r.Vol, "pg", r.Pg, "brick", r.Brick)
		}
		return &pb.ReplicaFailedResponse{}, err
	}, func(cl pb.CoordinatorClient) (*pb.ReplicaFailedResponse, error) { return cl.ReplicaFailed(ctx, r) })
}
