package coord

import (
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// TestVolumeStatusDownReplicas: a PG whose in-sync members include down
// bricks is degraded, and unavailable when none is up. Reconcile keeps a
// PG's last in-sync members while they are down (rule 2), so a 1-replica
// PG on a dead brick still lists it as in sync: status used to call it
// healthy.
func TestVolumeStatusDownReplicas(t *testing.T) {
	brick := func(name string) clustermap.Brick {
		return clustermap.Brick{Name: name, Addr: name + ":1", State: clustermap.BrickUp, Domain: map[string]string{"host": name}}
	}
	pgs := func(n int, bricks ...string) []clustermap.PG {
		out := make([]clustermap.PG, n)
		for i := range out {
			out[i] = clustermap.PG{Bricks: bricks}
		}
		return out
	}
	m := &clustermap.Map{Epoch: 1, Bricks: []clustermap.Brick{brick("b1"), brick("b2"), brick("b3")},
		Volumes: []clustermap.Volume{
			{ID: 1, Name: "one", Replicas: 1, ChunkBytes: 65536, Gen: 1, PGs: pgs(4, "b3")},
			{ID: 2, Name: "two", Replicas: 2, ChunkBytes: 65536, Gen: 1, PGs: pgs(4, "b2", "b3")},
			{ID: 3, Name: "three", Replicas: 3, ChunkBytes: 65536, Gen: 1, PGs: pgs(4, "b1", "b2", "b3")},
			{ID: 4, Name: "safe", Replicas: 1, ChunkBytes: 65536, Gen: 1, PGs: pgs(4, "b1")},
		}}
	usage := map[string]brickUsage{}
	for _, b := range []string{"b1", "b2", "b3"} {
		u := brickUsage{chunks: map[pgKey]int64{}}
		for vol := uint64(1); vol <= 4; vol++ {
			for pg := uint32(0); pg < 4; pg++ {
				u.chunks[pgKey{vol, pg}] = 10
			}
		}
		usage[b] = u
	}
	check := func(m *clustermap.Map, name string, degraded, unavailable int) {
		t.Helper()
		v := volumeStatus(m, *m.Volume(name), usage)
		if v.PGs != 4 || v.Chunks != 40 || v.DegradedPGs != degraded || v.DegradedChunks != int64(10*degraded) || v.UnavailablePGs != unavailable {
			t.Errorf("volume %s: %+v; want %d degraded PGs (%d chunks), %d unavailable", name, v, degraded, 10*degraded, unavailable)
		}
	}
	for _, name := range []string{"one", "two", "three", "safe"} {
		check(m, name, 0, 0)
	}

	// b3 dies: the map the leader makes of it.
	n := clustermap.Reconcile(m, map[string]bool{"b1": true, "b2": true})
	if n == nil || n.Brick("b3").State != clustermap.BrickDown {
		t.Fatalf("Reconcile did not mark b3 down: %+v", n)
	}
	if got := n.Volume("one").PGs[0].InSync(); len(got) != 1 || got[0] != "b3" {
		t.Fatalf("1-replica PG on b3: in sync %v, want [b3] (kept: nowhere else has its data)", got)
	}
	check(n, "one", 4, 4)   // its only replica is down
	check(n, "two", 4, 0)   // b2 serves, b3 gone
	check(n, "three", 4, 0) // no spare host to rebuild on
	check(n, "safe", 0, 0)

	// b2 dies too: "two" keeps both its down members, serves nothing.
	n2 := clustermap.Reconcile(n, map[string]bool{"b1": true})
	if n2 == nil {
		t.Fatal("Reconcile did not mark b2 down")
	}
	check(n2, "two", 4, 4)
	check(n2, "three", 4, 0)
}

// TestVolumeSpace: a volume's live and history bytes are the sums of the
// up bricks' latest counts, dated by the oldest; a heartbeat without
// counts keeps the brick's last ones, and counts of volumes the map no
// longer has are dropped.
func TestVolumeSpace(t *testing.T) {
	now := time.Unix(1000, 0)
	m := &clustermap.Map{Epoch: 1, Volumes: []clustermap.Volume{{ID: 1, Name: "one"}, {ID: 2, Name: "two"}},
		Bricks: []clustermap.Brick{{Name: "b1", State: clustermap.BrickUp}, {Name: "b2", State: clustermap.BrickUp}, {Name: "b3", State: clustermap.BrickDown}}}
	usage := map[string]brickUsage{}
	beat := func(b string, at time.Time, vbs ...*pb.VolumeBytes) {
		u := usage[b]
		u.space = mergeSpace(u.space, vbs, m, at)
		usage[b] = u
	}
	check := func(what string, vol uint64, live, history, ageMs int64) {
		t.Helper()
		l, h, a := volumeSpaceSum(m, vol, usage, now)
		if l != live || h != history || a != ageMs {
			t.Errorf("%s: vol %d: live %d history %d age %d ms; want %d %d %d", what, vol, l, h, a, live, history, ageMs)
		}
	}
	check("nothing reported", 1, 0, 0, -1)
	beat("b1", now.Add(-time.Second), &pb.VolumeBytes{Vol: 1, LiveBytes: 10, HistoryBytes: 5, AgeMs: 500}, &pb.VolumeBytes{Vol: 9, LiveBytes: 1})
	beat("b2", now, &pb.VolumeBytes{Vol: 1, LiveBytes: 20, HistoryBytes: 7, AgeMs: 100}, &pb.VolumeBytes{Vol: 2, LiveBytes: 3})
	beat("b3", now, &pb.VolumeBytes{Vol: 1, LiveBytes: 1000, HistoryBytes: 1000})
	check("reported", 1, 30, 12, 1500)
	check("reported", 2, 3, 0, 0)
	if _, ok := usage["b1"].space[9]; ok {
		t.Errorf("b1 keeps a count of volume 9, which the map lacks")
	}
	beat("b1", now)
	check("heartbeat without counts", 1, 30, 12, 1500)
	beat("b1", now, &pb.VolumeBytes{Vol: 1, LiveBytes: 10, HistoryBytes: 1})
	check("history pruned at b1", 1, 30, 8, 100)
	m.Volumes = m.Volumes[1:]
	beat("b2", now)
	if _, ok := usage["b2"].space[1]; ok {
		t.Errorf("b2 keeps a count of deleted volume 1")
	}
}
