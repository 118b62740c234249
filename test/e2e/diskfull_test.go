package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/coord"
	"github.com/plumeria-fs/plumeria/volume"
)

// TestDiskFull: bricks with a small --capacity fill up. Writes then fail
// with an error that names the lack of space (volume.ErrNoSpace), every
// write acknowledged before still reads back, and the bricks stay up.
func TestDiskFull(t *testing.T) {
	_, rng := seed(t)
	c := newCluster(t)
	c.addCoordinator("c1")
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("b%d", i)
		p := c.newProc(name)
		p.brick = true
		p.args = []string{"server", "--name", name, "--listen", p.addr, "--data", p.data, "--brick",
			"--coord", strings.Join(c.coordAddrs(), ","), "--domain", "host=h" + name, "--capacity", "24MiB"}
		c.start(p)
	}
	c.waitStatus(30*time.Second, "3 bricks up", func(st *coord.Status) (bool, string) {
		up := 0
		for _, b := range st.Bricks {
			if b.State == "up" && b.LastSeen >= 0 {
				up++
			}
		}
		return up == 3, brickStates(st)
	})
	c.createVolume("vol", 3)
	v := c.open("vol", "w1")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var acked []*extent
	var full error
	for i := 0; i < 200 && full == nil; i++ {
		e := &extent{off: uint64(i) << 20, data: make([]byte, 1<<20)}
		fill(rng, e.data)
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
		err := v.WriteAt(wctx, e.data, e.off)
		wcancel()
		switch {
		case err == nil:
			e.done = true
			acked = append(acked, e)
		case errors.Is(err, volume.ErrNoSpace):
			full = err
		default:
			t.Fatalf("write %d failed with something other than no space: %v", i, err)
		}
	}
	if full == nil {
		t.Fatalf("wrote %d MiB to bricks of 24 MiB without running out of space", len(acked))
	}
	c.logf("after %d MiB: %v", len(acked), full)
	if !strings.Contains(full.Error(), "space") {
		t.Fatalf("error does not say what is missing: %v", full)
	}
	verify(t, ctx, v, acked)
	// A new volume's reads work too, and status still answers.
	if _, err := c.status(); err != nil {
		t.Fatalf("status with full bricks: %v", err)
	}
	c.checkAlive()
}
