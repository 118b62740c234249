package brick_test

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/brick/ec"
	"github.com/plumeria-fs/plumeria/brick/store"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/internal/testseed"
)

// stripe names a stripe of a volume: its group, chunk and seq.
type stripe struct {
	sg         uint16
	chunk, seq uint64
}

// TestStripeGC: four 1 MiB chunks coded into 4+2 stripes on 6 bricks.
// Chunk 0 is overwritten whole, chunk 1 written in part and coded again,
// a stripe of chunk 2 is stored with no ref naming it (a coding step that
// failed between its shard writes and its swap), a snapshot is taken and
// chunk 3 overwritten. A coding step slower than half the grace is
// abandoned and leaves no stripe. The first sweep deletes nothing; the
// one a grace later deletes the stripes of chunk 0 and the first of
// chunk 1 and the unreferenced one from every member, and keeps the
// second of chunk 1, chunk 2's, and chunk 3's (its snapshot refers to
// it). Every byte of the volume and of the snapshot reads back.
func TestStripeGC(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	const grace = 3 * time.Second
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 3))
	tc := newTestCluster(t, 6, time.Hour)
	setGrace := func(d time.Duration) {
		for _, b := range tc.bricks {
			b.SetStripeGCGrace(d)
		}
	}
	setGrace(grace)
	v := createVolume(t, tc.cl, "gc", false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	random := func(n int) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		return p
	}
	m := clusterMap(t, tc.cl)
	cb := int(m.Volume("gc").ChunkBytes)
	data := random(4 * cb)
	if err := v.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	prof := ensureProfile(t, tc.cl, "gc", 4, 2)
	relayout := func(chunk, chunks int, coded int64) {
		t.Helper()
		st, err := v.Relayout(ctx, uint64(chunk*cb), uint64(chunks*cb), uint16(prof.Id), nil)
		if err != nil || st.Coded != coded {
			t.Fatalf("relayout of chunks [%d, +%d): %+v, %v; want %d coded", chunk, chunks, st, err, coded)
		}
	}
	relayout(0, 4, 4)
	m = clusterMap(t, tc.cl)
	vol := m.Volume("gc")
	geo, err := ec.NewGeometry(ec.Profile{K: 4, M: 2}, cb)
	if err != nil {
		t.Fatal(err)
	}
	per := uint64(geo.ShardBlocks())
	stripeOf := func(chunk int) stripe {
		t.Helper()
		block := uint64(chunk * cb / limits.BlockBytes)
		primary := tc.brick(vol.PGs[vol.PGOf(uint64(chunk*cb))].Primary())
		p, e, err := primary.Store().Latest(vol.ID, block, ^uint64(0))
		if err != nil || !e.Ref {
			t.Fatalf("block %d at its primary: ref %v, err %v", block, e.Ref, err)
		}
		ref, err := ec.DecodeRef(p)
		if err != nil {
			t.Fatal(err)
		}
		return stripe{ref.SG, uint64(chunk), ref.StripeSeq}
	}
	// held counts, per stripe of the volume, the bricks holding blocks of it.
	held := func() map[stripe]int {
		t.Helper()
		out := map[stripe]int{}
		for _, b := range tc.bricks {
			on := map[stripe]bool{}
			for sg := range vol.SGs {
				err := b.Store().Scan(shardVolID(vol.ID, sg), 0, ^uint64(0), func(e store.Entry) bool {
					on[stripe{uint16(sg), e.Block / per, e.Gen}] = true
					return true
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			for s := range on {
				out[s]++
			}
		}
		return out
	}
	coded := []stripe{stripeOf(0), stripeOf(1), stripeOf(2), stripeOf(3)}
	if h := held(); len(h) != 4 {
		t.Fatalf("after coding: stripes held %v, want the 4 of %v", h, coded)
	}

	// A coding step past half the grace is abandoned, its stripe deleted.
	// (Chunk 2 gets a written block first: a chunk whose blocks are all
	// refs to the profile's stripes is not coded again.)
	one := random(4096)
	if err := v.WriteAt(ctx, one, uint64(2*cb+4096)); err != nil {
		t.Fatal(err)
	}
	copy(data[2*cb+4096:], one)
	setGrace(time.Nanosecond)
	pg := vol.PGOf(uint64(2 * cb))
	_, err = brickClient(t, m, vol.PGs[pg].Primary()).Relayout(ctx, &pb.RelayoutRequest{MapEpoch: m.Epoch, Vol: vol.ID, Pg: pg, Chunk: 2, Profile: prof.Id})
	if status.Code(err) != codes.Aborted {
		t.Fatalf("relayout slower than half the grace: %v, want Aborted", err)
	}
	if h := held(); !maps.Equal(h, map[stripe]int{coded[0]: 6, coded[1]: 6, coded[2]: 6, coded[3]: 6}) {
		t.Fatalf("after an abandoned coding step: stripes held %v, want the 4 of %v on 6 bricks each", h, coded)
	}
	setGrace(grace)

	// Chunk 0 overwritten; chunk 1 written in part and coded again.
	copy(data, random(cb))
	if err := v.WriteAt(ctx, data[:cb], 0); err != nil {
		t.Fatal(err)
	}
	patch := random(3 * limits.BlockBytes)
	copy(data[cb+5*limits.BlockBytes:], patch)
	if err := v.WriteAt(ctx, patch, uint64(cb+5*limits.BlockBytes)); err != nil {
		t.Fatal(err)
	}
	relayout(1, 1, 1)
	recoded := stripeOf(1)
	// A stripe of chunk 2 that no ref names, on every member of a group.
	orphan := stripe{sg: coded[2].sg, chunk: 2, seq: 1 << 62}
	for i, b := range vol.SGs[orphan.sg].Bricks {
		if _, err := brickClient(t, m, b).ShardPut(ctx, &pb.ShardPutRequest{MapEpoch: m.Epoch, Vol: vol.ID, Sg: uint32(orphan.sg), Shard: uint32(i),
			Chunk: orphan.chunk, StripeSeq: orphan.seq, Data: random(2 * limits.BlockBytes)}); err != nil {
			t.Fatal(err)
		}
	}
	// A snapshot, then chunk 3 overwritten: the snapshot reads its stripe.
	call(t, tc.cl, "snapshot", func(ctx context.Context, c pb.CoordinatorClient) error {
		_, err := c.Snapshot(ctx, &pb.SnapshotRequest{Volume: "gc", Name: "before"})
		return err
	})
	snapData := slices.Clone(data)
	copy(data[3*cb:], random(cb))
	if err := v.WriteAt(ctx, data[3*cb:], uint64(3*cb)); err != nil {
		t.Fatal(err)
	}

	all := []stripe{coded[0], coded[1], coded[2], coded[3], recoded, orphan}
	sweep := func() int {
		n := 0
		for _, b := range tc.bricks {
			n += b.SweepStripes(ctx)
		}
		return n
	}
	before := counter(t, "plumeria_brick_stripes_collected_total")
	beforeBytes := counter(t, "plumeria_brick_stripe_gc_bytes_total")
	if n := sweep(); n != 0 {
		t.Fatalf("the first sweep deleted %d stripes; a stripe goes only after two sweeps a grace apart", n)
	}
	if h := held(); len(h) != len(all) {
		t.Fatalf("after the first sweep: stripes held %v, want %v", h, all)
	}
	time.Sleep(grace)
	sweep()
	want := map[stripe]int{coded[2]: 6, coded[3]: 6, recoded: 6}
	if h := held(); !maps.Equal(h, want) {
		t.Fatalf("after the second sweep: stripes held %v, want %v (gone: %v %v %v)", h, want, coded[0], coded[1], orphan)
	}
	if n := counter(t, "plumeria_brick_stripes_collected_total") - before; n < 3 {
		t.Fatalf("stripes collected counter rose by %v, want 3", n)
	}
	// Chunks 0 and 1: 6 shards of 256 KiB; the orphan: 6 of 2 blocks.
	if n, want := counter(t, "plumeria_brick_stripe_gc_bytes_total")-beforeBytes, float64(2*6*256<<10+6*2*limits.BlockBytes); n < want {
		t.Fatalf("stripe gc bytes rose by %v, want %v", n, want)
	}

	for _, b := range tc.bricks {
		b.DropStripeCache()
	}
	got := make([]byte, len(data))
	if err := v.ReadAt(ctx, got, 0); err != nil {
		t.Fatal(err)
	}
	if i := firstDiff(got, data); i >= 0 {
		t.Fatalf("volume: first wrong byte at %d", i)
	}
	if err := v.ReadSnapshotAt(ctx, "before", got, 0); err != nil {
		t.Fatal(err)
	}
	if i := firstDiff(got, snapData); i >= 0 {
		t.Fatalf("snapshot: first wrong byte at %d", i)
	}
}
