package brick_test

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/brick/ec"
	"github.com/plumeria-fs/plumeria/brick/store"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/internal/testseed"
	"github.com/plumeria-fs/plumeria/volume"
)

// TestCodedChunks: 4 MiB and a bit written to a volume are moved into 4+2
// stripes (Relayout); the home replicas then hold refs, and every byte
// reads back: from the stripes, after two shards of a stripe are lost
// (rebuilt from the other four, and the read shard written back), with a
// member down, after a partial overwrite of a coded block, and in a
// snapshot taken before the relayout.
func TestCodedChunks(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	tc := newTestCluster(t, 6, time.Hour)
	v := createVolume(t, tc.cl, "ec", false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	size := 4<<20 + 123<<10
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := v.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	resp := ensureProfile(t, tc.cl, "ec", 4, 2)
	blocks := int64((size + limits.BlockBytes - 1) / limits.BlockBytes)
	layout := func(want map[uint16]int64) {
		t.Helper()
		got, err := v.Layout(ctx, 0, uint64(size)+5<<20) // past the data too
		if err != nil || !maps.Equal(got, want) {
			t.Fatalf("layout %v, err %v; want %v", got, err, want)
		}
	}
	layout(map[uint16]int64{0: blocks})
	var done, total atomic.Int64
	st, err := v.Relayout(ctx, 0, uint64(size), uint16(resp.Id), func(d, n int64) { done.Store(d); total.Store(n) })
	if err != nil {
		t.Fatal(err)
	}
	if done.Load() != 5 || total.Load() != 5 {
		t.Fatalf("progress %d of %d, want 5 of 5", done.Load(), total.Load())
	}
	layout(map[uint16]int64{uint16(resp.Id): blocks})
	if st.Chunks != 5 || st.Coded != 5 || st.Swapped != blocks || st.Changed != 0 {
		t.Fatalf("relayout: %+v, want 5 chunks coded and %d blocks swapped", st, blocks)
	}
	// 4 full chunks: 6 shards of 256 KiB each; the last 123 KiB chunk: 6 × 32 KiB.
	if want := int64(4*6*256<<10 + 6*32<<10); st.StripeBytes != want {
		t.Fatalf("stripe bytes %d, want %d (1.5x of the data, rounded to blocks per shard)", st.StripeBytes, want)
	}
	check := func(what string) {
		t.Helper()
		got := make([]byte, size)
		if err := v.ReadAt(ctx, got, 0); err != nil {
			t.Fatalf("%s: read: %v", what, err)
		}
		if !bytes.Equal(got, data) {
			i := 0
			for got[i] == data[i] {
				i++
			}
			t.Fatalf("%s: first wrong byte at %d", what, i)
		}
	}
	check("after relayout")

	m := clusterMap(t, tc.cl)
	vol := m.Volume("ec")
	pg := vol.PGOf(0)
	primary := tc.brick(vol.PGs[pg].Primary())
	_, e, err := primary.Store().Latest(vol.ID, 0, ^uint64(0))
	if err != nil || !e.Ref {
		t.Fatalf("block 0 at the primary: ref %v, err %v", e.Ref, err)
	}
	refBytes, _, _ := primary.Store().Latest(vol.ID, 0, ^uint64(0))
	ref, err := ec.DecodeRef(refBytes)
	if err != nil {
		t.Fatal(err)
	}
	g := vol.SGs[ref.SG]

	// Lose two shards of chunk 0's stripe: shard 0 (block 0's) and a parity.
	for _, shard := range []int{0, 5} {
		cl := brickClient(t, m, g.Bricks[shard])
		if _, err := cl.ShardDelete(ctx, &pb.ShardDeleteRequest{MapEpoch: m.Epoch, Vol: vol.ID, Sg: uint32(ref.SG), Chunk: 0, StripeSeq: ref.StripeSeq}); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range tc.bricks {
		b.DropStripeCache()
	}
	check("two shards lost")
	r, err := brickClient(t, m, g.Bricks[0]).ShardRead(ctx, &pb.ShardReadRequest{MapEpoch: m.Epoch, Vol: vol.ID, Sg: uint32(ref.SG),
		Shard: 0, Chunk: 0, StripeSeq: ref.StripeSeq, Blocks: uint32(ref.Len)})
	var shard0 []byte // blocks 0, 4, 8, ... (round-robin over the 4 data shards)
	for o := range int(ref.Len) {
		shard0 = append(shard0, data[4*o*limits.BlockBytes:(4*o+1)*limits.BlockBytes]...)
	}
	if err != nil || len(r.Missing) != 0 || !bytes.Equal(r.Data, shard0) {
		t.Fatalf("shard 0 not repaired by the read: missing %v, err %v", r.GetMissing(), err)
	}

	// A partial overwrite of a coded block merges into its stripe data.
	patch := []byte("written over a coded block")
	off := 3*limits.BlockBytes + 100
	if err := v.WriteAt(ctx, patch, uint64(off)); err != nil {
		t.Fatal(err)
	}
	copy(data[off:], patch)
	for _, b := range tc.bricks {
		b.DropStripeCache()
	}
	check("after a partial overwrite")

	// Back home (profile 0), then coded again for what follows.
	if st, err := v.Relayout(ctx, 0, uint64(size), 0, nil); err != nil || st.Swapped != blocks-1 {
		t.Fatalf("relayout home: %+v %v (want %d blocks moved: the overwritten one is home already)", st, err, blocks-1)
	}
	layout(map[uint16]int64{0: blocks})
	for _, b := range tc.bricks {
		b.DropStripeCache()
	}
	check("after moving home")
	if _, err := v.Relayout(ctx, 0, uint64(size), uint16(resp.Id), nil); err != nil {
		t.Fatal(err)
	}
	layout(map[uint16]int64{uint16(resp.Id): blocks})

	// A member of the stripe group that holds no replica of chunk 0's PG
	// goes down: its shards are rebuilt on the fly.
	var down string
	for _, b := range g.Bricks[1:4] {
		if !slices.Contains(vol.PGs[pg].Bricks, b) {
			down = b
			break
		}
	}
	if down == "" {
		t.Skip("every data member of the stripe group is a home replica of chunk 0")
	}
	tc.brick(down).Stop()
	for _, b := range tc.bricks {
		b.DropStripeCache()
	}
	got := make([]byte, 1<<20)
	if err := v.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, data[:1<<20]) {
		t.Fatalf("chunk 0 with %s down: err %v, equal %v", down, err, bytes.Equal(got, data[:1<<20]))
	}
}

// brickClient dials brick name of m for the rest of the test.
func brickClient(t *testing.T, m *clustermap.Map, name string) pb.BrickClient {
	t.Helper()
	conn, err := coordclient.Dial(m.Brick(name).Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewBrickClient(conn)
}

// TestCodedFailover: every primary codes chunks (under one map epoch, so
// their stripe seqs repeat across bricks), then a primary stops: its PGs'
// new primaries resolve refs to stripes other bricks coded while their own
// shard caches hold stripes with the same seqs on the same groups. Every
// byte must read back (a cache keyed without the chunk served another
// chunk's shards here).
func TestCodedFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 2))
	tc := newTestCluster(t, 6, time.Hour)
	v := createVolume(t, tc.cl, "ecf", false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	size := 32 << 20
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := v.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	resp := ensureProfile(t, tc.cl, "ecf", 4, 2)
	if _, err := v.Relayout(ctx, 0, uint64(size), uint16(resp.Id), nil); err != nil {
		t.Fatal(err)
	}
	m := clusterMap(t, tc.cl)
	victim := m.Volume("ecf").PGs[0].Primary()
	tc.brick(victim).Stop()
	got := make([]byte, size)
	if err := v.ReadAt(ctx, got, 0); err != nil {
		t.Fatalf("read with %s stopped: %v", victim, err)
	}
	if !bytes.Equal(got, data) {
		i := 0
		for got[i] == data[i] {
			i++
		}
		t.Fatalf("with %s stopped, the first wrong byte is at %d (chunk %d)", victim, i, i>>20)
	}
}

// ensureProfile admits profile k+m on volume vol through the coordinator
// and returns its id and the new map's bytes.
func ensureProfile(t *testing.T, cl *coordclient.Client, vol string, k, m uint32) *pb.EnsureProfileResponse {
	t.Helper()
	var resp *pb.EnsureProfileResponse
	call(t, cl, "ensure profile", func(ctx context.Context, c pb.CoordinatorClient) (err error) {
		resp, err = c.EnsureProfile(ctx, &pb.EnsureProfileRequest{Volume: vol, Profile: &pb.Profile{K: k, M: m}})
		return err
	})
	return resp
}

// TestCodedBadBlocks: a 4+2 stripe whose shards 0, 1 and 2 each lack one
// block, at three different offsets, still reads back whole: each offset
// has five good blocks of six. (Counting a shard with one bad block as
// lost, as reads did before, made it three erasures of two allowed, and
// the read retried for ever: the 30-minute chaos run of session 22, two
// corrupt faults on two bricks' shards of one stripe.) The read writes the
// blocks back. Three shards lacking the block at one offset is data loss:
// the read of it fails at once with ErrDataLoss, no retry.
func TestCodedBadBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 2))
	tc := newTestCluster(t, 6, time.Hour)
	v := createVolume(t, tc.cl, "ec", false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	writeCoded(t, ctx, tc, v, "ec", data)
	m := clusterMap(t, tc.cl)
	vol := m.Volume("ec")
	primary := tc.brick(vol.PGs[vol.PGOf(0)].Primary())
	refBytes, e, err := primary.Store().Latest(vol.ID, 0, ^uint64(0))
	if err != nil || !e.Ref {
		t.Fatalf("block 0 at the primary: ref %v, err %v", e.Ref, err)
	}
	ref, err := ec.DecodeRef(refBytes)
	if err != nil {
		t.Fatal(err)
	}
	g := vol.SGs[ref.SG]
	geo, err := ec.NewGeometry(ec.Profile{K: 4, M: 2}, int(vol.ChunkBytes))
	if err != nil {
		t.Fatal(err)
	}
	remove := func(shard, o int) {
		t.Helper()
		key := store.Key{Vol: shardVolID(vol.ID, int(ref.SG)), Block: uint64(o), Gen: ref.StripeSeq} // chunk 0
		if err := tc.brick(g.Bricks[shard]).Store().Apply(ctx, []store.Op{{Kind: store.OpRemove, Key: key}}); err != nil {
			t.Fatal(err)
		}
	}
	shardRead := func(shard int) *pb.ShardReadResponse {
		t.Helper()
		r, err := brickClient(t, m, g.Bricks[shard]).ShardRead(ctx, &pb.ShardReadRequest{MapEpoch: m.Epoch, Vol: vol.ID, Sg: uint32(ref.SG),
			Shard: uint32(shard), Chunk: 0, StripeSeq: ref.StripeSeq, Blocks: uint32(ref.Len)})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for shard, o := range []int{0, 1, 2} {
		remove(shard, o)
		if r := shardRead(shard); !slices.Equal(r.Missing, []uint32{uint32(o)}) {
			t.Fatalf("shard %d after removing its block %d: missing %v", shard, o, r.Missing)
		}
	}
	for _, b := range tc.bricks {
		b.DropStripeCache()
	}
	got := make([]byte, len(data))
	if err := v.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read with one block missing in each of three shards: err %v, equal %v", err, bytes.Equal(got, data))
	}
	for shard := range 3 {
		if r := shardRead(shard); len(r.Missing)+len(r.Corrupt) != 0 {
			t.Fatalf("shard %d not repaired by the read: missing %v corrupt %v", shard, r.Missing, r.Corrupt)
		}
	}

	const o = 5
	for shard := range 3 {
		remove(shard, o)
	}
	for _, b := range tc.bricks {
		b.DropStripeCache()
	}
	b, ok := geo.BlockAt(0, o)
	if !ok {
		t.Fatalf("no block at shard 0 offset %d", o)
	}
	start := time.Now()
	err = v.ReadAt(ctx, got[:limits.BlockBytes], uint64(b)*limits.BlockBytes)
	if !errors.Is(err, volume.ErrDataLoss) {
		t.Fatalf("read of block %d, lacking on three shards of a 4+2 stripe: err %v after %v, want ErrDataLoss", b, err, time.Since(start))
	}
	// Another block of the chunk still reads.
	if err := v.ReadAt(ctx, got[:limits.BlockBytes], 0); err != nil || !bytes.Equal(got[:limits.BlockBytes], data[:limits.BlockBytes]) {
		t.Fatalf("block 0 beside a lost one: err %v", err)
	}
}

// writeCoded writes data at the start of volume name (v) and moves it into
// 4+2 stripes.
func writeCoded(t *testing.T, ctx context.Context, tc *testCluster, v *volume.Volume, name string, data []byte) {
	t.Helper()
	if err := v.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	resp := ensureProfile(t, tc.cl, name, 4, 2)
	if _, err := v.Relayout(ctx, 0, uint64(len(data)), uint16(resp.Id), nil); err != nil {
		t.Fatal(err)
	}
}
