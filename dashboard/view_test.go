package dashboard

import (
	"reflect"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coord"
)

func testStatus() *coord.Status {
	return &coord.Status{
		Version: coord.StatusVersion, MapEpoch: 42, Leader: "c1",
		Coordinators: []coord.CoordinatorStatus{
			{Name: "c1", Addr: "a:1", Leader: true, Up: true, Voter: true, LastSeen: -1},
			{Name: "c2", Addr: "a:2", Up: false, Voter: true, LastSeen: 9000},
			{Name: "c3", Addr: "a:3", Up: true, Voter: false, LastSeen: 100},
		},
		Bricks: []coord.BrickStatus{
			{Name: "b1", State: "up", Domain: map[string]string{"host": "h1", "rack": "r1"}, UsedBytes: 25, CapacityBytes: 100, PGs: 64},
			{Name: "b2", State: "down", Domain: map[string]string{"host": "h2", "rack": "r1"}, UsedBytes: 0, CapacityBytes: 100, PGs: 64, LastSeen: 5000},
			{Name: "b3", State: "up", Draining: true, Domain: map[string]string{"host": "h1", "rack": "r1"}, CapacityBytes: 0},
			{Name: "b4", State: "down", Draining: true},
		},
		Volumes: []coord.VolumeStatus{
			{Name: "ok", PGs: 10, Chunks: 5},
			{Name: "deg", PGs: 10, DegradedPGs: 4, DegradedChunks: 9, Chunks: 20},
			{Name: "reb", PGs: 10, DegradedPGs: 5, SyncingPGs: 2, DegradedChunks: 3, Snapshots: []string{"s1", "s2"},
				LiveBytes: 300, HistoryBytes: 200, SpaceReportMsAgo: 1000},
		},
		LockServers:   []coord.LockServerStatus{{Name: "l1", State: "up", Groups: 128}},
		Fences:        map[string]uint64{"fs1": 3, "fs2": 5, "fs3": 2},
		FencesInForce: map[string]uint64{"fs1": 3, "fs2": 4},
		Sessions: []clustermap.Session{
			{Clerk: "fs1", Session: 2, Tables: []string{"fs"}}, // fence 3 in force: recovering
			{Clerk: "fs1", Session: 3, Tables: []string{"fs"}}, // current
			{Clerk: "fs2", Session: 4, Tables: []string{"fs"}}, // fenced at 5, in force only at 4
			{Clerk: "fs3", Session: 2},                         // current, no tables
		},
	}
}

func TestBuildView(t *testing.T) {
	now := time.UnixMilli(5_000_000)
	seen := map[sessionKey]time.Time{{"fs1", 3}: now.Add(-90 * time.Second)}
	v := buildView(testStatus(), seen, RebuildView{Progress: 1}, now)

	states := map[string]string{}
	for _, b := range v.Bricks {
		states[b.Name] = b.State
	}
	if want := map[string]string{"b1": "up", "b2": "down", "b3": "draining", "b4": "down"}; !reflect.DeepEqual(states, want) {
		t.Errorf("brick states %v, want %v", states, want)
	}
	if b := v.Bricks[0]; b.UsedPct != 25 || b.DomainLabel != "rack=r1 / host=h1" {
		t.Errorf("b1: used %v%% domain %q", b.UsedPct, b.DomainLabel)
	}
	if v.Bricks[2].UsedPct != 0 {
		t.Errorf("unknown capacity gives %v%% used, want 0", v.Bricks[2].UsedPct)
	}
	wantDomains := []DomainView{
		{Label: "(no domain)", Bricks: []string{"b4"}, Down: 1},
		{Label: "rack=r1 / host=h1", Rack: "r1", Host: "h1", Bricks: []string{"b1", "b3"}},
		{Label: "rack=r1 / host=h2", Rack: "r1", Host: "h2", Bricks: []string{"b2"}, Down: 1},
	}
	if !reflect.DeepEqual(v.Domains, wantDomains) {
		t.Errorf("domains\n got %+v\nwant %+v", v.Domains, wantDomains)
	}
	s := v.Summary
	if s.BricksUp != 2 || s.BricksDown != 2 || s.BricksDraining != 1 || s.CapacityBytes != 200 || s.UsedBytes != 25 {
		t.Errorf("summary bricks/capacity %+v", s)
	}
	if s.DegradedChunks != 12 || s.DegradedPGs != 9 || s.SyncingPGs != 2 || s.PGs != 30 || s.Chunks != 25 || s.Health != "rebuilding" {
		t.Errorf("summary data %+v", s)
	}
	vols := map[string]string{}
	for _, x := range v.Volumes {
		vols[x.Name] = x.State
	}
	if want := map[string]string{"ok": "healthy", "deg": "degraded", "reb": "rebuilding"}; !reflect.DeepEqual(vols, want) {
		t.Errorf("volume states %v, want %v", vols, want)
	}
	if x := v.Volumes[1]; x.InSyncPct != 60 {
		t.Errorf("deg in sync %v%%, want 60", x.InSyncPct)
	}
	if v.Volumes[2].Snapshots != 2 {
		t.Errorf("reb snapshots %d, want 2", v.Volumes[2].Snapshots)
	}
	if x, y := v.Volumes[2], v.Volumes[0]; x.LiveBytes != 300 || x.HistoryBytes != 200 || y.LiveBytes != 0 || y.HistoryBytes != 0 {
		t.Errorf("live/history bytes: reb %d/%d, want 300/200; ok (reported 0 ms ago) %d/%d, want 0/0", x.LiveBytes, x.HistoryBytes, y.LiveBytes, y.HistoryBytes)
	}
	roles := []string{}
	for _, c := range v.Coordinators {
		roles = append(roles, c.Role+"/"+c.State)
	}
	if want := []string{"leader/up", "follower/down", "non-voter/up"}; !reflect.DeepEqual(roles, want) {
		t.Errorf("coordinators %v, want %v", roles, want)
	}
	sess := []string{}
	for _, x := range v.Sessions {
		sess = append(sess, x.State)
	}
	if want := []string{"recovering", "active", "fenced", "active"}; !reflect.DeepEqual(sess, want) {
		t.Errorf("session states %v, want %v", sess, want)
	}
	if v.Sessions[1].AgeMs != 90_000 || v.Sessions[0].AgeMs != -1 {
		t.Errorf("session ages %d and %d, want 90000 and -1 (never seen)", v.Sessions[1].AgeMs, v.Sessions[0].AgeMs)
	}
	if v.Sessions[3].Tables == nil {
		t.Errorf("no tables encodes as null, want []")
	}
	if len(v.Recoveries) != 2 || v.Recoveries[0].Clerk != "fs1" || v.Recoveries[1].Clerk != "fs2" {
		t.Errorf("recoveries %+v, want fs1/2 and fs2/4", v.Recoveries)
	}
}

func TestHealth(t *testing.T) {
	st := testStatus()
	st.Volumes, st.Bricks = nil, nil
	if h := buildView(st, nil, RebuildView{}, time.Now()).Summary.Health; h != "healthy" {
		t.Errorf("health %q, want healthy", h)
	}
	st.Bricks = []coord.BrickStatus{{Name: "b1", State: "down"}}
	if h := buildView(st, nil, RebuildView{}, time.Now()).Summary.Health; h != "degraded" {
		t.Errorf("a brick down: health %q, want degraded", h)
	}
	st.Leader = ""
	if h := buildView(st, nil, RebuildView{}, time.Now()).Summary.Health; h != "no-leader" {
		t.Errorf("no leader: health %q, want no-leader", h)
	}
	empty := buildView(&coord.Status{Leader: "c1"}, nil, RebuildView{}, time.Now())
	if empty.Bricks == nil || empty.Volumes == nil || empty.Sessions == nil || empty.Recoveries == nil || empty.Domains == nil {
		t.Errorf("empty lists must encode as [], got %+v", empty)
	}
}
