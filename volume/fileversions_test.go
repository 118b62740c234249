package volume_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/brick"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coord"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/netmux"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/volume"
)

// startCluster runs a coordinator and n bricks in this process on
// loopback, and returns a client of the coordinator; all stop at cleanup.
func startCluster(t *testing.T, n int) *coordclient.Client {
	t.Helper()
	dir := t.TempDir()
	serve := func() (*netmux.Mux, *grpc.Server) {
		mux, err := netmux.Listen("127.0.0.1:0", nil)
		if err != nil {
			t.Fatal(err)
		}
		return mux, grpc.NewServer(grpc.MaxRecvMsgSize(limits.RPCMessageBytesMax), grpc.MaxSendMsgSize(limits.RPCMessageBytesMax))
	}
	mux, gs := serve()
	c, err := coord.Start(coord.Config{Name: "c1", Addr: mux.Addr().String(), DataDir: filepath.Join(dir, "c1"),
		Registerer: prometheus.NewRegistry()}, mux.Raft(), gs)
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(mux.GRPC())
	t.Cleanup(func() { gs.Stop(); c.Stop(); mux.Close() })
	cl, err := coordclient.New(mux.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	for i := range n {
		name := fmt.Sprintf("b%d", i)
		bmux, bgs := serve()
		b, err := brick.New(brick.Config{Name: name, Addr: bmux.Addr().String(), DataDir: filepath.Join(dir, name),
			Domain: map[string]string{"host": name}, Coord: cl}, bgs)
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
	}
	return cl
}

func createVolume(t *testing.T, cl *coordclient.Client, name string, replicas uint32, fileVersions bool) *volume.Volume {
	t.Helper()
	ctx := context.Background()
	err := cl.Call(ctx, func(ctx context.Context, c pb.CoordinatorClient) error {
		_, err := c.CreateVolume(ctx, &pb.CreateVolumeRequest{Name: name, Replicas: replicas, Pgs: 4, FileVersions: fileVersions})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	v, err := volume.Open(ctx, cl, name, volume.Options{Writer: "w-" + name, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return v
}

func snapshot(t *testing.T, cl *coordclient.Client, vol, name string) {
	t.Helper()
	err := cl.Call(context.Background(), func(ctx context.Context, c pb.CoordinatorClient) error {
		_, err := c.Snapshot(ctx, &pb.SnapshotRequest{Volume: vol, Name: name})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// untilAvailable runs call until it fails other than Unavailable (a new
// primary settling), for at most 10 s.
func untilAvailable(call func() error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := call()
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fill returns n bytes of one repeated byte.
func fill(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

// patch returns a copy of base with p at off.
func patch(base []byte, off int, p []byte) []byte {
	out := slices.Clone(base)
	copy(out[off:], p)
	return out
}

// versionReader reads [off, off+n) of one snapshot ("" live) at one file
// version (0 newest) and compares it with want.
type versionReader struct {
	t   *testing.T
	v   *volume.Volume
	off uint64
}

func (r versionReader) expect(what, snap string, f uint32, want []byte) {
	r.t.Helper()
	got := make([]byte, len(want))
	if err := r.v.ReadSnapshotAtVersion(context.Background(), snap, got, r.off, f); err != nil {
		r.t.Fatalf("%s: read snapshot %q version %d: %v", what, snap, f, err)
	}
	if !bytes.Equal(got, want) {
		r.t.Fatalf("%s: snapshot %q version %d reads %s, want %s", what, snap, f, summary(got), summary(want))
	}
}

// summary spells a buffer as runs of bytes: "3x4096 0x100".
func summary(b []byte) string {
	var out []string
	for i := 0; i < len(b); {
		j := i
		for j < len(b) && b[j] == b[i] {
			j++
		}
		out = append(out, fmt.Sprintf("%dx%d", b[i], j-i))
		i = j
	}
	return strings.Join(out, " ")
}

// TestFileVersions runs file versions end to end on bricks and a
// coordinator in this process: three file versions of the same blocks
// (across a chunk boundary, so two PGs), partial writes, a snapshot
// between versions, a decommit at a later version, the block lists, and
// the prune after the snapshot's deletion, which keeps every file version.
func TestFileVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	cl := startCluster(t, 2)
	v := createVolume(t, cl, "fv", 2, true)
	if !v.FileVersions() {
		t.Fatal("a volume created with file versions says it has none")
	}
	ctx := context.Background()
	const bs = limits.BlockBytes
	off := uint64(limits.ChunkBytesDefault - bs) // blocks 255, 256, 257: two chunks
	n := 3 * bs
	r := versionReader{t, v, off}
	write := func(p []byte, at uint64, f uint32) {
		t.Helper()
		if err := v.WriteAtVersion(ctx, p, at, f); err != nil {
			t.Fatalf("write at %d version %d: %v", at, f, err)
		}
	}

	A, B, C := fill(1, n), fill(2, n), fill(3, n)
	write(A, off, 1)
	write(B, off, 2)
	write(C, off, 3)
	r.expect("three versions", "", 1, A)
	r.expect("three versions", "", 2, B)
	r.expect("three versions", "", 3, C)
	r.expect("three versions", "", 0, C)
	r.expect("three versions", "", 100, C)

	// A partial write in version 3 changes version 3; one in version 4
	// starts from the live bytes.
	C3 := patch(C, 10, fill(0x33, 100))
	write(fill(0x33, 100), off+10, 3)
	V4 := patch(C3, bs+5000-bs, fill(0x44, 100)) // in block 256
	write(fill(0x44, 100), off+5000, 4)
	r.expect("partial writes", "", 2, B)
	r.expect("partial writes", "", 3, C3)
	r.expect("partial writes", "", 4, V4)
	r.expect("partial writes", "", 0, V4)

	// A snapshot, then version 5 over everything.
	snapshot(t, cl, "fv", "s1")
	D := fill(5, n)
	write(D, off, 5)
	r.expect("after the snapshot", "s1", 0, V4)
	r.expect("after the snapshot", "s1", 2, B)
	r.expect("after the snapshot", "s1", 5, V4)
	r.expect("after the snapshot", "", 5, D)
	r.expect("after the snapshot", "", 0, D)
	r.expect("after the snapshot", "", 4, V4)
	r.expect("after the snapshot", "", 1, A)

	// A decommit at version 6 of all but 100 bytes at each end.
	if err := v.DecommitVersion(ctx, off+100, uint64(n-200), 6); err != nil {
		t.Fatal(err)
	}
	E := patch(make([]byte, n), 0, D[:100])
	E = patch(E, n-100, D[:100])
	r.expect("decommitted", "", 0, E)
	r.expect("decommitted", "", 6, E)
	r.expect("decommitted", "", 5, D)
	r.expect("decommitted", "", 3, C3)
	r.expect("decommitted", "", 1, A)
	r.expect("decommitted", "s1", 0, V4)

	// An unversioned write (metadata) of block 258, in the snapshot's
	// generation and the next: only s1 reads the first.
	meta := off + uint64(n)
	if err := v.WriteAt(ctx, fill(7, bs), meta); err != nil {
		t.Fatal(err)
	}
	snapshot(t, cl, "fv", "s2")
	if err := v.WriteAt(ctx, fill(8, bs), meta); err != nil {
		t.Fatal(err)
	}

	// The entries of each block, as the bricks list them.
	list := func(at uint64) string {
		t.Helper()
		vs, err := v.BlockVersions(ctx, at)
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
	for _, c := range []struct {
		at   uint64
		want string
	}{
		{off, "1.1 1.2 1.3 2.5 2.6"},           // the decommit's edge: a put of zeros
		{off + bs, "1.1 1.2 1.3 1.4 2.5 2.6t"}, // covered whole: a tombstone
		{off + 2*bs, "1.1 1.2 1.3 2.5 2.6"},
		{meta, "2.u 3.u"},
		{meta + bs, ""},
	} {
		if got := list(c.at); got != c.want {
			t.Errorf("block at %d lists %q, want %q", c.at, got, c.want)
		}
	}

	// Deleting both snapshots prunes what only they read (block 258's
	// first write) and no file version.
	for _, s := range []string{"s1", "s2"} {
		if err := volume.DeleteSnapshot(ctx, cl, "fv", s); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for list(meta) != "3.u" {
		if time.Now().After(deadline) {
			t.Fatalf("block 258 still lists %q 30 s after the snapshots were deleted: not pruned", list(meta))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, c := range []struct {
		at   uint64
		want string
	}{
		{off, "1.1 1.2 1.3 2.5 2.6"},
		{off + bs, "1.1 1.2 1.3 1.4 2.5 2.6t"},
		{off + 2*bs, "1.1 1.2 1.3 2.5 2.6"},
	} {
		if got := list(c.at); got != c.want {
			t.Errorf("after the prune, block at %d lists %q, want %q", c.at, got, c.want)
		}
	}
	r.expect("pruned", "", 0, E)
	r.expect("pruned", "", 5, D)
	r.expect("pruned", "", 4, V4)
	r.expect("pruned", "", 3, C3)
	r.expect("pruned", "", 2, B)
	r.expect("pruned", "", 1, A)
	if _, err := v.BlockVersions(ctx, off); err != nil {
		t.Fatal(err)
	}
}

// TestFileVersionsWriteV: one request may carry pieces of several file
// versions, also of one block: each is stored under its own, a partial
// one over the bytes the earlier piece left.
func TestFileVersionsWriteV(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	cl := startCluster(t, 1)
	v := createVolume(t, cl, "fv", 1, true)
	const bs = limits.BlockBytes
	m := v.Map()
	vol := m.Volume("fv")
	off := uint64(7 * bs)
	pg := vol.PGOf(off)
	conn, err := coordclient.Dial(m.Brick(vol.PGs[pg].Primary()).Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b := pb.NewBrickClient(conn)
	ctx := context.Background()
	err = untilAvailable(func() error {
		_, err := b.WriteV(ctx, &pb.WriteVRequest{MapEpoch: m.Epoch, Vol: vol.ID, Pg: pg, Writer: &pb.Writer{Id: "t"}, Extents: []*pb.Extent{
			{Offset: off, Data: fill(1, 2*bs), FileVersion: 1},
			{Offset: off + 100, Data: fill(2, 10), FileVersion: 2},
			{Offset: off + 200, Data: fill(3, 10), FileVersion: 2},
			{Offset: off + bs, Data: fill(4, 10)}, // unversioned
		}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	r := versionReader{t, v, off}
	v1 := fill(1, 2*bs)
	v2 := patch(patch(v1, 100, fill(2, 10)), 200, fill(3, 10))
	r.expect("WriteV", "", 1, v1)
	r.expect("WriteV", "", 2, v2)
	r.expect("WriteV", "", 0, patch(v2, bs, fill(4, 10)))
	r.expect("WriteV", "", 1000, v2) // block 8's unversioned write is newer than every version

	// A partial write of a file version merges into the live bytes, even
	// those of an unversioned write of an earlier generation.
	meta := uint64(20 * bs)
	if err := v.WriteAt(ctx, fill(9, bs), meta); err != nil {
		t.Fatal(err)
	}
	snapshot(t, cl, "fv", "s1")
	if err := v.WriteAtVersion(ctx, fill(1, 10), meta+10, 1); err != nil {
		t.Fatal(err)
	}
	r = versionReader{t, v, meta}
	r.expect("partial over unversioned", "", 1, patch(fill(9, bs), 10, fill(1, 10)))
	r.expect("partial over unversioned", "", 0, patch(fill(9, bs), 10, fill(1, 10)))
	r.expect("partial over unversioned", "s1", 1, make([]byte, bs)) // the snapshot had no version 1 of it
}

// TestNoFileVersions: a volume created without file versions refuses
// them (the client, and the brick with InvalidArgument), as does a write
// that is versioned (version_at) too; its writes, reads, snapshots and
// decommits work as before, and its blocks list one unversioned entry per
// generation.
func TestNoFileVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	cl := startCluster(t, 1)
	v := createVolume(t, cl, "plain", 1, false)
	fv := createVolume(t, cl, "fv", 1, true)
	ctx := context.Background()
	const bs = limits.BlockBytes
	if v.FileVersions() {
		t.Fatal("a volume created without file versions says it has them")
	}
	buf := make([]byte, bs)
	for what, err := range map[string]error{
		"write":    v.WriteAtVersion(ctx, buf, 0, 1),
		"read":     v.ReadAtVersion(ctx, buf, 0, 1),
		"decommit": v.DecommitVersion(ctx, 0, bs, 1),
	} {
		if !errors.Is(err, volume.ErrNoFileVersions) {
			t.Errorf("%s of file version 1: %v, want ErrNoFileVersions", what, err)
		}
	}
	if err := fv.WriteAtVersion(ctx, buf, 0, clustermap.FileVersionMax+1); err == nil {
		t.Error("a write of file version 2^32-1 was taken")
	}
	if err := fv.WriteAtVersion(volume.Versioned(ctx, 0), buf, 0, 1); err == nil {
		t.Error("a write of a file version that is versioned too was taken")
	}

	// The brick refuses them itself.
	brickOf := func(v *volume.Volume, name string, off uint64) (pb.BrickClient, *clustermap.Volume, uint64) {
		m := v.Map()
		vol := m.Volume(name)
		conn, err := coordclient.Dial(m.Brick(vol.PGs[vol.PGOf(off)].Primary()).Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return pb.NewBrickClient(conn), vol, m.Epoch
	}
	b, vol, epoch := brickOf(v, "plain", 0)
	w := &pb.Writer{Id: "t"}
	pg := vol.PGOf(0)
	for what, call := range map[string]func() error{
		"write": func() error {
			_, err := b.Write(ctx, &pb.WriteRequest{MapEpoch: epoch, Vol: vol.ID, Pg: pg, Data: buf, Writer: w, FileVersion: 1})
			return err
		},
		"writev": func() error {
			_, err := b.WriteV(ctx, &pb.WriteVRequest{MapEpoch: epoch, Vol: vol.ID, Pg: pg, Writer: w, Extents: []*pb.Extent{{Data: buf, FileVersion: 1}}})
			return err
		},
		"read": func() error {
			_, err := b.Read(ctx, &pb.ReadRequest{MapEpoch: epoch, Vol: vol.ID, Pg: pg, Length: bs, FileVersion: 1})
			return err
		},
		"decommit": func() error {
			_, err := b.Decommit(ctx, &pb.DecommitRequest{MapEpoch: epoch, Vol: vol.ID, Pg: pg, Length: bs, Writer: w, FileVersion: 1})
			return err
		},
	} {
		err := untilAvailable(call)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "volume plain does not keep file versions") {
			t.Errorf("brick %s of file version 1 on a volume without them: %v", what, err)
		}
	}
	fb, fvol, epoch := brickOf(fv, "fv", 0)
	err := untilAvailable(func() error {
		_, err := fb.Write(ctx, &pb.WriteRequest{MapEpoch: epoch, Vol: fvol.ID, Pg: fvol.PGOf(0), Data: buf, Writer: w, FileVersion: 1, VersionAt: 1})
		return err
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("brick write with version_at and file_version: %v, want InvalidArgument", err)
	}

	// As before: writes, a snapshot, a decommit.
	r := versionReader{t, v, 0}
	if err := v.WriteAt(ctx, fill(1, 2*bs), 0); err != nil {
		t.Fatal(err)
	}
	snapshot(t, cl, "plain", "s1")
	if err := v.WriteAt(ctx, fill(2, 10), 5); err != nil {
		t.Fatal(err)
	}
	r.expect("plain", "", 0, patch(fill(1, 2*bs), 5, fill(2, 10)))
	r.expect("plain", "s1", 0, fill(1, 2*bs))
	if err := v.Decommit(ctx, 0, 2*bs); err != nil {
		t.Fatal(err)
	}
	r.expect("plain decommitted", "", 0, make([]byte, 2*bs))
	r.expect("plain decommitted", "s1", 0, fill(1, 2*bs))
	vs, err := v.BlockVersions(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []volume.BlockVersion{{Gen: 1, FileVersion: clustermap.Unversioned}, {Gen: 2, FileVersion: clustermap.Unversioned, Tombstone: true}}
	if !slices.Equal(vs, want) {
		t.Errorf("block 0 lists %+v, want %+v", vs, want)
	}
}
