package brick_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumeria-fs/plumeria/brick"
	"github.com/plumeria-fs/plumeria/brick/ec"
	"github.com/plumeria-fs/plumeria/brick/store"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/internal/testseed"
)

// TestRebuildStripeGroups: 6 MiB and a bit of a 2-replica volume, coded
// into 4+2 stripes on 7 bricks. One member of a stripe group with stripes
// goes down: the map replaces it in place, the group's leader rebuilds
// its position, and the map shows it in sync; every stripe then holds six
// consistent shards (parity verified) and every byte reads back. The
// brick comes back while another member is down: it keeps its orphaned
// shards (the group is not healthy) and becomes the replacement of the
// other one at another position; its stale shards of its old position
// (same keys) are rebuilt, not trusted. The second brick comes back to
// healthy groups it left and drops every shard it holds.
func TestRebuildStripeGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 2))
	tc := newTestCluster(t, 7, time.Hour)
	v := createVolume(t, tc.cl, "rb", false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	data := make([]byte, 6<<20+77<<10)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := v.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	resp := ensureProfile(t, tc.cl, "rb", 4, 2)
	if st, err := v.Relayout(ctx, 0, uint64(len(data)), uint16(resp.Id), nil); err != nil || st.Coded != 7 {
		t.Fatalf("relayout: %+v, %v; want 7 chunks coded", st, err)
	}
	check := func(what string) {
		t.Helper()
		for _, b := range tc.bricks {
			b.DropStripeCache()
		}
		got := make([]byte, len(data))
		if err := v.ReadAt(ctx, got, 0); err != nil {
			t.Fatalf("%s: read: %v", what, err)
		}
		if i := firstDiff(got, data); i >= 0 {
			t.Fatalf("%s: first wrong byte at %d", what, i)
		}
	}

	m := clusterMap(t, tc.cl)
	vol := m.Volume("rb")
	sg, stripes := -1, 0
	for i := range vol.SGs {
		if n := len(verifyGroup(t, ctx, m, vol.ID, i)); n > stripes {
			sg, stripes = i, n
		}
	}
	if sg < 0 {
		t.Fatal("no stripe group holds stripes")
	}
	// The leader goes down: the next in-sync member leads the rebuild.
	first := vol.SGs[sg].Bricks[0]
	tc.brick(first).Stop()
	m = waitMap(t, tc.cl, first+" replaced and rebuilt everywhere", func(m *clustermap.Map) bool {
		return healthyWithout(m, "rb", first)
	})
	g := m.Volume("rb").SGs[sg]
	if got := verifyGroup(t, ctx, m, vol.ID, sg); len(got) != stripes {
		t.Fatalf("after the rebuild of %s at position 0: %d stripes, want %d", g.Bricks[0], len(got), stripes)
	}
	check("after the first rebuild")

	// A second member goes down; with the first still down it cannot be
	// replaced (7 bricks), and the group is degraded. The first comes back
	// and keeps the shards it holds of the group it is no longer in.
	second := g.Bricks[1]
	tc.brick(second).Stop()
	waitMap(t, tc.cl, second+" down", func(m *clustermap.Map) bool { return m.Brick(second).State != clustermap.BrickUp })
	back := tc.restartBrick(first)
	held := shardKeys(t, back)
	if !slices.Contains(held, shardVolID(vol.ID, sg)) {
		t.Fatalf("%s came back without its shards of group %d: %x", first, sg, held)
	}
	back.CollectShardOrphans()
	if got := shardKeys(t, back); slices.ContainsFunc(held, func(k uint64) bool { return !slices.Contains(got, k) }) {
		t.Fatalf("%s dropped shards of degraded groups: held %x, now %x", first, held, got)
	}
	// It replaces the second at position 1 of the group (its shards of
	// position 0 under the same keys must not pass for position 1).
	m = waitMap(t, tc.cl, first+" replaces "+second+" and is rebuilt", func(m *clustermap.Map) bool {
		return healthyWithout(m, "rb", second)
	})
	if g := m.Volume("rb").SGs[sg]; g.Bricks[1] != first {
		t.Fatalf("group %d: %v, want %s at position 1", sg, g.Bricks, first)
	}
	if got := verifyGroup(t, ctx, m, vol.ID, sg); len(got) != stripes {
		t.Fatalf("after the rebuild of %s at position 1: %d stripes, want %d", first, len(got), stripes)
	}
	check("after the second rebuild")

	// The second comes back to healthy groups without it: it drops all.
	back2 := tc.restartBrick(second)
	if len(shardKeys(t, back2)) == 0 {
		t.Fatalf("%s came back without its shards", second)
	}
	back2.CollectShardOrphans()
	if got := shardKeys(t, back2); len(got) != 0 {
		t.Fatalf("%s kept shards of groups it left: %x", second, got)
	}
	verifyGroup(t, ctx, clusterMap(t, tc.cl), vol.ID, sg)
	check("after orphans dropped")
}

// healthyWithout reports whether gone is in no PG or stripe group of
// volume name, and every member of those is up and in sync.
func healthyWithout(m *clustermap.Map, name, gone string) bool {
	v := m.Volume(name)
	up := func(members []string) bool {
		for _, b := range members {
			if b == gone || m.Brick(b).State != clustermap.BrickUp {
				return false
			}
		}
		return true
	}
	for _, p := range v.PGs {
		if len(p.Syncing) > 0 || !up(p.Bricks) {
			return false
		}
	}
	for _, g := range v.SGs {
		if len(g.Syncing) > 0 || !up(g.Bricks) {
			return false
		}
	}
	return true
}

// waitMap polls the coordinator's map (at most 45 s) until ok holds.
func waitMap(t *testing.T, cl *coordclient.Client, what string, ok func(*clustermap.Map) bool) *clustermap.Map {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		m := clusterMap(t, cl)
		if ok(m) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never in the map; last epoch %d", what, m.Epoch)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// verifyGroup checks that every member of stripe group sg of vol in m
// lists the same stripes with the same blocks, and that each stripe's
// K+M shards agree (parity verified); it returns the stripes.
func verifyGroup(t *testing.T, ctx context.Context, m *clustermap.Map, vol uint64, sg int) map[[2]uint64]uint32 {
	t.Helper()
	v := m.VolumeByID(vol)
	g := v.SGs[sg]
	p := v.Profile(g.Profile)
	coder, err := ec.NewCoder(ec.Profile{K: p.K, M: p.M}, int(v.ChunkBytes))
	if err != nil {
		t.Fatal(err)
	}
	var want map[[2]uint64]uint32
	clients := make([]pb.BrickClient, len(g.Bricks))
	for i, b := range g.Bricks {
		clients[i] = brickClient(t, m, b)
		got := shardInventory(t, ctx, clients[i], m.Epoch, vol, sg)
		if i == 0 {
			want = got
		} else if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("group %d: member %d (%s) holds %v, member 0 (%s) %v", sg, i, b, got, g.Bricks[0], want)
		}
	}
	for id, n := range want {
		shards := make([][]byte, len(g.Bricks))
		for i, cl := range clients {
			r, err := cl.ShardRead(ctx, &pb.ShardReadRequest{MapEpoch: m.Epoch, Vol: vol, Sg: uint32(sg), Shard: uint32(i),
				Chunk: id[0], StripeSeq: id[1], Blocks: n})
			if err != nil || len(r.Missing)+len(r.Corrupt) > 0 {
				t.Fatalf("group %d stripe %v shard %d at %s: missing %v corrupt %v err %v", sg, id, i, g.Bricks[i], r.GetMissing(), r.GetCorrupt(), err)
			}
			shards[i] = r.Data
		}
		if ok, err := coder.Verify(shards); !ok || err != nil {
			t.Fatalf("group %d (%v) stripe %v: shards disagree (err %v)", sg, g.Bricks, id, err)
		}
	}
	return want
}

func shardInventory(t *testing.T, ctx context.Context, cl pb.BrickClient, epoch, vol uint64, sg int) map[[2]uint64]uint32 {
	t.Helper()
	st, err := cl.ShardInventory(ctx, &pb.ShardInventoryRequest{MapEpoch: epoch, Vol: vol, Sg: uint32(sg)})
	if err != nil {
		t.Fatal(err)
	}
	out := map[[2]uint64]uint32{}
	for {
		r, err := st.Recv()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("shard inventory: %v", err)
		}
		for _, s := range r.Stripes {
			out[[2]uint64{s.Chunk, s.StripeSeq}] = s.Blocks
		}
	}
}

// shardVolID is the store volume id of stripe group sg's shards of vol.
func shardVolID(vol uint64, sg int) uint64 { return 1<<63 | uint64(sg)<<40 | vol }

// shardKeys lists the store volume ids of shards b holds.
func shardKeys(t *testing.T, b *brick.Server) []uint64 {
	t.Helper()
	vols, err := b.Store().Vols()
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(vols, func(v uint64) bool { return v < 1<<63 })
}

// restartBrick stops brick name and starts it again on its data, at a
// new address.
func (tc *testCluster) restartBrick(name string) *brick.Server {
	t := tc.t
	t.Helper()
	i, err := strconv.Atoi(strings.TrimPrefix(name, "b"))
	if err != nil || i >= len(tc.bricks) {
		t.Fatalf("no brick %q", name)
	}
	tc.bricks[i].Stop()
	bmux, bgs := serveGRPC(t)
	b, err := brick.New(brick.Config{Name: name, Addr: bmux.Addr().String(), DataDir: filepath.Join(tc.dir, name),
		Domain: map[string]string{"host": name}, Coord: tc.cl, HistoryInterval: tc.historyEvery}, bgs)
	if err != nil {
		t.Fatal(err)
	}
	go bgs.Serve(bmux.GRPC())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err = b.Run(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bgs.Stop(); b.Stop(); bmux.Close() })
	tc.bricks[i] = b
	return b
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// TestRebuildLostStripe: a stripe of a group has lost two shards when a
// third member goes down: with three of the K=4 it needs, the leader
// counts it lost and never reports the replacement in sync.
func TestRebuildLostStripe(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	tc := newTestCluster(t, 7, time.Hour)
	v := createVolume(t, tc.cl, "lost", false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	writeCoded(t, ctx, tc, v, "lost", bytes.Repeat([]byte("lost stripe "), 100<<10))
	m := clusterMap(t, tc.cl)
	vol := m.Volume("lost")
	sg, stripe := stripeHeld(t, ctx, m, vol)
	g := vol.SGs[sg]
	for _, b := range g.Bricks[1:3] {
		if _, err := brickClient(t, m, b).ShardDelete(ctx, &pb.ShardDeleteRequest{MapEpoch: m.Epoch, Vol: vol.ID, Sg: uint32(sg),
			Chunk: stripe[0], StripeSeq: stripe[1]}); err != nil {
			t.Fatal(err)
		}
	}
	before := counter(t, "plumeria_brick_stripe_rebuild_failures_total")
	victim := g.Bricks[5]
	tc.brick(victim).Stop()
	deadline := time.Now().Add(45 * time.Second)
	for counter(t, "plumeria_brick_stripe_rebuild_failures_total") == before {
		if time.Now().After(deadline) {
			t.Fatalf("the rebuild of %s's position never counted stripe %v lost", victim, stripe)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // time enough to report, were it to
	g = clusterMap(t, tc.cl).Volume("lost").SGs[sg]
	if g.Bricks[5] == victim || !slices.Contains(g.Syncing, g.Bricks[5]) {
		t.Fatalf("group %d: %v syncing %v; want %s replaced and its replacement still syncing", sg, g.Bricks, g.Syncing, victim)
	}
}

// counter returns the value of the process's Prometheus counter name.
func counter(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestRebuildPartialShards: three members of a 4+2 group each lack one
// block of a stripe, at three different offsets, when a fourth goes down.
// Every offset still has K good blocks among the five left, so the
// rebuild completes the replacement (whole shards only, as before, would
// be three of the K=4 it needs: the stripe counted lost) and the data
// reads back.
func TestRebuildPartialShards(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	tc := newTestCluster(t, 7, time.Hour)
	v := createVolume(t, tc.cl, "part", false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	data := bytes.Repeat([]byte("partial shards! "), 64<<10) // 1 MiB: one stripe of 64-block shards
	writeCoded(t, ctx, tc, v, "part", data)
	m := clusterMap(t, tc.cl)
	vol := m.Volume("part")
	sg, stripe := stripeHeld(t, ctx, m, vol)
	g := vol.SGs[sg]
	geo, err := ec.NewGeometry(ec.Profile{K: 4, M: 2}, int(vol.ChunkBytes))
	if err != nil {
		t.Fatal(err)
	}
	for pos, o := range []int{1, 2, 3} {
		key := store.Key{Vol: shardVolID(vol.ID, sg), Block: stripe[0]*uint64(geo.ShardBlocks()) + uint64(o), Gen: stripe[1]}
		if err := tc.brick(g.Bricks[pos]).Store().Apply(ctx, []store.Op{{Kind: store.OpRemove, Key: key}}); err != nil {
			t.Fatal(err)
		}
	}
	before := counter(t, "plumeria_brick_stripe_rebuild_failures_total")
	victim := g.Bricks[5]
	tc.brick(victim).Stop()
	m = waitMap(t, tc.cl, victim+" replaced and rebuilt", func(m *clustermap.Map) bool { return healthyWithout(m, "part", victim) })
	if n := counter(t, "plumeria_brick_stripe_rebuild_failures_total"); n != before {
		t.Fatalf("%v stripes counted lost, want none", n-before)
	}
	repl := m.Volume("part").SGs[sg].Bricks[5]
	r, err := brickClient(t, m, repl).ShardRead(ctx, &pb.ShardReadRequest{MapEpoch: m.Epoch, Vol: vol.ID, Sg: uint32(sg), Shard: 5,
		Chunk: stripe[0], StripeSeq: stripe[1], Blocks: uint32(geo.ShardBlocks())})
	if err != nil || len(r.Missing)+len(r.Corrupt) != 0 {
		t.Fatalf("the replacement %s's shard: missing %v corrupt %v, err %v", repl, r.GetMissing(), r.GetCorrupt(), err)
	}
	for _, b := range tc.bricks {
		b.DropStripeCache()
	}
	got := make([]byte, len(data))
	if err := v.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read after the rebuild: err %v, first wrong byte %d", err, firstDiff(got, data))
	}
}

// stripeHeld returns a stripe group of vol that holds stripes and one of
// its stripes (chunk, seq).
func stripeHeld(t *testing.T, ctx context.Context, m *clustermap.Map, vol *clustermap.Volume) (int, [2]uint64) {
	t.Helper()
	for i := range vol.SGs {
		for id := range verifyGroup(t, ctx, m, vol.ID, i) {
			return i, id
		}
	}
	t.Fatal("no stripe group holds stripes")
	return 0, [2]uint64{}
}
