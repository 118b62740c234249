package brick_test

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/brick"
	"github.com/plumeria-fs/plumeria/brick/ec"
	"github.com/plumeria-fs/plumeria/brick/store"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/volume"
)

// brick returns the brick named name ("b<i>").
func (tc *testCluster) brick(name string) *brick.Server {
	tc.t.Helper()
	i, err := strconv.Atoi(strings.TrimPrefix(name, "b"))
	if err != nil || i >= len(tc.bricks) {
		tc.t.Fatalf("no brick %q", name)
	}
	return tc.bricks[i]
}

// clusterMap returns the coordinator's map.
func clusterMap(t *testing.T, cl *coordclient.Client) *clustermap.Map {
	t.Helper()
	var m *clustermap.Map
	call(t, cl, "get map", func(ctx context.Context, c pb.CoordinatorClient) error {
		r, err := c.GetMap(ctx, &pb.GetMapRequest{})
		if err != nil {
			return err
		}
		m, err = clustermap.Decode(r.MapJson)
		return err
	})
	return m
}

// blockBytes is the content the test writes to block b: b+1 and a marker.
func blockBytes(b uint64, marker byte) []byte {
	p := bytes.Repeat([]byte{byte(b + 1)}, limits.BlockBytes)
	p[0] = marker
	return p
}

// liveEntries returns the live entry of each block [0, n) at s.
func liveEntries(t *testing.T, s *store.Store, vol, n uint64) []store.Entry {
	t.Helper()
	out := make([]store.Entry, n)
	for b := range n {
		_, e, err := s.Latest(vol, b, ^uint64(0))
		if err != nil {
			t.Fatalf("block %d: %v", b, err)
		}
		out[b] = e
	}
	return out
}

// TestRefsThroughTheBrick: a chunk written through the volume client has
// some blocks swapped for refs at its PG's primary (swapToRefs); one of
// them was overwritten after the primary's entries were read and keeps
// its put. Then every in-sync member holds the same refs with the same
// seqs; a read of a swapped block, and a partial write over one, get
// resolveRef's refusal of a ref to a stripe group the map lacks (never
// zeros or the ref's bytes) while the other
// blocks read fine; a whole-block write turns a ref back into a put;
// verify sees the replicas equal; BlockVersions marks refs; repair
// fetches a ref as a ref; and a member added by a drain is backfilled
// with the refs.
func TestRefsThroughTheBrick(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	tc := newTestCluster(t, 3, time.Hour)
	v := createVolume(t, tc.cl, "coded", false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 16 // blocks of chunk 0
	var chunk []byte
	for b := range uint64(n) {
		chunk = append(chunk, blockBytes(b, 'a')...)
	}
	if err := v.WriteAt(ctx, chunk, 0); err != nil {
		t.Fatal(err)
	}
	m := clusterMap(t, tc.cl)
	vol := m.Volume("coded")
	pg := vol.PGOf(0)
	members := vol.PGs[pg].InSync()
	primary := tc.brick(vol.PGs[pg].Primary())
	read := liveEntries(t, primary.Store(), vol.ID, n)

	// Block 3 changes between the read and the swap.
	if err := v.WriteAt(ctx, blockBytes(3, 'b'), 3*limits.BlockBytes); err != nil {
		t.Fatal(err)
	}
	ref := ec.EncodeRef(ec.Ref{SG: 1, StripeSeq: 42, Len: 4})
	swapped := []uint64{0, 1, 2, 4, 5, 6, 7}
	var swaps []brick.RefSwap
	for b := range uint64(8) {
		swaps = append(swaps, brick.NewRefSwap(b, read[b].Gen, read[b].Seq, ref))
	}
	got, err := primary.SwapToRefs(ctx, vol.ID, pg, swaps)
	if err != nil || got != len(swapped) {
		t.Fatalf("swap: %d swapped, err %v; want %d", got, err, len(swapped))
	}

	// Every in-sync member holds the refs, with the primary's seqs; block
	// 3 and the blocks not swapped keep their puts.
	want := liveEntries(t, primary.Store(), vol.ID, n)
	for _, name := range members {
		s := tc.brick(name).Store()
		for b := range uint64(n) {
			data, e, err := s.Latest(vol.ID, b, ^uint64(0))
			isRef := slices.Contains(swapped, b)
			switch {
			case err != nil:
				t.Fatalf("%s block %d: %v", name, b, err)
			case e.Ref != isRef || e.Seq != want[b].Seq:
				t.Fatalf("%s block %d: ref %v seq %d, want ref %v seq %d", name, b, e.Ref, e.Seq, isRef, want[b].Seq)
			case isRef && (!bytes.Equal(data, ref) || e.Seq <= read[b].Seq):
				t.Fatalf("%s block %d: ref %x seq %d (read at seq %d)", name, b, data, e.Seq, read[b].Seq)
			case b == 3 && !bytes.Equal(data, blockBytes(3, 'b')):
				t.Fatalf("%s block 3 lost the write made before the swap", name)
			}
		}
	}

	// Reads: a ref refuses (at once: the client does not retry it), the
	// rest read as written.
	for _, r := range []struct{ off, n uint64 }{{1 * limits.BlockBytes, limits.BlockBytes}, {7*limits.BlockBytes + 100, 2 * limits.BlockBytes}, {0, n * limits.BlockBytes}, {5*limits.BlockBytes + 7, 10}} {
		buf := make([]byte, r.n)
		start := time.Now()
		err := v.ReadAt(ctx, buf, r.off)
		if err == nil || !strings.Contains(err.Error(), "ref to stripe group 1 of volume") {
			t.Fatalf("read at %d of %d bytes over a ref: err %v", r.off, r.n, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("read over a ref failed after %v: retried", d)
		}
	}
	if got := readBlocks(t, ctx, v, 8, n-8); !bytes.Equal(got, chunk[8*limits.BlockBytes:]) {
		t.Fatal("blocks 8.. read wrong")
	}
	if got := readBlocks(t, ctx, v, 3, 1); !bytes.Equal(got, blockBytes(3, 'b')) {
		t.Fatal("block 3 read wrong")
	}
	// A partial write merges into the block's data: over a ref it must
	// refuse, not merge into zeros or the payload.
	if err := v.WriteAt(ctx, []byte("xyz"), 2*limits.BlockBytes+10); err == nil || !strings.Contains(err.Error(), "ref to stripe group 1 of volume") {
		t.Fatalf("partial write over a ref: %v", err)
	}
	// A whole-block write makes it a put again.
	if err := v.WriteAt(ctx, blockBytes(4, 'c'), 4*limits.BlockBytes); err != nil {
		t.Fatal(err)
	}
	if got := readBlocks(t, ctx, v, 4, 1); !bytes.Equal(got, blockBytes(4, 'c')) {
		t.Fatal("block 4 read wrong after a write over its ref")
	}
	swapped = slices.DeleteFunc(swapped, func(b uint64) bool { return b == 4 })

	// BlockVersions marks the ref.
	vers, err := v.BlockVersions(ctx, 1*limits.BlockBytes)
	if err != nil || len(vers) == 0 || !vers[len(vers)-1].Ref || vers[len(vers)-1].Tombstone {
		t.Fatalf("block versions of a ref: %+v, %v", vers, err)
	}
	checkVerify(t, ctx, v)

	// Repair of a ref at the primary fetches it as a ref from a backup.
	key := store.Key{Vol: vol.ID, Block: 1, Gen: want[1].Gen}
	op, err := primary.Repair(ctx, pg, key)
	if err != nil || op.Kind != store.OpRef || !bytes.Equal(op.Ref, ref) || op.Seq != want[1].Seq || op.Data != nil {
		t.Fatalf("repair of a ref: %+v, %v", op, err)
	}
	if data, e, err := primary.Store().Get(key); err != nil || !e.Ref || e.Seq != want[1].Seq || !bytes.Equal(data, ref) {
		t.Fatalf("after repair: %x %+v %v", data, e, err)
	}

	// A member that joins later is backfilled with the refs: drain the
	// backup; the third brick replaces it.
	backup := members[0]
	if backup == vol.PGs[pg].Primary() {
		backup = members[1]
	}
	call(t, tc.cl, "drain", func(ctx context.Context, c pb.CoordinatorClient) error {
		_, err := c.DrainBrick(ctx, &pb.DrainBrickRequest{Name: backup})
		return err
	})
	var joined string
	deadline := time.Now().Add(60 * time.Second)
	for joined == "" {
		p := clusterMap(t, tc.cl).Volume("coded").PGs[pg]
		if len(p.Syncing) == 0 && !slices.Contains(p.Bricks, backup) && len(p.InSync()) == 2 {
			for _, b := range p.Bricks {
				if !slices.Contains(members, b) {
					joined = b
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pg %d never moved off %s: %+v", pg, backup, p)
		}
		time.Sleep(100 * time.Millisecond)
	}
	after := liveEntries(t, primary.Store(), vol.ID, n)
	for b, e := range liveEntries(t, tc.brick(joined).Store(), vol.ID, n) {
		if e.Ref != slices.Contains(swapped, uint64(b)) || e.Seq != after[b].Seq || e.Gen != after[b].Gen {
			t.Fatalf("backfilled %s block %d: %+v, primary %+v", joined, b, e, after[b])
		}
	}
	checkVerify(t, ctx, v)
}

// readBlocks reads n blocks from block b.
func readBlocks(t *testing.T, ctx context.Context, v *volume.Volume, b, n uint64) []byte {
	t.Helper()
	buf := make([]byte, n*limits.BlockBytes)
	if err := v.ReadAt(ctx, buf, b*limits.BlockBytes); err != nil {
		t.Fatalf("read blocks %d..%d: %v", b, b+n, err)
	}
	return buf
}

// checkVerify fails unless the in-sync replicas of v agree (seqs and refs).
func checkVerify(t *testing.T, ctx context.Context, v *volume.Volume) {
	t.Helper()
	diffs, err := v.VerifyReplicas(ctx, nil)
	if err != nil || len(diffs) > 0 {
		t.Fatalf("verify: %v %v", diffs, err)
	}
}

// TestSwapToRefsRefuses: blocks of another PG, a bad payload and a key
// given twice are refused whole; a tombstone and an absent key are left
// alone.
func TestSwapToRefsRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	tc := newTestCluster(t, 2, time.Hour)
	v := createVolume(t, tc.cl, "refuse", false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := v.WriteAt(ctx, bytes.Repeat([]byte{7}, 4*limits.BlockBytes), 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Decommit(ctx, 2*limits.BlockBytes, limits.BlockBytes); err != nil {
		t.Fatal(err)
	}
	m := clusterMap(t, tc.cl)
	vol := m.Volume("refuse")
	pg := vol.PGOf(0)
	primary := tc.brick(vol.PGs[pg].Primary())
	read := liveEntries(t, primary.Store(), vol.ID, 2)
	ref := ec.EncodeRef(ec.Ref{SG: 0, StripeSeq: 9, Len: 1})
	per := uint64(vol.ChunkBytes) / limits.BlockBytes
	other := uint64(0)
	for vol.PGOf(other*per*limits.BlockBytes) == pg {
		other++
	}
	for name, swaps := range map[string][]brick.RefSwap{
		"other pg":  {brick.NewRefSwap(other*per, read[0].Gen, read[0].Seq, ref)},
		"bad ref":   {brick.NewRefSwap(0, read[0].Gen, read[0].Seq, ref[:12])},
		"bad len":   {brick.NewRefSwap(0, read[0].Gen, read[0].Seq, append([]byte{1}, make([]byte, 12)...))},
		"twice":     {brick.NewRefSwap(0, read[0].Gen, read[0].Seq, ref), brick.NewRefSwap(0, read[0].Gen, read[0].Seq, ref)},
		"mixed":     {brick.NewRefSwap(1, read[1].Gen, read[1].Seq, ref), brick.NewRefSwap(other*per, 1, 1, ref)},
		"bad block": {brick.NewRefSwap(1, read[1].Gen, read[1].Seq, nil)},
	} {
		if n, err := primary.SwapToRefs(ctx, vol.ID, pg, swaps); err == nil || n != 0 {
			t.Fatalf("%s: swapped %d, err %v", name, n, err)
		}
	}
	if e := liveEntries(t, primary.Store(), vol.ID, 2); e[0] != read[0] || e[1] != read[1] {
		t.Fatalf("a refused swap changed entries: %+v, were %+v", e, read)
	}
	// Block 2 is a tombstone (or gone), block 9 was never written: left.
	n, err := primary.SwapToRefs(ctx, vol.ID, pg, []brick.RefSwap{
		brick.NewRefSwap(2, vol.LiveReadGen(), 0, ref), brick.NewRefSwap(9, vol.LiveReadGen(), 0, ref),
		brick.NewRefSwap(0, read[0].Gen, read[0].Seq+1000, ref)})
	if err != nil || n != 0 {
		t.Fatalf("swap of a tombstone, an absent block and a stale seq: %d, %v", n, err)
	}
	if n, err := primary.SwapToRefs(ctx, vol.ID, pg, nil); n != 0 || err != nil {
		t.Fatalf("empty swap: %d, %v", n, err)
	}
	// Not the primary: refused as a write would be.
	for _, b := range vol.PGs[pg].Bricks {
		if b != vol.PGs[pg].Primary() {
			if n, err := tc.brick(b).SwapToRefs(ctx, vol.ID, pg, []brick.RefSwap{brick.NewRefSwap(0, read[0].Gen, read[0].Seq, ref)}); err == nil || n != 0 {
				t.Fatalf("swap at backup %s: %d, %v", b, n, err)
			}
		}
	}
}
