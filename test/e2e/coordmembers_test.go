package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/coord"
)

func coordMember(st *coord.Status, name string) *coord.CoordinatorStatus {
	for i := range st.Coordinators {
		if st.Coordinators[i].Name == name {
			return &st.Coordinators[i]
		}
	}
	return nil
}

func coordStates(st *coord.Status) string {
	var s []string
	for _, m := range st.Coordinators {
		s = append(s, fmt.Sprintf("%s:voter=%v/up=%v/leader=%v", m.Name, m.Voter, m.Up, m.Leader))
	}
	return fmt.Sprintf("leader %q: %s", st.Leader, strings.Join(s, " "))
}

// TestCoordinatorMembership: three coordinators. `coord list` shows them;
// a follower is removed while running and the two others keep serving;
// restarted with its old Raft state and --join, it comes back. Then one
// coordinator dies: removing a live one is refused (the rest would lack a
// live majority), removing the dead one is not, and the two left serve.
func TestCoordinatorMembership(t *testing.T) {
	c := startCluster(t, 3, 1)
	c.createVolume("v1", 1)

	out := string(c.cli("coord", "list", c.coordArg()))
	if strings.Count(out, " leader ") != 1 || !strings.Contains(out, "VOTER") {
		t.Fatalf("coord list:\n%s", out)
	}
	for _, n := range []string{"c1", "c2", "c3"} {
		if !strings.Contains(out, n+" ") || !strings.Contains(out, c.procs[n].addr) {
			t.Fatalf("coord list does not show %s at %s:\n%s", n, c.procs[n].addr, out)
		}
	}

	// The leader refuses a removal unless the members that stay are heard
	// from: wait until it has heard from every one.
	st := c.waitStatus(30*time.Second, "every coordinator up", func(st *coord.Status) (bool, string) {
		up := 0
		for _, m := range st.Coordinators {
			if m.Up {
				up++
			}
		}
		return up == 3, coordStates(st)
	})
	// A follower started with --join (c1 bootstrapped and has none).
	victim := "c3"
	if st.Leader == "c3" {
		victim = "c2"
	}
	c.cli("coord", "remove", c.coordArg(), victim)
	c.waitStatus(30*time.Second, victim+" gone from the coordinator group", func(st *coord.Status) (bool, string) {
		return len(st.Coordinators) == 2 && coordMember(st, victim) == nil && st.Leader != "", coordStates(st)
	})
	c.stop(victim) // removed: its Raft shut down; the process only idles
	c.createVolume("v2", 1)

	c.restart(victim)
	c.waitStatus(60*time.Second, victim+" back as a voter", func(st *coord.Status) (bool, string) {
		m := coordMember(st, victim)
		return len(st.Coordinators) == 3 && m != nil && m.Voter && m.Up, coordStates(st)
	})
	c.createVolume("v3", 1)

	// Kill a follower: removing any other member would leave two voters
	// with one up.
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	var followers []string
	for _, m := range st.Coordinators {
		if !m.Leader {
			followers = append(followers, m.Name)
		}
	}
	slices.Sort(followers)
	dead, live := followers[0], followers[1]
	c.kill(dead)
	c.waitStatus(30*time.Second, dead+" shown down", func(st *coord.Status) (bool, string) {
		m := coordMember(st, dead)
		return m != nil && !m.Up && st.Leader != "", coordStates(st)
	})
	for _, name := range []string{live, st.Leader} {
		r := c.run(cliTimeout, nil, "coord", "remove", c.coordArg(), name)
		msg := strings.TrimSpace(string(r.stderr))
		if r.code == 0 || !strings.Contains(msg, "refusing to remove coordinator "+name) || !strings.Contains(msg, "majority") || strings.Contains(msg, "\n") {
			t.Errorf("removing %s with %s dead: %s", name, dead, r)
		}
	}
	r := c.run(cliTimeout, nil, "coord", "remove", c.coordArg(), "nope")
	if r.code == 0 || !strings.Contains(string(r.stderr), `no coordinator "nope"`) {
		t.Errorf("removing an unknown coordinator: %s", r)
	}
	c.cli("coord", "remove", c.coordArg(), dead)
	c.waitStatus(30*time.Second, "two coordinators, both up", func(st *coord.Status) (bool, string) {
		up := 0
		for _, m := range st.Coordinators {
			if m.Up {
				up++
			}
		}
		return len(st.Coordinators) == 2 && up == 2 && coordMember(st, dead) == nil, coordStates(st)
	})
	c.createVolume("v4", 1)
}
