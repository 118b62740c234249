package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/coord"
	"github.com/plumeria-fs/plumeria/volume"
)

// TestSnapshotDelete: write A, snapshot s1, overwrite most of it with B,
// snapshot s2, overwrite a part with C, delete s1. s2 still reads B (and A
// where B did not go), the live volume C over B over A, a read of s1 fails
// naming it, and every brick's used bytes drop once its cleaner has run:
// A is one whole segment per brick (64 MiB), and only s1 read the three
// quarters of it that B overwrote.
//
// In "bricks down", every brick is killed before the deletion and started
// again after it: a brick learns of the deletion from its first map.
func TestSnapshotDelete(t *testing.T) {
	for _, down := range []bool{false, true} {
		name := "bricks up"
		if down {
			name = "bricks down"
		}
		t.Run(name, func(t *testing.T) { testSnapshotDelete(t, down) })
	}
}

func testSnapshotDelete(t *testing.T, bricksDown bool) {
	c := startCluster(t, 1, 3)
	c.createVolume("vol", 3)
	v := c.open("vol", "w1")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const (
		base  = uint64(3 << 30)
		aLen  = 64 << 20
		bLen  = 48 << 20
		cLen  = 4 << 20
		piece = 4 << 20
	)
	// pattern fills p, the bytes at off, with what tag wrote there.
	pattern := func(tag byte, off uint64, p []byte) {
		for i := 0; i+8 <= len(p); i += 8 {
			binary.LittleEndian.PutUint64(p[i:], uint64(tag)<<56|(off+uint64(i)))
		}
	}
	write := func(tag byte, n uint64) {
		t.Helper()
		p := make([]byte, piece)
		for off := base; off < base+n; off += piece {
			pattern(tag, off, p)
			if err := v.WriteAt(ctx, p, off); err != nil {
				t.Fatalf("write %c at %d: %v", tag, off, err)
			}
		}
	}
	// check reads [base, base+aLen) of snap ("" live): tag of the first
	// layer whose end is above each byte.
	check := func(snap string, layers []byte, ends []uint64) {
		t.Helper()
		got, want := make([]byte, piece), make([]byte, piece)
		for off := base; off < base+aLen; off += piece {
			if err := v.ReadSnapshotAt(ctx, snap, got, off); err != nil {
				t.Fatalf("read %q at %d: %v", snap, off, err)
			}
			for i, end := range ends {
				if off < base+end {
					pattern(layers[i], off, want)
					break
				}
			}
			if d := firstDiff(got, want); d >= 0 {
				t.Fatalf("snapshot %q at %d: %s", snap, off, describeDiff(got, want, d))
			}
		}
	}
	write('A', aLen)
	c.cli("vdisk", "snapshot", c.coordArg(), "--volume", "vol", "--name", "s1")
	write('B', bLen)
	c.cli("vdisk", "snapshot", c.coordArg(), "--volume", "vol", "--name", "s2")
	write('C', cLen)
	check("s1", []byte("A"), []uint64{aLen})

	// What the bricks use before: let a heartbeat carry the last writes.
	time.Sleep(time.Second)
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]int64{}
	for _, b := range st.Bricks {
		used[b.Name] = b.UsedBytes
	}
	bricks := []string{"b1", "b2", "b3"}
	if bricksDown {
		for _, b := range bricks {
			c.kill(b)
		}
	}
	out := c.cli("vdisk", "snapshot-delete", c.coordArg(), "--volume", "vol", "--name", "s1")
	if !strings.Contains(string(out), "deleted") {
		t.Errorf("snapshot-delete printed %q", out)
	}
	if bricksDown {
		for _, b := range bricks {
			c.restart(b)
		}
		c.waitHealthy("vol", 1, 2*time.Minute)
	}

	check("s2", []byte("BA"), []uint64{bLen, aLen})
	check("", []byte("CBA"), []uint64{cLen, bLen, aLen})
	// v cached a map that still has s1: the brick refuses it.
	if err := v.ReadSnapshotAt(ctx, "s1", make([]byte, 4096), base); !errors.Is(err, volume.ErrNoSnapshot) || !strings.Contains(err.Error(), "s1") {
		t.Errorf("read of deleted s1 through a handle that knew it: %v, want ErrNoSnapshot naming s1", err)
	}
	r := c.run(cliTimeout, nil, "vdisk", "read", c.coordArg(), "--volume", "vol", "--offset", fmt.Sprint(base), "--length", "4096", "--snapshot", "s1")
	if r.code == 0 || !strings.Contains(string(r.stderr), "s1") {
		t.Errorf("vdisk read of deleted s1 should fail naming it: %s", r)
	}
	for _, args := range [][]string{{"--volume", "vol", "--name", "s1"}, {"--volume", "nope", "--name", "s2"}} {
		r := c.run(cliTimeout, nil, append([]string{"vdisk", "snapshot-delete", c.coordArg()}, args...)...)
		if r.code == 0 || !strings.Contains(string(r.stderr), "no such") {
			t.Errorf("snapshot-delete %v should fail saying what does not exist: %s", args, r)
		}
	}

	// Each brick pruned A under B (48 MiB) and its cleaner reclaimed the
	// segment A filled (cleaner passes every 10 s).
	c.waitStatus(90*time.Second, "every brick's used bytes drop by 32 MiB", func(st *coord.Status) (bool, string) {
		var state []string
		ok := true
		for _, b := range st.Bricks {
			state = append(state, fmt.Sprintf("%s %d → %d", b.Name, used[b.Name], b.UsedBytes))
			ok = ok && b.UsedBytes < used[b.Name]-32<<20
		}
		return ok, strings.Join(state, ", ")
	})
	check("s2", []byte("BA"), []uint64{bLen, aLen})
	check("", []byte("CBA"), []uint64{cLen, bLen, aLen})
	pruned := 0
	for _, b := range bricks {
		log, err := os.ReadFile(c.proc(b).logPath)
		if err != nil {
			t.Fatal(err)
		}
		pruned += strings.Count(string(log), "pruned versions no snapshot reads")
	}
	if pruned == 0 {
		t.Errorf("no brick logged a prune")
	}
	if st, err := c.status(); err == nil {
		for _, vs := range st.Volumes {
			if vs.Name == "vol" && (len(vs.Snapshots) != 1 || vs.Snapshots[0] != "s2") {
				t.Errorf("status lists snapshots %v, want [s2]", vs.Snapshots)
			}
		}
	}
}
