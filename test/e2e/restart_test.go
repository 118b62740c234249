package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coord"
)

// TestRestartedBrickCatchesUp: a brick is SIGKILLed; while it is down the
// volume gets new writes, overwrites, decommits, a snapshot and more
// overwrites. Restarted on the same data directory, it must rejoin and
// catch up; then the two other bricks are killed one after the other, and
// the restarted brick alone must serve every byte as it should be now (new
// data, overwritten data, zeros), and as the two snapshots saw it.
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

	c.cli("vdisk", "snapshot", c.coordArg(), "--volume", "vol", "--name", "up")
	during := sl.scattered(size)
	snapUp := expectNow(before, during)

	c.kill(victim)
	c.waitBrickState(victim, "down", brickDownAfter+20*time.Second)
	// While the victim is down: new data, overwrites of old extents (the
	// victim keeps stale copies) and decommits (it keeps blocks that must go).
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
	c.cli("vdisk", "snapshot", c.coordArg(), "--volume", "vol", "--name", "down")
	snapDown := expectNow(all, nil)
	// And a last change the snapshot "down" must not see.
	var again []*extent
	for i, e := range during {
		if i%3 == 0 {
			again = append(again, &extent{off: e.off, data: make([]byte, len(e.data))})
			fill(rng, again[len(again)-1].data)
		}
	}
	w.writeAll(ctx, again)
	if res := summarise(again); len(res.failed) > 0 {
		t.Fatalf("writes with one brick down failed: %s", res)
	}
	for i, j := 0, 0; i < len(during); i += 3 {
		during[i].data = again[j].data
		j++
	}
	c.logf("while %s was down: %d new extents, %d overwritten, %d decommitted, snapshot, %d overwritten",
		victim, len(during), len(overwritten), len(decommitted), len(again))
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
	// A handle opened now knows both snapshots.
	vs := c.open("vol", "reader")
	check := func() {
		t.Helper()
		verifyWith(t, ctx, vs, "", all, c.replicaDiag("vol"))
		verifyWith(t, ctx, vs, "up", snapUp, c.replicaDiag("vol"))
		verifyWith(t, ctx, vs, "down", snapDown, c.replicaDiag("vol"))
	}
	check()

	for _, other := range []string{name(1), name(2)} {
		c.kill(other)
		c.waitBrickState(other, "down", brickDownAfter+20*time.Second)
		c.logf("verifying with %s down", other)
		check()
	}
}

// TestWholeClusterRestart: every process is SIGKILLed at once after
// acknowledged writes and a snapshot; restarted on the same directories,
// the cluster comes back healthy with every byte.
func TestWholeClusterRestart(t *testing.T) {
	_, rng := seed(t)
	size := int64(16 << 20)
	if testing.Short() {
		size = 4 << 20
	}
	c := startCluster(t, 1, 3)
	c.createVolume("vol", 3)
	v := c.open("vol", "w1")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sl := newSlots(rng)
	first := sl.scattered(size)
	(&writer{v: v, workers: 8}).writeAll(ctx, first)
	c.cli("vdisk", "snapshot", c.coordArg(), "--volume", "vol", "--name", "s1")
	second := sl.scattered(size)
	snap := expectNow(first, second)
	(&writer{v: v, workers: 8}).writeAll(ctx, second)
	all := append(first, second...)
	if res := summarise(all); len(res.failed) > 0 {
		t.Fatalf("writes failed: %s", res)
	}

	for _, name := range []string{"c1", "b1", "b2", "b3"} {
		c.kill(name)
	}
	for _, name := range []string{"c1", "b1", "b2", "b3"} {
		c.restart(name)
	}
	c.waitStatus(60*time.Second, "all bricks up after the restart", func(st *coord.Status) (bool, string) {
		up := 0
		for _, b := range st.Bricks {
			if b.State == "up" && b.LastSeen >= 0 {
				up++
			}
		}
		return up == 3, brickStates(st)
	})
	c.waitHealthy("vol", chunksOf(all, chunkBytes), time.Minute)
	v2 := c.open("vol", "w2")
	verifyWith(t, ctx, v2, "", all, c.replicaDiag("vol"))
	verifyWith(t, ctx, v2, "s1", snap, c.replicaDiag("vol"))
	// The old handle still works too, and the volume takes new writes.
	verifyWith(t, ctx, v, "", first[:min(len(first), 4)], c.replicaDiag("vol"))
	third := sl.scattered(size / 4)
	(&writer{v: v2, workers: 4}).writeAll(ctx, third)
	verifyWith(t, ctx, v2, "", third, c.replicaDiag("vol"))
}

// TestChangesDuringCatchUp: a brick misses a lot of writes; right as it
// restarts, while the primaries backfill it, the client overwrites and
// decommits many of those extents and writes new ones. Once the volume is
// healthy the two other bricks are killed: the caught-up brick alone must
// serve the final state (no decommitted data resurrected, no stale block).
func TestChangesDuringCatchUp(t *testing.T) {
	_, rng := seed(t)
	size := int64(64 << 20)
	if testing.Short() {
		size = 16 << 20
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

	c.kill(victim)
	c.waitBrickState(victim, "down", brickDownAfter+20*time.Second)
	missed := sl.scattered(size)
	w := &writer{v: v, workers: 8}
	w.writeAll(ctx, missed)
	if res := summarise(missed); len(res.failed) > 0 {
		t.Fatalf("writes with one brick down failed: %s", res)
	}
	// Prepare the changes before the restart, so they start at once.
	var overwrites, origins, decommits []*extent
	for i, e := range missed {
		switch i % 3 {
		case 0:
			decommits = append(decommits, e)
		case 1:
			o := &extent{off: e.off, data: make([]byte, len(e.data))}
			fill(rng, o.data)
			overwrites = append(overwrites, o)
			origins = append(origins, e)
		}
	}
	fresh := sl.scattered(size / 4)

	c.restart(victim)
	c.waitBrickState(victim, "up", 30*time.Second)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(decommits))
	var next atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(decommits) {
					return
				}
				e := decommits[i]
				if err := v.Decommit(ctx, e.off, uint64(len(e.data))); err != nil {
					errs <- fmt.Errorf("decommit %v: %w", e, err)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		(&writer{v: v, workers: 4}).writeAll(ctx, append(overwrites, fresh...))
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("during catch-up: %v", err)
	}
	if res := summarise(append(overwrites, fresh...)); len(res.failed) > 0 {
		t.Fatalf("writes during catch-up failed: %s", res)
	}
	c.logf("%d decommits, %d overwrites, %d new extents done %v after the restart",
		len(decommits), len(overwrites), len(fresh), time.Since(start).Round(time.Millisecond))
	for _, e := range decommits {
		zeroExtent(e)
	}
	for j, e := range origins {
		e.data = overwrites[j].data
	}
	all := append(missed, fresh...)
	c.waitHealthy("vol", 1, 2*time.Minute)
	verifyWith(t, ctx, v, "", all, c.replicaDiag("vol"))
	for _, other := range []string{name(1), name(2)} {
		c.kill(other)
	}
	for _, other := range []string{name(1), name(2)} {
		c.waitBrickState(other, "down", brickDownAfter+20*time.Second)
	}
	c.logf("only %s, which caught up during the changes, is left", victim)
	verifyWith(t, ctx, v, "", all, c.replicaDiag("vol"))
}

// TestDecommitRetryAfterPartialFailure: a decommit reaches the primary and
// one backup but not the other, which hangs and then crashes; the client
// gives up. The crashed brick is restarted at once (before it could be
// declared down, as a supervisor would) and the client decommits the same
// range again, with success. Every replica must now read zeros there: once
// the primary and the first backup die, the restarted backup alone must
// not bring the freed data back.
func TestDecommitRetryAfterPartialFailure(t *testing.T) {
	_, rng := seed(t)
	c := startCluster(t, 1, 3)
	c.createVolume("vol", 3)
	v := c.open("vol", "w1")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	off, pg := chunkLedBy(t, rng, v, func(clustermap.PG) bool { return true })
	off -= off % chunkBytes
	primary, hung, other := pg.Bricks[0], pg.Bricks[1], pg.Bricks[2]
	data := make([]byte, chunkBytes)
	fill(rng, data)
	if err := v.WriteAt(ctx, data, off); err != nil {
		t.Fatalf("write: %v", err)
	}

	c.pause(hung)
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	err := v.Decommit(short, off, chunkBytes)
	cancelShort()
	c.logf("decommit with %s frozen: %v", hung, err)
	if err == nil {
		t.Fatalf("decommit succeeded although backup %s was frozen", hung)
	}
	c.kill(hung) // it never saw the decommit
	c.restart(hung)
	st := c.waitStatus(30*time.Second, hung+" registered again", func(st *coord.Status) (bool, string) {
		b := brickOf(st, hung)
		return b != nil && b.State == "up" && b.LastSeen >= 0 && b.LastSeen < 1000, brickStates(st)
	})
	c.logf("%s back; map epoch %d", hung, st.MapEpoch)
	if err := v.Decommit(ctx, off, chunkBytes); err != nil {
		t.Fatalf("second decommit: %v", err)
	}
	c.waitHealthy("vol", 0, time.Minute)
	zero := &extent{off: off, data: make([]byte, chunkBytes), done: true}
	verifyWith(t, ctx, v, "", []*extent{zero}, c.replicaDiag("vol"))

	c.kill(primary)
	c.kill(other)
	c.waitBrickState(primary, "down", brickDownAfter+20*time.Second)
	c.waitBrickState(other, "down", brickDownAfter+20*time.Second)
	c.logf("only %s, the backup that missed the first decommit, is left", hung)
	verifyWith(t, ctx, v, "", []*extent{zero}, c.replicaDiag("vol"))
}
