package dashboard

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coord"
)

// View is what the page draws: the status of `plumeria status --json`
// with every state already decided, so the page's script only renders.
// Served at /api/view; its fields may change with the page.
type View struct {
	GeneratedMs  int64            `json:"generated_ms"` // unix milliseconds
	Leader       string           `json:"leader"`
	MapEpoch     uint64           `json:"map_epoch"`
	Summary      Summary          `json:"summary"`
	Domains      []DomainView     `json:"domains"` // bricks grouped by failure domain
	Bricks       []BrickView      `json:"bricks"`
	Volumes      []VolumeView     `json:"volumes"`
	Coordinators []MemberView     `json:"coordinators"`
	LockServers  []MemberView     `json:"lock_servers"`
	Sessions     []SessionView    `json:"sessions"`   // every registered clerk session
	Recoveries   []SessionView    `json:"recoveries"` // sessions fenced, their logs not yet recovered
	Rebuild      RebuildView      `json:"rebuild"`
	Latest       *Sample          `json:"latest,omitempty"` // the newest sample, if any
	Series       *SeriesReference `json:"series"`
}

// Summary is the cluster at a glance.
type Summary struct {
	Health         string `json:"health"` // "healthy", "degraded", "rebuilding" or "no-leader"
	BricksUp       int    `json:"bricks_up"`
	BricksDown     int    `json:"bricks_down"`
	BricksDraining int    `json:"bricks_draining"`
	UsedBytes      int64  `json:"used_bytes"`
	CapacityBytes  int64  `json:"capacity_bytes"`
	Chunks         int64  `json:"chunks"`
	DegradedChunks int64  `json:"degraded_chunks"`
	DegradedPGs    int    `json:"degraded_pgs"`
	SyncingPGs     int    `json:"syncing_pgs"`
	PGs            int    `json:"pgs"`
}

// BrickView is one brick. State is "up", "down" or "draining" (up and
// asked to move its data off); a down brick that was draining is "down".
type BrickView struct {
	Name          string            `json:"name"`
	Addr          string            `json:"addr"`
	State         string            `json:"state"`
	Draining      bool              `json:"draining"`
	Domain        map[string]string `json:"domain,omitempty"`
	DomainLabel   string            `json:"domain_label"` // "site/rack/host", levels left out when unset
	UsedBytes     int64             `json:"used_bytes"`
	CapacityBytes int64             `json:"capacity_bytes"`
	UsedPct       float64           `json:"used_pct"`
	PGs           int               `json:"pgs"`
	LastSeenMs    int64             `json:"last_seen_ms_ago"` // -1: never heard by the leader
}

// DomainView is one host (within its rack and site) and its bricks.
type DomainView struct {
	Label  string   `json:"label"` // as BrickView.DomainLabel
	Site   string   `json:"site,omitempty"`
	Rack   string   `json:"rack,omitempty"`
	Host   string   `json:"host,omitempty"`
	Bricks []string `json:"bricks"`
	Down   int      `json:"down"` // bricks of this domain that are down
}

// VolumeView is one volume. State is "healthy", "degraded" (fewer in-sync
// replicas than wanted and nothing backfilling) or "rebuilding".
type VolumeView struct {
	Name           string  `json:"name"`
	Replicas       int     `json:"replicas"`
	ChunkBytes     uint32  `json:"chunk_bytes"`
	PGs            int     `json:"pgs"`
	Chunks         int64   `json:"chunks"`
	DegradedChunks int64   `json:"degraded_chunks"`
	DegradedPGs    int     `json:"degraded_pgs"`
	SyncingPGs     int     `json:"syncing_pgs"`
	InSyncPct      float64 `json:"in_sync_pct"` // PGs with every replica in sync
	State          string  `json:"state"`
	Snapshots      int     `json:"snapshots"`
	// LiveBytes, HistoryBytes: coord.VolumeStatus's (raw bytes, replicas
	// counted); -1 until a brick has reported them.
	LiveBytes    int64 `json:"live_bytes"`
	HistoryBytes int64 `json:"history_bytes"`
}

// MemberView is a coordinator or a lock server. Role is "leader",
// "follower" or "non-voter" for coordinators, "lock server" otherwise.
type MemberView struct {
	Name       string `json:"name"`
	Addr       string `json:"addr"`
	Role       string `json:"role"`
	State      string `json:"state"` // "up" or "down"
	Groups     int    `json:"groups,omitempty"`
	LastSeenMs int64  `json:"last_seen_ms_ago"`
}

// SessionView is a mounted clerk session (an fs node). State is "active";
// "fenced" (a newer session or a lock server fenced it; its log awaits
// recovery); or "recovering" (the fence is in force on every brick and lock
// servers are replaying its log in the tables still listed).
type SessionView struct {
	Clerk   string   `json:"clerk"`
	Session uint64   `json:"session"`
	Tables  []string `json:"tables"`
	State   string   `json:"state"`
	// AgeMs: since this coordinator's dashboard first saw the session in
	// the map (-1 unknown). Lease renewals go to lock servers, which do not
	// report them to the coordinator.
	AgeMs int64 `json:"age_ms"`
}

// RebuildView follows the current episode of degraded data: Peak is the
// most degraded chunks seen since the cluster was last fully replicated,
// and Progress how much of it is back in sync (1 when nothing is degraded).
type RebuildView struct {
	Active         bool    `json:"active"` // some PG is backfilling
	DegradedChunks int64   `json:"degraded_chunks"`
	PeakChunks     int64   `json:"peak_chunks"`
	Progress       float64 `json:"progress"`
}

// SeriesReference tells the page where the charts' data is.
type SeriesReference struct {
	URL        string `json:"url"`
	IntervalMs int64  `json:"interval_ms"`
	WindowMs   int64  `json:"window_ms"`
}

// sessionKey names a clerk session.
type sessionKey struct {
	clerk   string
	session uint64
}

// buildView derives the view from a status. firstSeen gives when each
// session was first seen (missing: unknown); now is the view's time.
func buildView(st *coord.Status, firstSeen map[sessionKey]time.Time, rb RebuildView, now time.Time) View {
	v := View{GeneratedMs: now.UnixMilli(), Leader: st.Leader, MapEpoch: st.MapEpoch, Rebuild: rb,
		Bricks: []BrickView{}, Domains: []DomainView{}, Volumes: []VolumeView{}, Coordinators: []MemberView{},
		LockServers: []MemberView{}, Sessions: []SessionView{}, Recoveries: []SessionView{}}
	domains := map[string]*DomainView{}
	for _, b := range st.Bricks {
		bv := brickView(b)
		v.Bricks = append(v.Bricks, bv)
		switch bv.State {
		case "down":
			v.Summary.BricksDown++
		case "draining":
			v.Summary.BricksDraining++
			v.Summary.BricksUp++ // a draining brick still serves
		default:
			v.Summary.BricksUp++
		}
		v.Summary.UsedBytes += b.UsedBytes
		v.Summary.CapacityBytes += b.CapacityBytes
		d := domains[bv.DomainLabel]
		if d == nil {
			d = &DomainView{Label: bv.DomainLabel, Site: b.Domain["site"], Rack: b.Domain["rack"], Host: b.Domain["host"]}
			domains[bv.DomainLabel] = d
		}
		d.Bricks = append(d.Bricks, b.Name)
		if bv.State == "down" {
			d.Down++
		}
	}
	for _, d := range domains {
		v.Domains = append(v.Domains, *d)
	}
	sort.Slice(v.Domains, func(i, j int) bool { return v.Domains[i].Label < v.Domains[j].Label })
	for _, vol := range st.Volumes {
		vv := volumeView(vol)
		v.Volumes = append(v.Volumes, vv)
		v.Summary.Chunks += vol.Chunks
		v.Summary.DegradedChunks += vol.DegradedChunks
		v.Summary.DegradedPGs += vol.DegradedPGs
		v.Summary.SyncingPGs += vol.SyncingPGs
		v.Summary.PGs += vol.PGs
	}
	for _, c := range st.Coordinators {
		role := "follower"
		switch {
		case c.Leader:
			role = "leader"
		case !c.Voter:
			role = "non-voter"
		}
		v.Coordinators = append(v.Coordinators, MemberView{Name: c.Name, Addr: c.Addr, Role: role, State: upDown(c.Up), LastSeenMs: c.LastSeen})
	}
	for _, l := range st.LockServers {
		v.LockServers = append(v.LockServers, MemberView{Name: l.Name, Addr: l.Addr, Role: "lock server", State: l.State,
			Groups: l.Groups, LastSeenMs: l.LastSeen})
	}
	for _, s := range st.Sessions {
		sv := sessionView(st, s, firstSeen, now)
		v.Sessions = append(v.Sessions, sv)
		if sv.State != "active" {
			v.Recoveries = append(v.Recoveries, sv)
		}
	}
	v.Summary.Health = health(st, v.Summary)
	return v
}

func sessionView(st *coord.Status, s clustermap.Session, firstSeen map[sessionKey]time.Time, now time.Time) SessionView {
	sv := SessionView{Clerk: s.Clerk, Session: s.Session, Tables: s.Tables, State: "active", AgeMs: -1}
	if sv.Tables == nil {
		sv.Tables = []string{}
	}
	switch {
	case st.FencesInForce[s.Clerk] > s.Session:
		sv.State = "recovering"
	case st.Fences[s.Clerk] > s.Session:
		sv.State = "fenced"
	}
	if t, ok := firstSeen[sessionKey{s.Clerk, s.Session}]; ok {
		sv.AgeMs = max(now.Sub(t).Milliseconds(), 0)
	}
	return sv
}

func brickView(b coord.BrickStatus) BrickView {
	bv := BrickView{Name: b.Name, Addr: b.Addr, State: b.State, Draining: b.Draining, Domain: b.Domain,
		DomainLabel: domainLabel(b.Domain), UsedBytes: b.UsedBytes, CapacityBytes: b.CapacityBytes, PGs: b.PGs, LastSeenMs: b.LastSeen}
	if bv.State != "down" && b.Draining {
		bv.State = "draining"
	}
	if b.CapacityBytes > 0 {
		bv.UsedPct = 100 * float64(b.UsedBytes) / float64(b.CapacityBytes)
	}
	return bv
}

func volumeView(vol coord.VolumeStatus) VolumeView {
	vv := VolumeView{Name: vol.Name, Replicas: vol.Replicas, ChunkBytes: vol.ChunkBytes, PGs: vol.PGs, Chunks: vol.Chunks,
		DegradedChunks: vol.DegradedChunks, DegradedPGs: vol.DegradedPGs, SyncingPGs: vol.SyncingPGs,
		Snapshots: len(vol.Snapshots), State: "healthy", InSyncPct: 100, LiveBytes: vol.LiveBytes, HistoryBytes: vol.HistoryBytes}
	if vol.SpaceReportMsAgo < 0 {
		vv.LiveBytes, vv.HistoryBytes = -1, -1
	}
	if vol.PGs > 0 {
		vv.InSyncPct = 100 * float64(vol.PGs-vol.DegradedPGs) / float64(vol.PGs)
	}
	switch {
	case vol.SyncingPGs > 0:
		vv.State = "rebuilding"
	case vol.DegradedPGs > 0:
		vv.State = "degraded"
	}
	return vv
}

// domainLabel names a brick's failure domain from the widest level down.
func domainLabel(d map[string]string) string {
	var parts []string
	for _, k := range []string{"site", "rack", "host"} {
		if v := d[k]; v != "" {
			parts = append(parts, fmt.Sprintf("%s=%s", k, v))
		}
	}
	if len(parts) == 0 {
		return "(no domain)"
	}
	return strings.Join(parts, " / ")
}

func health(st *coord.Status, s Summary) string {
	switch {
	case st.Leader == "":
		return "no-leader"
	case s.SyncingPGs > 0:
		return "rebuilding"
	case s.DegradedPGs > 0 || s.BricksDown > 0:
		return "degraded"
	}
	return "healthy"
}

func upDown(up bool) string {
	if up {
		return "up"
	}
	return "down"
}
