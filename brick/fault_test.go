package brick

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/clustermap"
)

// TestFaultOutlivesLeadership: a fault recorded while this brick led a PG,
// whose reporting stopped when it lost the lead, is reported again when it
// leads the PG again (instead of refusing the PG's requests forever), and
// clears once the member is syncing under a newer Since.
func TestFaultOutlivesLeadership(t *testing.T) {
	s, reported := reportingServer(t)
	mapWith := func(epoch uint64, p clustermap.PG) *clustermap.Map {
		return &clustermap.Map{Epoch: epoch, Volumes: []clustermap.Volume{{ID: 1, Name: "v", PGs: []clustermap.PG{p}}}}
	}
	k := pgKey{1, 0}
	// b1 is no longer primary when b2's miss is recorded: reporting stops.
	s.serving.Store(mapWith(5, clustermap.PG{Bricks: []string{"b3", "b1", "b2"}, Since: 5}))
	s.markFault(k, 4, []string{"b2"})
	waitFor(t, func() bool {
		s.pgMu.Lock()
		defer s.pgMu.Unlock()
		return !s.pgFaultReporting[k]
	})
	// b1 leads again; b2 still in sync in the map: refused, and reported.
	m := mapWith(9, clustermap.PG{Bricks: []string{"b1", "b2", "b3"}, Since: 9})
	s.serving.Store(m)
	if err := s.checkFault(m, &m.Volumes[0], 0); err == nil {
		t.Fatal("a PG whose member missed a change served")
	}
	waitFor(t, func() bool {
		r := reported()
		return len(r) > 0 && r[len(r)-1] == "b2"
	})
	// The coordinator marks b2 syncing under a newer Since: resolved.
	m = mapWith(10, clustermap.PG{Bricks: []string{"b1", "b3", "b2"}, Syncing: []string{"b2"}, Since: 10})
	s.serving.Store(m)
	if err := s.checkFault(m, &m.Volumes[0], 0); err != nil {
		t.Fatalf("fault not resolved by a resync: %v", err)
	}
}

// reportingServer is a brick server (name b1) that records the members it
// reports as failed instead of calling a coordinator; stopped at cleanup.
func reportingServer(t *testing.T) (*Server, func() []string) {
	var mu sync.Mutex
	var reported []string
	s := &Server{cfg: Config{Name: "b1"}, stop: make(chan struct{}),
		pgFault: map[pgKey][]fault{}, pgFaultReporting: map[pgKey]bool{}}
	s.replicaFailed = func(_ context.Context, k pgKey, brick string) error {
		mu.Lock()
		defer mu.Unlock()
		reported = append(reported, brick)
		return nil
	}
	t.Cleanup(func() { close(s.stop); s.wg.Wait() })
	return s, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(reported)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSelfFaultReportedLast: when this primary and a backup both missed a
// change another member applied, the backup is reported first, so the
// lead the coordinator hands on never goes to a member without the change.
func TestSelfFaultReportedLast(t *testing.T) {
	s, reported := reportingServer(t)
	s.serving.Store(&clustermap.Map{Epoch: 4, Volumes: []clustermap.Volume{{ID: 1, Name: "v",
		PGs: []clustermap.PG{{Bricks: []string{"b1", "b2", "b3"}, Since: 4}}}}})
	s.markFault(pgKey{1, 0}, 4, []string{"b1", "b2"})
	waitFor(t, func() bool { return len(reported()) >= 2 })
	if r := reported(); r[0] != "b2" || r[1] != "b1" {
		t.Fatalf("reported in the order %v, want the backup before this primary", r)
	}
}
