package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/volume"
)

// TestPrimaryOutOfSpace: a primary whose own disk is full while its backups
// have room fails the write, but the backups applied it. The primary must
// then hand the lead to a backup that holds the write (and be backfilled
// later), so a read answers the same before and after the full brick stops:
// otherwise the write is missing while the full brick leads and appears
// when it stops, and later partial writes merge into different bases on
// each replica. (A write the full brick refuses as a syncing member still
// fails with ErrNoSpace: it stays a member until it has room.)
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
	v := tc.openVolume("v")
	m, err := tc.cl.Map(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	vm := m.Volume("v")
	chunk := uint64(vm.ChunkBytes)
	// One 64 KiB write per chunk until a write to a PG b0 leads has failed
	// for lack of space at b0 (b0 holds every block: 3 replicas, 3 bricks).
	var failed []uint64
	failedAtB0 := 0
	for i := uint64(0); i < 1024 && failedAtB0 < 3; i++ {
		off := i * chunk
		data := bytes.Repeat([]byte{byte(i + 1)}, 64<<10)
		cur, err := tc.cl.Map(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		ledByB0 := cur.Volume("v").PGs[vm.PGOf(off)].Primary() == "b0"
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err = v.WriteAt(wctx, data, off)
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, volume.ErrNoSpace):
			failed = append(failed, off)
			if ledByB0 {
				failedAtB0++
			}
		default:
			t.Fatalf("write at %d: %v", off, err)
		}
	}
	if failedAtB0 == 0 {
		t.Fatalf("no write failed at a full primary (%d failed)", len(failed))
	}
	t.Logf("%d writes failed for lack of space, %d of them led by b0", len(failed), failedAtB0)
	before := map[uint64][]byte{}
	for _, off := range failed {
		before[off] = readAt(t, v, off, 64<<10)
	}
	// The members still in sync hold the same blocks.
	if diffs, err := v.VerifyReplicas(ctx, nil); err != nil || len(diffs) > 0 {
		t.Fatalf("replicas differ (%v): %v", err, diffs)
	}
	tc.bricks[0].Stop()
	tc.bricks[0] = nil
	for _, off := range failed {
		if got := readAt(t, v, off, 64<<10); !bytes.Equal(got, before[off]) {
			t.Fatalf("block at %d read %d… while the full brick was up and %d… after it stopped", off, before[off][0], got[0])
		}
	}
}
