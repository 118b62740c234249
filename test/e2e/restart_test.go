package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/coord"
)

// TestRestartedBrickCatchesUp: a brick is SIGKILLed; while it is down the
// volume gets new writes, overwrites and decommits. Restarted on the same
// data directory, it must rejoin and catch up; then the two other bricks
// are killed one after the other, and the restarted brick alone must serve
// every byte as it should be now (new data, overwritten data, zeros).
func TestRestartedBrickCatchesUp(t *testing.T) {
	_, rng := seed(t)
	size := int64(32 << 20)
	if testing.Short() {
		size = 8 << 20
	}
	c := startCluster(t, 1, 3)
	c.createVolume("vol", 3)
	v := c.open("vol", "w1")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sl := newSlots(rng)
	order := rng.Perm(3)
	name := func(i int) string { return fmt.Sprintf("b%d", order[i]+1) }
	victim := name(0)

	before := sl.scattered(size)
	w := &writer{v: v, workers: 8}
	w.writeAll(ctx, before)
	if res := summarise(before); len(res.failed) > 0 {
		t.Fatalf("writes with every brick up failed: %s", res)
	}

	c.kill(victim)
	c.waitBrickState(victim, "down", brickDownAfter+20*time.Second)
	// While the victim is down: new data, overwrites of old extents (the
	// victim keeps stale copies) and decommits (it keeps blocks that must go).
	during := sl.scattered(size)
	var overwritten, origins, decommitted []*extent
	for i, e := range before {
		switch i % 4 {
		case 0, 1:
			fresh := &extent{off: e.off, data: make([]byte, len(e.data))}
			fill(rng, fresh.data)
			overwritten = append(overwritten, fresh)
			origins = append(origins, e)
		case 2:
			decommitted = append(decommitted, e)
		}
	}
	w.writeAll(ctx, append(during, overwritten...))
	if res := summarise(append(during, overwritten...)); len(res.failed) > 0 {
		t.Fatalf("writes with one brick down failed: %s", res)
	}
	for _, e := range decommitted {
		if err := v.Decommit(ctx, e.off, uint64(len(e.data))); err != nil {
			t.Fatalf("decommit %v with one brick down: %v", e, err)
		}
		zeroExtent(e)
	}
	for j, e := range origins {
		e.data = overwritten[j].data
	}
	all := append(before, during...)
	c.logf("while %s was down: %d new extents, %d overwritten, %d decommitted", victim, len(during), len(overwritten), len(decommitted))
	c.waitStatus(30*time.Second, "volume vol degraded while "+victim+" is down", func(st *coord.Status) (bool, string) {
		v := volumeOf(st, "vol")
		return v != nil && v.DegradedChunks > 0, volState(st, "vol")
	})

	c.restart(victim)
	c.waitBrickState(victim, "up", 30*time.Second)
	var live []*extent
	for _, e := range all {
		if !slices.Contains(decommitted, e) {
			live = append(live, e)
		}
	}
	st := c.waitHealthy("vol", chunksOf(live, chunkBytes), 2*time.Minute)
	if b := brickOf(st, victim); b.PGs != volumeOf(st, "vol").PGs {
		t.Errorf("restarted %s is in %d PGs, want all %d (3 bricks, 3 replicas)", victim, b.PGs, volumeOf(st, "vol").PGs)
	}
	verify(t, ctx, v, all)

	for _, other := range []string{name(1), name(2)} {
		c.kill(other)
		c.waitBrickState(other, "down", brickDownAfter+20*time.Second)
		c.logf("verifying with %s down", other)
		verify(t, ctx, v, all)
	}
}
