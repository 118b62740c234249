package clustermap_test

import (
	"slices"
	"testing"

	"github.com/plumeria-fs/plumeria/clustermap"
)

func lockLoad(m *clustermap.Map) map[string]int {
	l := map[string]int{}
	for _, g := range m.LockGroups {
		l[g.Server]++
	}
	return l
}

// settleLocks runs assignment rounds, every server having installed every
// map, until nothing changes.
func settleLocks(t *testing.T, m *clustermap.Map, alive map[string]bool) *clustermap.Map {
	t.Helper()
	for range 100 {
		inst := map[string]uint64{}
		for _, s := range m.LockServers {
			inst[s.Name] = m.Epoch
		}
		n := clustermap.AssignLockGroups(m, alive, inst)
		if n == nil {
			return m
		}
		mustValid(t, n)
		checkNoDirectMove(t, m, n)
		m = n
	}
	t.Fatal("lock group assignment does not settle")
	return nil
}

// checkNoDirectMove: a group never goes from one live owner to another in
// one step.
func checkNoDirectMove(t *testing.T, prev, next *clustermap.Map) {
	t.Helper()
	for i, g := range next.LockGroups {
		if i < len(prev.LockGroups) {
			p := prev.LockGroups[i]
			if p.Server != "" && g.Server != "" && p.Server != g.Server && next.LockServer(p.Server).State == clustermap.BrickUp {
				t.Fatalf("group %d moved straight from live %s to %s", i, p.Server, g.Server)
			}
		}
	}
}

func TestLockGroupsAssignBalanceAndMinimalMoves(t *testing.T) {
	m := &clustermap.Map{NextVolumeID: 1}
	var err error
	all := map[string]bool{}
	for _, s := range []string{"l1", "l2", "l3"} {
		if m, err = clustermap.PutLockServer(m, s, s+":1"); err != nil {
			t.Fatal(err)
		}
		mustValid(t, m)
		all[s] = true
		m = settleLocks(t, m, all)
	}
	l := lockLoad(m)
	for _, s := range []string{"l1", "l2", "l3"} {
		if l[s] < clustermap.LockGroupsN/3 || l[s] > clustermap.LockGroupsN/3+1 {
			t.Fatalf("unbalanced: %v", l)
		}
	}
	// l2 dies: only its groups move, with a new epoch.
	before := slices.Clone(m.LockGroups)
	n := clustermap.AssignLockGroups(m, map[string]bool{"l1": true, "l3": true}, nil)
	if n == nil {
		t.Fatal("death of l2 changed nothing")
	}
	mustValid(t, n)
	for i, g := range n.LockGroups {
		switch {
		case before[i].Server == "l2" && (g.Server == "l2" || g.Epoch != n.Epoch):
			t.Fatalf("group %d of dead l2: %+v", i, g)
		case before[i].Server != "l2" && g != before[i]:
			t.Fatalf("group %d of a live server moved: %+v → %+v", i, before[i], g)
		}
	}
	if n.LockServer("l2").State != clustermap.BrickDown {
		t.Fatal("l2 not marked down")
	}
	if again := clustermap.AssignLockGroups(n, map[string]bool{"l1": true, "l3": true}, nil); again != nil {
		t.Fatal("assignment does not settle")
	}
	// l2 restarts: a new incarnation, and it gets a fair share back.
	r, err := clustermap.PutLockServer(n, "l2", "l2:2")
	if err != nil {
		t.Fatal(err)
	}
	mustValid(t, r)
	checkNoDirectMove(t, n, r)
	r = settleLocks(t, r, all)
	if got := lockLoad(r)["l2"]; got < clustermap.LockGroupsN/3 || r.LockServer("l2").Incarnation != 2 {
		t.Fatalf("restarted l2 owns %d groups, incarnation %d", got, r.LockServer("l2").Incarnation)
	}
	moved := 0
	for i := range r.LockGroups {
		if r.LockGroups[i] != n.LockGroups[i] {
			moved++
		}
	}
	if moved > clustermap.LockGroupsN/3+1 {
		t.Fatalf("%d groups moved for a fair share of %d", moved, clustermap.LockGroupsN/3)
	}
}

func TestSessionsFencesAndRecovery(t *testing.T) {
	m := &clustermap.Map{NextVolumeID: 1}
	m1, s1, err := clustermap.OpenSession(m, "node1", []string{"vol"})
	if err != nil || s1 != 1 {
		t.Fatalf("first session %d, %v", s1, err)
	}
	mustValid(t, m1)
	m2, s2, err := clustermap.OpenSession(m1, "node1", []string{"vol"})
	if err != nil || s2 <= s1 || m2.FenceEpoch("node1") != s2 {
		t.Fatalf("remount: session %d, fence %d, %v", s2, m2.FenceEpoch("node1"), err)
	}
	if _, err := clustermap.RecordRecovered(m2, "node1", s1, "vol"); err == nil {
		t.Fatal("recovery recorded before the fence is in force")
	}
	if clustermap.MarkFenceInForce(m2, "node1", s2+1) != nil {
		t.Fatal("a fence above the recorded one marked in force")
	}
	m3 := clustermap.MarkFenceInForce(m2, "node1", s2)
	if m3 == nil || m3.FencesInForce["node1"] != s2 {
		t.Fatal("fence not marked in force")
	}
	m4, err := clustermap.RecordRecovered(m3, "node1", s1, "vol")
	if err != nil {
		t.Fatal(err)
	}
	mustValid(t, m4)
	if len(m4.Sessions) != 1 || m4.Sessions[0].Session != s2 || len(m4.Recovered) != 1 {
		t.Fatalf("after recovery: sessions %+v recovered %+v", m4.Sessions, m4.Recovered)
	}
	if _, _, err := clustermap.OpenSession(m4, "bad/name", nil); err == nil {
		t.Fatal("bad clerk name accepted")
	}
}

func TestCloseSession(t *testing.T) {
	m := &clustermap.Map{}
	m, s1, err := clustermap.OpenSession(m, "a", []string{"v", "w"})
	if err != nil {
		t.Fatal(err)
	}
	if clustermap.CloseSession(m, "a", s1+1, "v") != nil || clustermap.CloseSession(m, "b", s1, "v") != nil || clustermap.CloseSession(m, "a", s1, "x") != nil {
		t.Fatal("closed a session or table that is not registered")
	}
	n := clustermap.CloseSession(m, "a", s1, "v")
	if n == nil || len(n.Sessions) != 1 || !slices.Equal(n.Sessions[0].Tables, []string{"w"}) || n.Epoch != m.Epoch+1 {
		t.Fatalf("after closing v: %+v", n)
	}
	if len(m.Sessions[0].Tables) != 2 {
		t.Fatal("CloseSession changed its input")
	}
	n = clustermap.CloseSession(n, "a", s1, "w")
	if n == nil || len(n.Sessions) != 0 {
		t.Fatalf("after closing w: %+v", n)
	}
}
