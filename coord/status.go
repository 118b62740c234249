package coord

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/iostat"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// StatusVersion is the version of the Status JSON schema (docs/status-json.md).
const StatusVersion = 1

// Status is what `plumeria status --json` prints. Documented in docs/status-json.md;
// add fields freely, but renaming or removing one needs a new StatusVersion.
type Status struct {
	Version      int                 `json:"version"`
	MapEpoch     uint64              `json:"map_epoch"`
	Leader       string              `json:"leader"`
	Coordinators []CoordinatorStatus `json:"coordinators"`
	Bricks       []BrickStatus       `json:"bricks"`
	Volumes      []VolumeStatus      `json:"volumes"`
	Fences       map[string]uint64   `json:"fences,omitempty"`
	// FencesInForce: clerk → fence every brick enforces; that clerk's
	// sessions below it may be recovered (recovery in progress while
	// they are still listed in Sessions).
	FencesInForce map[string]uint64    `json:"fences_in_force,omitempty"`
	LockServers   []LockServerStatus   `json:"lock_servers,omitempty"`
	Sessions      []clustermap.Session `json:"sessions,omitempty"`
	// Balance: where rule 6 of clustermap.Reconcile moves PG replicas to.
	Balance BalanceStatus `json:"balance"`
	// Security (docs/security.md): nodes refused for good, and the join
	// tokens that still work (their ids, roles and ends, never secrets).
	Revoked []string      `json:"revoked,omitempty"`
	Tokens  []TokenStatus `json:"join_tokens,omitempty"`
}

// TokenStatus is a join token that has not expired.
type TokenStatus struct {
	ID      string    `json:"id"`
	Roles   []string  `json:"roles"`
	Expires time.Time `json:"expires"`
	Used    int       `json:"used"` // names that joined with it
}

// BalanceStatus is the balance the coordinator works towards: within each
// storage class, PG replicas in proportion to capacity (clustermap.Balance).
type BalanceStatus struct {
	Bricks []clustermap.BrickBalance `json:"bricks"`
	// Deviation is the largest |replicas - target| over bricks that are
	// not full: below 2 means balanced.
	Deviation float64 `json:"deviation"`
}

type LockServerStatus struct {
	Name     string `json:"name"`
	Addr     string `json:"addr"`
	State    string `json:"state"` // "up" or "down"
	Groups   int    `json:"groups"`
	LastSeen int64  `json:"last_seen_ms_ago"`
}

type CoordinatorStatus struct {
	Name     string `json:"name"`
	Addr     string `json:"addr"`
	Leader   bool   `json:"leader"`
	Up       bool   `json:"up"`
	Voter    bool   `json:"voter"`
	LastSeen int64  `json:"last_seen_ms_ago"` // -1: never heard by this leader
}

type BrickStatus struct {
	Name          string            `json:"name"`
	Addr          string            `json:"addr"`
	State         string            `json:"state"` // "up" or "down"
	Draining      bool              `json:"draining"`
	Class         string            `json:"class"`          // storage class ("default" when none was given)
	Full          bool              `json:"full,omitempty"` // nearly full: takes no new PG members
	Domain        map[string]string `json:"domain,omitempty"`
	UsedBytes     int64             `json:"used_bytes"`
	CapacityBytes int64             `json:"capacity_bytes"`
	PGs           int               `json:"pgs"`
	LastSeen      int64             `json:"last_seen_ms_ago"`
	// IO: client reads and writes the brick served as primary since its
	// process started (from its last heartbeat); nil if it reported none.
	IO *iostat.Snapshot `json:"io,omitempty"`
}

type VolumeStatus struct {
	Name           string   `json:"name"`
	ID             uint64   `json:"id"`
	Replicas       int      `json:"replicas"`
	Class          string   `json:"class,omitempty"`  // bricks of this class only
	Domain         string   `json:"domain,omitempty"` // hard failure-domain level (absent: host)
	ChunkBytes     uint32   `json:"chunk_bytes"`
	PGs            int      `json:"pgs"`
	Chunks         int64    `json:"chunks"`
	DegradedChunks int64    `json:"degraded_chunks"`
	DegradedPGs    int      `json:"degraded_pgs"`
	UnavailablePGs int      `json:"unavailable_pgs"`
	SyncingPGs     int      `json:"syncing_pgs"`
	Snapshots      []string `json:"snapshots,omitempty"`
	Gen            uint64   `json:"gen"`
	// FileVersions: the volume keeps per-file versions (clustermap.Volume.FileVersions).
	FileVersions bool `json:"file_versions,omitempty"`
	// Schedule is the volume's snapshot schedule, if any.
	Schedule *clustermap.SnapshotSchedule `json:"snapshot_schedule,omitempty"`
	// LiveBytes and HistoryBytes: the bytes of the records the live volume
	// reads, and of those kept only for snapshots and file versions, summed
	// over the up bricks' latest counts: raw bytes on disk, every replica
	// counted. SpaceReportMsAgo is the age of the oldest count in the sums
	// (-1: no brick has reported the volume yet, and both are 0).
	LiveBytes    int64 `json:"live_bytes"`
	HistoryBytes int64 `json:"history_bytes"`
	// StripeBytes: the shard bytes of the volume's stripes (erasure coding),
	// summed over the up bricks as LiveBytes is; the blocks they hold count
	// in LiveBytes only as their refs (65 bytes each).
	StripeBytes int64 `json:"stripe_bytes,omitempty"`
	// Profiles: the redundancies the volume's stripes use (clustermap.Profile).
	Profiles []string `json:"profiles,omitempty"`
	// StripeGroups, DegradedStripeGroups, SyncingStripeGroups: the volume's
	// stripe groups, those with a member down, and those being rebuilt.
	StripeGroups         int   `json:"stripe_groups,omitempty"`
	DegradedStripeGroups int   `json:"degraded_stripe_groups,omitempty"`
	SyncingStripeGroups  int   `json:"syncing_stripe_groups,omitempty"`
	SpaceReportMsAgo     int64 `json:"space_report_ms_ago"`
}

func (s *Server) Status(ctx context.Context, r *pb.StatusRequest) (*pb.StatusResponse, error) {
	resp, err := forward(s, ctx, func() (*pb.StatusResponse, error) {
		st := s.status(time.Now())
		b, err := json.Marshal(st)
		return &pb.StatusResponse{StatusJson: b}, err
	}, func(cl pb.CoordinatorClient) (*pb.StatusResponse, error) { return cl.Status(ctx, r) })
	if resp != nil {
		resp.TimeUnixNs = time.Now().UnixNano() // this coordinator's clock, for `plumeria doctor`
	}
	return resp, err
}

func msAgo(seen map[string]time.Time, name string, now time.Time) int64 {
	t, ok := seen[name]
	if !ok {
		return -1
	}
	return now.Sub(t).Milliseconds()
}

func (s *Server) status(now time.Time) Status {
	m := s.fsm.Map()
	st := Status{Version: StatusVersion, MapEpoch: m.Epoch, Fences: m.Fences, FencesInForce: m.FencesInForce}
	_, leaderID := s.raft.LeaderWithID()
	st.Leader = string(leaderID)
	s.mu.Lock()
	defer s.mu.Unlock()
	st.Coordinators, _ = s.coordinatorsLocked(leaderID, now)
	for _, b := range m.Bricks {
		u := s.mu.usage[b.Name]
		st.Bricks = append(st.Bricks, BrickStatus{Name: b.Name, Addr: b.Addr, State: string(b.State), Draining: b.Draining,
			Class: b.ClassName(), Full: b.Full,
			Domain: b.Domain, UsedBytes: u.used, CapacityBytes: max(u.capacity, b.CapacityBytes),
			PGs: clustermap.PGsOn(m, b.Name), LastSeen: msAgo(s.mu.seen, b.Name, now), IO: u.io})
	}
	for _, l := range m.LockServers {
		ls := LockServerStatus{Name: l.Name, Addr: l.Addr, State: string(l.State), LastSeen: msAgo(s.mu.seen, l.Name, now)}
		for _, g := range m.LockGroups {
			if g.Server == l.Name {
				ls.Groups++
			}
		}
		st.LockServers = append(st.LockServers, ls)
	}
	st.Sessions = m.Sessions
	st.Revoked = m.RevokedNames()
	for _, t := range m.Tokens {
		if t.Expires > now.UnixNano() {
			st.Tokens = append(st.Tokens, TokenStatus{ID: t.ID, Roles: t.Roles, Expires: time.Unix(0, t.Expires).UTC(), Used: len(t.Names)})
		}
	}
	st.Balance.Bricks, st.Balance.Deviation = clustermap.Balance(m)
	st.Balance.Deviation = math.Round(st.Balance.Deviation*100) / 100
	for i := range st.Balance.Bricks {
		st.Balance.Bricks[i].Target = math.Round(st.Balance.Bricks[i].Target*100) / 100
	}
	for _, v := range m.Volumes {
		vs := volumeStatus(m, v, s.mu.usage)
		vs.LiveBytes, vs.HistoryBytes, vs.SpaceReportMsAgo = volumeSpaceSum(m, v.ID, s.mu.usage, now)
		vs.StripeBytes = stripeSpaceSum(m, v.ID, s.mu.usage)
		st.Volumes = append(st.Volumes, vs)
	}
	return st
}

// volumeStatus counts v's chunks and its degraded, unavailable and syncing
// PGs. A replica counts toward a PG's health only if it is in sync and its
// brick is up: a PG keeps its last in-sync members while their bricks are
// down (clustermap.Reconcile, rule 2), and those hold its data but serve
// none of it. A PG's chunks are the most any in-sync member reported.
func volumeStatus(m *clustermap.Map, v clustermap.Volume, usage map[string]brickUsage) VolumeStatus {
	vs := VolumeStatus{Name: v.Name, ID: v.ID, Replicas: v.Replicas, ChunkBytes: v.ChunkBytes, PGs: len(v.PGs), Gen: v.Gen, FileVersions: v.FileVersions,
		Class: v.Class, Domain: v.Domain, StripeGroups: len(v.SGs)}
	for _, p := range v.Profiles {
		vs.Profiles = append(vs.Profiles, fmt.Sprintf("%d:%s", p.ID, p))
	}
	for _, g := range v.SGs {
		if len(g.Syncing) > 0 {
			vs.SyncingStripeGroups++
		}
		for _, b := range g.Bricks {
			if mb := m.Brick(b); mb == nil || mb.State != clustermap.BrickUp {
				vs.DegradedStripeGroups++
				break
			}
		}
	}
	for i, p := range v.PGs {
		var chunks int64
		live := 0
		for _, b := range p.InSync() {
			chunks = max(chunks, usage[b].chunks[pgKey{v.ID, uint32(i)}])
			if br := m.Brick(b); br != nil && br.State == clustermap.BrickUp {
				live++
			}
		}
		vs.Chunks += chunks
		if live < v.Replicas {
			vs.DegradedPGs++
			vs.DegradedChunks += chunks
		}
		if live == 0 {
			vs.UnavailablePGs++
		}
		if len(p.Syncing) > 0 {
			vs.SyncingPGs++
		}
	}
	for name := range v.Snapshots {
		vs.Snapshots = append(vs.Snapshots, name)
	}
	sort.Strings(vs.Snapshots)
	vs.Schedule = v.Schedule
	return vs
}

// volumeSpaceSum sums the up bricks' latest counts of vol's live and
// history bytes and returns the age of the oldest (-1: none). A down
// brick's count is left out: its disk serves nothing, and what it held
// may already be copied elsewhere.
func volumeSpaceSum(m *clustermap.Map, vol uint64, usage map[string]brickUsage, now time.Time) (live, history, ageMs int64) {
	ageMs = -1
	for name, u := range usage {
		sp, ok := u.space[vol]
		if b := m.Brick(name); !ok || b == nil || b.State != clustermap.BrickUp {
			continue
		}
		live += sp.live
		history += sp.history
		ageMs = max(ageMs, now.Sub(sp.taken).Milliseconds())
	}
	return live, history, ageMs
}

// stripeSpaceSum sums the up bricks' latest counts of vol's stripe bytes.
func stripeSpaceSum(m *clustermap.Map, vol uint64, usage map[string]brickUsage) int64 {
	var sum int64
	for name, u := range usage {
		if b := m.Brick(name); b != nil && b.State == clustermap.BrickUp {
			sum += u.space[vol].stripe
		}
	}
	return sum
}

// mergeSpace returns a brick's counts after a heartbeat at now carrying
// got: old's, replaced by got's for the volumes got has, without volumes
// m no longer has.
func mergeSpace(old map[uint64]volumeSpace, got []*pb.VolumeBytes, m *clustermap.Map, now time.Time) map[uint64]volumeSpace {
	out := make(map[uint64]volumeSpace, len(m.Volumes))
	for _, v := range m.Volumes {
		if sp, ok := old[v.ID]; ok {
			out[v.ID] = sp
		}
	}
	for _, vb := range got {
		if m.VolumeByID(vb.Vol) == nil {
			continue
		}
		out[vb.Vol] = volumeSpace{live: vb.LiveBytes, history: vb.HistoryBytes, stripe: vb.StripeBytes, taken: now.Add(-time.Duration(max(vb.AgeMs, 0)) * time.Millisecond)}
	}
	return out
}
