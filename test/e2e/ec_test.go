package e2e

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coord"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// TestErasureCoding: on 8 bricks in 8 racks, data written to a 3-replica
// volume is moved into 4+2 stripes whose 6 bricks are in 6 distinct racks
// (vdisk relayout), at 1.5x its size; SIGKILL of two bricks loses nothing
// (every byte reads back, rebuilt from the surviving shards), and the
// stripe groups get their missing members rebuilt onto the spare bricks
// without an operator.
func TestErasureCoding(t *testing.T) {
	_, rng := seed(t)
	size := 32 << 20
	if testing.Short() {
		size = 8 << 20
	}
	c := startCluster(t, 1, 0)
	racks := []string{"r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8"}
	for i, r := range racks {
		c.addBrick(fmt.Sprintf("b%d", i+1), fmt.Sprintf("h%d", i+1), "--domain", fmt.Sprintf("host=h%d,rack=%s", i+1, r))
	}
	c.waitStatus(30*time.Second, "8 bricks up", func(st *coord.Status) (bool, string) {
		up := 0
		for _, b := range st.Bricks {
			if b.State == "up" {
				up++
			}
		}
		return up == len(racks), brickStates(st)
	})
	c.createVolume("ec", 3, "--pgs", "16")
	v := c.open("ec", "w1")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := v.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}

	out := string(c.cli("vdisk", "relayout", c.coordArg(), "--volume", "ec", "--offset", "0", "--length", fmt.Sprint(size),
		"--profile", "4+2", "--domain", "rack"))
	if !strings.Contains(out, "(1.50x the data)") || !strings.Contains(out, fmt.Sprintf("%d of %d chunks coded", size>>20, size>>20)) {
		t.Fatalf("relayout: %s", out)
	}
	out = string(c.cli("vdisk", "layout", c.coordArg(), "--volume", "ec", "--length", fmt.Sprint(size)))
	if want := fmt.Sprintf("4+2 domain=rack: %s", humanSize(size)); !strings.Contains(out, want) || strings.Contains(out, "home") {
		t.Fatalf("layout after relayout: %q, want %q and nothing at home", out, want)
	}
	m := c.mapAt(t)
	vol := m.Volume("ec")
	checkStripeRacks(t, m, vol)
	read := func(what string) {
		t.Helper()
		got := make([]byte, size)
		if err := v.ReadAt(ctx, got, 0); err != nil {
			t.Fatalf("%s: read: %v", what, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%s: data differs", what)
		}
	}
	read("after relayout")

	// SIGKILL two members of stripe group 0 (any two bricks: the home PGs
	// keep a replica, and every stripe keeps 4 of its 6 shards).
	g := vol.SGs[0]
	victims := []string{g.Bricks[0], g.Bricks[3]}
	for _, b := range victims {
		c.kill(b)
	}
	for _, b := range victims {
		c.waitBrickState(b, "down", brickDownAfter+20*time.Second)
	}
	read("two bricks killed")

	// Without an operator: every stripe group gets members for the dead
	// bricks (in racks it does not use yet) and rebuilds them.
	c.waitStatus(3*time.Minute, "stripe groups rebuilt", func(st *coord.Status) (bool, string) {
		vs := volumeOf(st, "ec")
		return vs != nil && vs.DegradedStripeGroups == 0 && vs.SyncingStripeGroups == 0,
			fmt.Sprintf("%d stripe groups, %d degraded, %d rebuilding", vs.StripeGroups, vs.DegradedStripeGroups, vs.SyncingStripeGroups)
	})
	m = c.mapAt(t)
	vol = m.Volume("ec")
	checkStripeRacks(t, m, vol)
	for i, sg := range vol.SGs {
		for _, b := range victims {
			if slices.Contains(sg.Bricks, b) {
				t.Fatalf("stripe group %d still lists dead %s: %v", i, b, sg.Bricks)
			}
		}
	}
	read("after the rebuild")
}

// checkStripeRacks: every stripe group's bricks are in distinct racks.
func checkStripeRacks(t *testing.T, m *clustermap.Map, vol *clustermap.Volume) {
	t.Helper()
	if len(vol.SGs) == 0 {
		t.Fatal("no stripe groups")
	}
	for i, g := range vol.SGs {
		seen := map[string]string{}
		for _, b := range g.Bricks {
			r := m.Brick(b).Domain[clustermap.LevelRack]
			if other, ok := seen[r]; ok || r == "" {
				t.Fatalf("stripe group %d: %s and %s share rack %q: %v", i, other, b, r, g.Bricks)
			}
			seen[r] = b
		}
	}
}

// mapAt returns the coordinators' current map.
func (c *cluster) mapAt(t *testing.T) *clustermap.Map {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := c.client().Map(ctx, 0)
	if err != nil {
		t.Fatalf("map: %v", err)
	}
	return m
}

// humanSize is how the CLI prints a size of whole MiB.
func humanSize(n int) string { return fmt.Sprintf("%d.0 MiB", n>>20) }

// TestShardCorruptionRepaired: a shard block corrupted on disk after its
// chunk was coded is detected by the store's checksum when a read needs
// it, the read returns the original bytes (rebuilt from the other
// shards), and the member holds a good copy again afterwards.
func TestShardCorruptionRepaired(t *testing.T) {
	_, rng := seed(t)
	c := startCluster(t, 1, 6)
	c.createVolume("ec", 2, "--pgs", "4")
	v := c.open("ec", "w1")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const blocks = 256
	data := make([]byte, blocks*4096)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := v.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	c.cli("vdisk", "relayout", c.coordArg(), "--volume", "ec", "--length", "1MiB", "--profile", "4+2")
	// Block 5 lives in data shard 1 at offset 1 (round-robin over 4).
	const b = 5
	pattern := data[b*4096 : (b+1)*4096]
	hits := 0
	for i := 1; i <= 6; i++ {
		n, _ := corruptBlock(t, c.proc(fmt.Sprintf("b%d", i)), pattern)
		hits += n
	}
	if hits == 0 {
		t.Fatal("block 5 found on no brick's disk")
	}
	// Restart the bricks: no cached shard may hide the corruption.
	for i := 1; i <= 6; i++ {
		name := fmt.Sprintf("b%d", i)
		c.stop(name)
		c.restart(name)
	}
	c.waitHealthy("ec", 1, 60*time.Second)
	before := shardBlock(t, ctx, c, "ec", 0, 1, 1)
	if len(before.Corrupt) != 1 {
		t.Fatalf("shard 1 block 1 after the corruption: corrupt %v missing %v: the corruption missed the shard", before.Corrupt, before.Missing)
	}
	got := make([]byte, len(data))
	if err := v.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read over the corrupt shard block: err %v, equal %v", err, bytes.Equal(got, data))
	}
	// The member of shard 1 holds block 5 intact again.
	after := shardBlock(t, ctx, c, "ec", 0, 1, 1)
	if len(after.Corrupt) != 0 || len(after.Missing) != 0 || !bytes.Equal(after.Data, pattern) {
		t.Fatalf("shard 1 block 1 after the read: corrupt %v missing %v, data equal %v", after.Corrupt, after.Missing, bytes.Equal(after.Data, pattern))
	}
}

// shardBlock reads block o of shard j of chunk's stripe from the member
// that holds it (the stripe found by the members' inventories).
func shardBlock(t *testing.T, ctx context.Context, c *cluster, volName string, chunk uint64, j, o uint32) *pb.ShardReadResponse {
	t.Helper()
	m := c.mapAt(t)
	vol := m.Volume(volName)
	for sg, g := range vol.SGs {
		cl := brickClientE2E(t, m, g.Bricks[j])
		inv, err := cl.ShardInventory(ctx, &pb.ShardInventoryRequest{MapEpoch: m.Epoch, Vol: vol.ID, Sg: uint32(sg)})
		if err != nil {
			t.Fatal(err)
		}
		for {
			r, err := inv.Recv()
			if err != nil {
				break
			}
			for _, s := range r.Stripes {
				if s.Chunk != chunk {
					continue
				}
				rr, err := cl.ShardRead(ctx, &pb.ShardReadRequest{MapEpoch: m.Epoch, Vol: vol.ID, Sg: uint32(sg), Shard: j, Chunk: chunk,
					StripeSeq: s.StripeSeq, First: o, Blocks: 1})
				if err != nil {
					t.Fatalf("shard read from %s: %v", g.Bricks[j], err)
				}
				return rr
			}
		}
	}
	t.Fatalf("no stripe of chunk %d found on the members of shard %d", chunk, j)
	return nil
}

// brickClientE2E dials brick name of m for the rest of the test, as a
// brick peer (dialAsBrick).
func brickClientE2E(t *testing.T, m *clustermap.Map, name string) pb.BrickClient {
	t.Helper()
	conn, err := dialAsBrick(m.Brick(name).Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewBrickClient(conn)
}
