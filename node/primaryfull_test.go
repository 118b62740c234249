package node

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/volume"
)

// TestPrimaryOutOfSpace: one brick's store fills up while the others have
// room. Its own apply fails while the backups apply the write: as primary
// it must hand the lead to a backup that holds the write (and be
// backfilled later), and as a backup it is resynced later; either way the
// write is retried and succeeds on the members left in sync, so writers
// never see the full brick. Reads answer the same before and after the
// full brick stops (a primary that kept leading without the write would
// lose it when it stopped), and the in-sync replicas agree.
func TestPrimaryOutOfSpace(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	tc := newTestCluster(t, 0)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for i := range 3 {
		var capacity int64
		if i == 0 {
			capacity = 12 << 20
		}
		name := fmt.Sprintf("b%d", i)
		b, err := Start(context.Background(), Config{Name: name, Listen: "127.0.0.1:0", DataDir: filepath.Join(tc.dir, name), Brick: true,
			Coord: []string{tc.coord.Addr()}, Domain: map[string]string{"host": name}, CapacityBytes: capacity, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		tc.bricks = append(tc.bricks, b)
	}
	tc.createVolume("v", 3)
	ctx := context.Background()
	v, err := volume.Open(ctx, tc.cl, "v", volume.Options{Writer: "w"})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	m, err := tc.cl.Map(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	vm := m.Volume("v")
	chunk := uint64(vm.ChunkBytes)
	// One 64 KiB write per chunk, well past b0's capacity (b0 holds every
	// block: 3 replicas, 3 bricks).
	var written []uint64
	ledByB0 := 0
	for i := uint64(0); i < 400; i++ {
		off := i * chunk
		data := bytes.Repeat([]byte{byte(i + 1)}, 64<<10)
		if cur, err := tc.cl.Map(ctx, 0); err == nil && cur.Volume("v").PGs[vm.PGOf(off)].Primary() == "b0" {
			ledByB0++
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := v.WriteAt(wctx, data, off)
		cancel()
		if err != nil {
			t.Fatalf("write %d at %d with one brick full: %v", i, off, err)
		}
		written = append(written, off)
	}
	cur, err := tc.cl.Map(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range cur.Volume("v").PGs {
		if slices.Contains(p.InSync(), "b0") {
			t.Fatalf("pg %d still counts the full brick b0 in sync: %+v", i, p)
		}
	}
	t.Logf("%d writes (%d MiB) with b0 full at 12 MiB (%d to PGs b0 led when issued) all succeeded", len(written), len(written)*64>>10, ledByB0)
	failed := written
	read := func(off uint64) []byte {
		buf := make([]byte, 64<<10)
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := v.ReadAt(rctx, buf, off); err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		return buf
	}
	before := map[uint64][]byte{}
	for _, off := range failed {
		before[off] = read(off)
	}
	// The members still in sync hold the same blocks.
	if diffs, err := v.VerifyReplicas(ctx, nil); err != nil || len(diffs) > 0 {
		t.Fatalf("replicas differ (%v): %v", err, diffs)
	}
	tc.bricks[0].Stop()
	tc.bricks[0] = nil
	for _, off := range failed {
		if got := read(off); !bytes.Equal(got, before[off]) {
			t.Fatalf("block at %d read %d… while the full brick was up and %d… after it stopped", off, before[off][0], got[0])
		}
	}
}
