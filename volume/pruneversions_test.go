package volume_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/volume"
)

// listVersions spells the entries the bricks list for the block holding
// byte at: "1.2 2.4t 2.u" (generation.file version, t a tombstone).
func listVersions(t *testing.T, v *volume.Volume, at uint64) string {
	t.Helper()
	vs, err := v.BlockVersions(context.Background(), at)
	if err != nil {
		t.Fatalf("block versions at %d: %v", at, err)
	}
	var out []string
	for _, e := range vs {
		w := fmt.Sprintf("%d.%d", e.Gen, e.FileVersion)
		if e.FileVersion == clustermap.Unversioned {
			w = fmt.Sprintf("%d.u", e.Gen)
		}
		if e.Tombstone {
			w += "t"
		}
		out = append(out, w)
	}
	return strings.Join(out, " ")
}

// inventories returns, per PG of the volume, what each of its members
// holds (block, gen, seq), spelt.
func inventories(t *testing.T, v *volume.Volume, name string) map[uint32]map[string]string {
	t.Helper()
	m := v.Map()
	vol := m.Volume(name)
	out := map[uint32]map[string]string{}
	for pg, p := range vol.PGs {
		out[uint32(pg)] = map[string]string{}
		for _, b := range p.Bricks {
			conn, err := coordclient.Dial(m.Brick(b).Addr)
			if err != nil {
				t.Fatal(err)
			}
			var sb strings.Builder
			err = pb.ReadInventory(context.Background(), pb.NewBrickClient(conn), &pb.InventoryRequest{MapEpoch: m.Epoch, Vol: vol.ID, Pg: uint32(pg)},
				func(e *pb.InventoryEntry) { fmt.Fprintf(&sb, "%d/%x/%d ", e.Block, e.Gen, e.Seq) })
			conn.Close()
			if err != nil {
				t.Fatalf("inventory of pg %d at %s: %v", pg, b, err)
			}
			out[uint32(pg)][b] = sb.String()
		}
	}
	return out
}

// checkReplicasAgree fails unless every member of every PG holds the
// same entries.
func checkReplicasAgree(t *testing.T, what string, v *volume.Volume, name string) {
	t.Helper()
	for pg, members := range inventories(t, v, name) {
		var first string
		i := 0
		for b, inv := range members {
			if i > 0 && inv != first {
				t.Errorf("%s: pg %d: members hold different entries (%s: %q)", what, pg, b, inv)
			}
			first = inv
			i++
		}
	}
}

// TestPruneVersions runs retention pruning on an in-process cluster: a
// file's 512 GiB extent (mostly sparse) with four data blocks across a
// chunk boundary and a history block at its end, five file versions (some
// blocks only in some, a partial write, a decommit at version 4), a
// snapshot between versions 2 and 3. Keeping versions 2 and 4 below 5
// leaves what the live volume, the snapshot and versions 2, 4 and from 5
// on read, removes the other entries (on every replica), and a second
// call removes nothing; then keeping none below 6 still leaves the live
// volume and the snapshot as they were.
func TestPruneVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	cl := startCluster(t, 2)
	v := createVolume(t, cl, "fv", 2, true)
	ctx := context.Background()
	const bs = limits.BlockBytes
	const extent = uint64(512 << 30)
	base := uint64(1 << 40)
	off := base + limits.ChunkBytesDefault - 2*bs // blocks 0-3 of the file: two chunks
	hist := base + extent - bs                    // the history block
	outside := base + extent                      // the next file's first block
	write := func(p []byte, at uint64, f uint32) {
		t.Helper()
		if err := v.WriteAtVersion(ctx, p, at, f); err != nil {
			t.Fatalf("write at %d version %d: %v", at, f, err)
		}
	}
	for f := uint32(1); f <= 5; f++ {
		write(fill(byte(0x80+f), bs), hist, f)
		if f <= 3 {
			write(fill(byte(0x40+f), bs), outside, f)
		}
		switch f {
		case 1:
			write(fill(1, 4*bs), off, 1)
		case 2:
			write(fill(2, 2*bs), off, 2) // blocks 0 and 1 only
			snapshot(t, cl, "fv", "s1")
		case 3:
			write(fill(3, 3*bs), off, 3)
			write(fill(0x33, 100), off+3*bs+10, 3) // partial, over version 1's block 3
		case 4:
			if err := v.DecommitVersion(ctx, off+bs, bs, 4); err != nil {
				t.Fatal(err)
			}
			write(fill(4, bs), off, 4)
			write(fill(4, bs), off+3*bs, 4)
		case 5:
			write(fill(5, bs), off, 5)
			write(fill(0x55, 100), off+2*bs+20, 5) // partial, over version 3's block 2
		}
	}
	type reader struct {
		snap string
		f    uint32
	}
	retained := []reader{{"", 0}, {"s1", 0}, {"", 2}, {"", 4}, {"", 5}, {"", 6}, {"", 1000}, {"s1", 5}}
	readAll := func() map[reader]map[uint64][]byte {
		out := map[reader]map[uint64][]byte{}
		for _, r := range retained {
			out[r] = map[uint64][]byte{}
			for _, at := range []uint64{off, off + bs, off + 2*bs, off + 3*bs, hist, outside} {
				buf := make([]byte, bs)
				if err := v.ReadSnapshotAtVersion(ctx, r.snap, buf, at, r.f); err != nil {
					t.Fatal(err)
				}
				out[r][at] = buf
			}
		}
		return out
	}
	sameReads := func(what string, want map[reader]map[uint64][]byte, readers []reader) {
		t.Helper()
		got := readAll()
		for _, r := range readers {
			for at, b := range want[r] {
				if string(got[r][at]) != string(b) {
					t.Errorf("%s: snapshot %q version %d reads %s at %d, before %s", what, r.snap, r.f, summary(got[r][at]), at, summary(b))
				}
			}
		}
	}
	listAll := func(what string, want map[uint64]string) {
		t.Helper()
		for at, w := range want {
			if got := listVersions(t, v, at); got != w {
				t.Errorf("%s: block at %d lists %q, want %q", what, at, got, w)
			}
		}
	}
	before := readAll()
	listAll("before", map[uint64]string{
		off: "1.1 1.2 2.3 2.4 2.5", off + bs: "1.1 1.2 2.3 2.4t", off + 2*bs: "1.1 2.3 2.5", off + 3*bs: "1.1 2.3 2.4",
		hist: "1.1 1.2 2.3 2.4 2.5", outside: "1.1 1.2 2.3",
	})

	st, err := v.PruneVersions(ctx, base, extent, []uint32{2, 4}, 5)
	if err != nil {
		t.Fatal(err)
	}
	sameReads("kept 2 and 4 below 5", before, retained)
	// Block 2 keeps 2.3: version 4 reads it (the block has no entry of
	// 4); block 3 keeps 1.1 and block 2 keeps 1.1 for the snapshot and
	// version 2; the block past the extent is not touched.
	listAll("kept 2 and 4 below 5", map[uint64]string{
		off: "1.2 2.4 2.5", off + bs: "1.2 2.4t", off + 2*bs: "1.1 2.3 2.5", off + 3*bs: "1.1 2.4",
		hist: "1.2 2.4 2.5", outside: "1.1 1.2 2.3",
	})
	if want := (volume.PruneStats{Blocks: 4, Versions: 7}); st.Blocks != want.Blocks || st.Versions != want.Versions || st.Bytes < 7*bs {
		t.Errorf("pruned %+v, want %+v and at least %d bytes", st, want, 7*bs)
	}
	checkReplicasAgree(t, "kept 2 and 4 below 5", v, "fv")

	st, err = v.PruneVersions(ctx, base, extent, []uint32{4, 2}, 5)
	if err != nil || st != (volume.PruneStats{}) {
		t.Errorf("the same prune again: %+v, %v; want nothing removed", st, err)
	}

	st, err = v.PruneVersions(ctx, base, extent, nil, 6)
	if err != nil {
		t.Fatal(err)
	}
	sameReads("none kept below 6", before, []reader{{"", 0}, {"s1", 0}, {"", 6}, {"", 1000}})
	listAll("none kept below 6", map[uint64]string{
		off: "1.2 2.5", off + bs: "1.2 2.4t", off + 2*bs: "1.1 2.5", off + 3*bs: "1.1 2.4",
		hist: "1.2 2.5", outside: "1.1 1.2 2.3",
	})
	if st.Versions != 3 {
		t.Errorf("none kept below 6: pruned %+v, want 3 versions", st)
	}
	checkReplicasAgree(t, "none kept below 6", v, "fv")
}

// TestPruneVersionsRefused: a volume without file versions and bad
// arguments are refused by the client and by the brick (InvalidArgument).
func TestPruneVersionsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	cl := startCluster(t, 1)
	plain := createVolume(t, cl, "plain", 1, false)
	fv := createVolume(t, cl, "fv", 1, true)
	ctx := context.Background()
	if _, err := plain.PruneVersions(ctx, 0, 1<<20, nil, 5); !errors.Is(err, volume.ErrNoFileVersions) {
		t.Errorf("prune on a volume without file versions: %v, want ErrNoFileVersions", err)
	}
	if _, err := fv.PruneVersions(ctx, 1<<63, 1<<63+1, nil, 5); !errors.Is(err, volume.ErrRange) {
		t.Errorf("prune past 2^64: %v, want ErrRange", err)
	}
	tooMany := make([]uint32, clustermap.PruneKeepMax+1)
	for i := range tooMany {
		tooMany[i] = 1
	}
	bad := map[string]struct {
		keep  []uint32
		below uint32
	}{
		"below 0":       {nil, 0},
		"keep 0":        {[]uint32{0}, 5},
		"keep = below":  {[]uint32{2, 5}, 5},
		"keep > below":  {[]uint32{7}, 5},
		"too many kept": {tooMany, 5},
		"keep, below 0": {[]uint32{1}, 0},
		"keep above":    {[]uint32{clustermap.FileVersionMax}, 3},
	}
	for what, a := range bad {
		if _, err := fv.PruneVersions(ctx, 0, 1<<20, a.keep, a.below); err == nil {
			t.Errorf("client: %s: taken", what)
		}
	}
	brickOf := func(v *volume.Volume, name string) (pb.BrickClient, *clustermap.Volume, uint64) {
		m := v.Map()
		vol := m.Volume(name)
		conn, err := coordclient.Dial(m.Brick(vol.PGs[0].Primary()).Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return pb.NewBrickClient(conn), vol, m.Epoch
	}
	w := &pb.Writer{Id: "t"}
	b, vol, epoch := brickOf(plain, "plain")
	err := untilAvailable(func() error {
		_, err := b.PruneVersions(ctx, &pb.PruneVersionsRequest{MapEpoch: epoch, Vol: vol.ID, Pg: 0, Length: 1 << 20, Below: 5, Writer: w})
		return err
	})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "volume plain does not keep file versions") {
		t.Errorf("brick: prune on a volume without file versions: %v", err)
	}
	b, vol, epoch = brickOf(fv, "fv")
	for what, a := range bad {
		err := untilAvailable(func() error {
			_, err := b.PruneVersions(ctx, &pb.PruneVersionsRequest{MapEpoch: epoch, Vol: vol.ID, Pg: 0, Length: 1 << 20, Keep: a.keep, Below: a.below, Writer: w})
			return err
		})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("brick: %s: %v, want InvalidArgument", what, err)
		}
	}
	for what, r := range map[string]*pb.PruneVersionsRequest{
		"no writer": {MapEpoch: epoch, Vol: vol.ID, Length: 1 << 20, Below: 5},
		"past 2^64": {MapEpoch: epoch, Vol: vol.ID, Offset: 1 << 63, Length: 1<<63 + 1, Below: 5, Writer: w},
	} {
		err := untilAvailable(func() error { _, err := b.PruneVersions(ctx, r); return err })
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("brick: %s: %v, want InvalidArgument", what, err)
		}
	}
	// Arguments in bounds on an empty range remove nothing.
	if st, err := fv.PruneVersions(ctx, 0, 1<<20, slices.Repeat([]uint32{1}, clustermap.PruneKeepMax), 5); err != nil || st != (volume.PruneStats{}) {
		t.Errorf("prune of nothing keeping %d versions: %+v, %v", clustermap.PruneKeepMax, st, err)
	}
}
