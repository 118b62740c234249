package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/coord"
	"github.com/plumeria-fs/plumeria/internal/limits"
)

const chunkBytes = limits.ChunkBytesDefault // the default --chunk-size

// writeKillingHalfway writes exts through w and SIGKILLs victim once half
// of total bytes are acknowledged. It returns the time of the kill.
func writeKillingHalfway(t *testing.T, c *cluster, w *writer, exts []*extent, total int64, victim string) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		w.writeAll(ctx, exts)
	}()
	var killedAt time.Time
	for killedAt.IsZero() {
		select {
		case <-done:
			t.Fatalf("all writes finished before half of them were acknowledged (%d of %d bytes)", w.acked.Load(), total)
		case <-time.After(5 * time.Millisecond):
		}
		if w.acked.Load() >= total/2 {
			c.kill(victim)
			killedAt = time.Now()
			c.logf("killed %s after %d MiB acknowledged", victim, w.acked.Load()>>20)
		}
	}
	<-done
	c.logf("writes done in %v: %d MiB acknowledged", time.Since(start).Round(time.Millisecond), w.acked.Load()>>20)
	return killedAt
}

// checkWritesAfterKill requires that some writes started after the kill
// were acknowledged: the volume stays writable with one brick gone.
func checkWritesAfterKill(t *testing.T, exts []*extent, killedAt time.Time) {
	t.Helper()
	after, ackedAfter := 0, 0
	for _, e := range exts {
		if e.start.After(killedAt) {
			after++
			if e.err == nil {
				ackedAfter++
			}
		}
	}
	t.Logf("%d writes started after the kill, %d of them acknowledged", after, ackedAfter)
	if after > 0 && ackedAfter == 0 {
		t.Errorf("no write started after the kill was acknowledged: the volume did not stay writable with one brick of three down")
	}
}

// TestKillBrickDuringWrites: 3 bricks, 3 replicas; one brick is SIGKILLed
// halfway through scattered concurrent writes. Every acknowledged byte
// must read back, and with no spare brick the volume stays degraded.
func TestKillBrickDuringWrites(t *testing.T) {
	_, rng := seed(t)
	total := int64(256 << 20)
	if testing.Short() {
		total = 64 << 20
	}
	c := startCluster(t, 1, 3)
	c.createVolume("vol", 3)
	v := c.open("vol", "w1")
	exts := newSlots(rng).scattered(total)
	victim := fmt.Sprintf("b%d", 1+rng.IntN(3))
	w := &writer{v: v, workers: 8}
	killedAt := writeKillingHalfway(t, c, w, exts, total, victim)
	res := summarise(exts)
	t.Logf("%s", res)
	checkWritesAfterKill(t, exts, killedAt)

	c.waitBrickState(victim, "down", brickDownAfter+20*time.Second)
	// Chunk counts come with heartbeats every ~2 s.
	wantMin, wantMax := chunksOf(res.acked, chunkBytes), chunksOf(exts, chunkBytes)
	st := c.waitStatus(30*time.Second, "volume vol degraded", func(st *coord.Status) (bool, string) {
		v := volumeOf(st, "vol")
		return v != nil && v.DegradedChunks > 0 && v.Chunks >= wantMin, volState(st, "vol")
	})
	vs := volumeOf(st, "vol")
	// Every PG had all three bricks, and there is no spare: all are degraded.
	if vs.DegradedPGs != vs.PGs || vs.DegradedChunks != vs.Chunks {
		t.Errorf("with 1 of 3 bricks down every PG and chunk should be degraded: %s", volState(st, "vol"))
	}
	if vs.Chunks < wantMin || vs.Chunks > wantMax {
		t.Errorf("status counts %d chunks; the workload touched %d (acknowledged) to %d (all) distinct chunks", vs.Chunks, wantMin, wantMax)
	}
	// No brick can replace the dead one: the volume must stay degraded.
	stay := time.Now().Add(6 * time.Second)
	for time.Now().Before(stay) {
		st, err := c.status()
		if err != nil {
			t.Fatal(err)
		}
		if v := volumeOf(st, "vol"); v == nil || v.DegradedChunks == 0 || brickOf(st, victim).State != "down" {
			t.Fatalf("volume stopped being degraded with %s dead and no spare brick: %s", victim, volState(st, "vol"))
		}
		time.Sleep(500 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	verifyWith(t, ctx, v, "", exts, c.replicaDiag("vol"))
}

// TestKillBrickFourBricks: 4 bricks, 3 replicas; after a brick is killed
// during writes, the survivors re-replicate until nothing is degraded. To
// prove the new copies are complete, two more bricks are then killed and
// the last one alone must serve every byte.
func TestKillBrickFourBricks(t *testing.T) {
	_, rng := seed(t)
	total := int64(64 << 20)
	if testing.Short() {
		total = 16 << 20
	}
	c := startCluster(t, 1, 4)
	c.createVolume("vol", 3)
	v := c.open("vol", "w1")
	exts := newSlots(rng).scattered(total)
	order := rng.Perm(4)
	name := func(i int) string { return fmt.Sprintf("b%d", order[i]+1) }
	w := &writer{v: v, workers: 8}
	killedAt := writeKillingHalfway(t, c, w, exts, total, name(0))
	res := summarise(exts)
	t.Logf("%s", res)
	checkWritesAfterKill(t, exts, killedAt)

	c.waitBrickState(name(0), "down", brickDownAfter+20*time.Second)
	// Healthy, and counting every chunk the acknowledged writes touched.
	st := c.waitHealthy("vol", chunksOf(res.acked, chunkBytes), 2*time.Minute)
	// The dead brick left every PG, and each survivor holds all of them.
	for i := range 4 {
		want := volumeOf(st, "vol").PGs
		if i == 0 {
			want = 0
		}
		if b := brickOf(st, name(i)); b == nil || b.PGs != want {
			t.Errorf("after re-replication %s should be in %d PGs: %s", name(i), want, brickStates(st))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	verifyWith(t, ctx, v, "", exts, c.replicaDiag("vol"))

	// Every PG now has its three replicas on the three survivors. Kill two:
	// the last must hold everything, including the chunks it got by backfill.
	c.kill(name(1))
	c.kill(name(2))
	c.waitBrickState(name(1), "down", brickDownAfter+20*time.Second)
	c.waitBrickState(name(2), "down", brickDownAfter+20*time.Second)
	c.logf("only %s is left", name(3))
	verifyWith(t, ctx, v, "", exts, c.replicaDiag("vol"))
}
