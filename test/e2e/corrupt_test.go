package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/volume"
)

const blockBytes = 4096 // limits.BlockBytes: the unit a brick checksums

// segFiles lists a brick's segment files (brick/store/record.go).
func segFiles(t *testing.T, p *proc) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(p.data, "brick", "store", "seg-*.log"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no segment files of %s in %s (err %v)", p.name, p.data, err)
	}
	return files
}

// occurrences returns, per segment file of p, the offsets where pattern
// (a whole block's data) is stored.
func occurrences(t *testing.T, p *proc, pattern []byte) map[string][]int64 {
	t.Helper()
	out := map[string][]int64{}
	for _, f := range segFiles(t, p) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for from := 0; ; {
			i := bytes.Index(b[from:], pattern)
			if i < 0 {
				break
			}
			out[f] = append(out[f], int64(from+i))
			from += i + 1
		}
	}
	return out
}

// corruptBlock flips 16 bytes in the middle of every stored copy of pattern
// on p (inside the record's data area, so only the data crc catches it)
// and returns how many copies it hit and the corrupted block.
func corruptBlock(t *testing.T, p *proc, pattern []byte) (int, []byte) {
	t.Helper()
	const at, n = 1000, 16
	bad := slices.Clone(pattern)
	for i := at; i < at+n; i++ {
		bad[i] ^= 0xff
	}
	hits := 0
	for file, offs := range occurrences(t, p, pattern) {
		f, err := os.OpenFile(file, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, off := range offs {
			if _, err := f.WriteAt(bad[at:at+n], off+at); err != nil {
				t.Fatal(err)
			}
			hits++
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return hits, bad
}

// chunkLedBy returns a block-aligned offset, below 2^50, in a chunk whose
// PG has every member in sync and satisfies pick, with room for two blocks.
func chunkLedBy(t *testing.T, rng *rand.Rand, v *volume.Volume, pick func(clustermap.PG) bool) (uint64, clustermap.PG) {
	t.Helper()
	vol := v.Map().Volume("vol")
	for range 100000 {
		c := rng.Uint64N(1 << 34)
		pg := vol.PGs[clustermap.PGOfChunk(vol.ID, c, len(vol.PGs))]
		if len(pg.Syncing) == 0 && pick(pg) {
			perChunk := uint64(vol.ChunkBytes) / blockBytes
			return c*uint64(vol.ChunkBytes) + rng.Uint64N(perChunk-1)*blockBytes, pg
		}
	}
	t.Fatalf("no chunk whose placement group fits")
	return 0, clustermap.PG{}
}

// readBack reads n bytes at off and fails unless they equal want; bad is
// the corrupted content, named if that is what came back.
func readBack(t *testing.T, ctx context.Context, v *volume.Volume, off uint64, want, bad []byte, what string) {
	t.Helper()
	got := make([]byte, len(want))
	if err := v.ReadAt(ctx, got, off); err != nil {
		t.Errorf("%s: read: %v", what, err)
		return
	}
	switch {
	case bytes.Equal(got, want):
	case bad != nil && bytes.Equal(got, bad):
		t.Errorf("%s: read returned the CORRUPTED bytes", what)
	default:
		t.Errorf("%s: read returned wrong bytes: %s", what, describeDiff(got, want, firstDiff(got, want)))
	}
}

// TestCorruptBlockRepaired corrupts, on each brick in turn, its copy of
// blocks in a chunk that brick leads: reads must return the original
// bytes, a partial write into a corrupt block must merge with the original
// bytes, and the brick must rewrite a good copy. Finally a corrupt copy on
// a backup is read after the backup became primary.
func TestCorruptBlockRepaired(t *testing.T) {
	_, rng := seed(t)
	c := startCluster(t, 1, 3)
	c.createVolume("vol", 3)
	v := c.open("vol", "w1")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	for _, x := range []string{"b1", "b2", "b3"} {
		t.Run("primary="+x, func(t *testing.T) {
			c := c.sub(t)
			off, pg := chunkLedBy(t, rng, v, func(pg clustermap.PG) bool { return pg.Primary() == x })
			a, b := make([]byte, blockBytes), make([]byte, blockBytes)
			fill(rng, a)
			fill(rng, b)
			if err := v.WriteAt(ctx, append(slices.Clone(a), b...), off); err != nil {
				t.Fatalf("write: %v", err)
			}
			for _, m := range pg.Bricks {
				if n := len(occurrences(t, c.proc(m), a)); n == 0 {
					t.Fatalf("acknowledged block not found in the segment files of PG member %s", m)
				}
			}
			na, badA := corruptBlock(t, c.proc(x), a)
			nb, _ := corruptBlock(t, c.proc(x), b)
			c.logf("corrupted %d+%d copies on %s (PG %v), blocks at %d", na, nb, x, pg.Bricks, off)

			readBack(t, ctx, v, off, a, badA, "read of a block corrupt on the primary")
			// A partial write must merge into the original block, not the rotten one.
			patch := []byte("partial write into a corrupt block")
			if err := v.WriteAt(ctx, patch, off+blockBytes+100); err != nil {
				t.Fatalf("partial write into a corrupt block: %v", err)
			}
			wantB := slices.Clone(b)
			copy(wantB[100:], patch)
			readBack(t, ctx, v, off+blockBytes, wantB, nil, "block after a partial write into its corrupt copy")
			// The primary must have rewritten good copies.
			if len(occurrences(t, c.proc(x), a)) == 0 {
				t.Errorf("%s still has no intact copy of the block it repaired", x)
			}
			for _, m := range pg.Bricks {
				if len(occurrences(t, c.proc(m), wantB)) == 0 {
					t.Errorf("%s has no copy of the block after the partial write", m)
				}
			}
			readBack(t, ctx, v, off, a, badA, "second read of the repaired block")
		})
	}
	repaired := 0
	for _, x := range []string{"b1", "b2", "b3"} {
		b, _ := os.ReadFile(c.proc(x).logPath)
		repaired += bytes.Count(b, []byte("repaired corrupt block"))
	}
	if repaired < 6 {
		t.Errorf("bricks logged %d block repairs, want at least 6 (2 per brick)", repaired)
	}

	t.Run("every copy corrupt", func(t *testing.T) {
		c := c.sub(t)
		off, pg := chunkLedBy(t, rng, v, func(clustermap.PG) bool { return true })
		a := make([]byte, blockBytes)
		fill(rng, a)
		if err := v.WriteAt(ctx, a, off); err != nil {
			t.Fatalf("write: %v", err)
		}
		var bad []byte
		for _, m := range pg.Bricks {
			_, bad = corruptBlock(t, c.proc(m), a)
		}
		got := make([]byte, blockBytes)
		err := v.ReadAt(ctx, got, off)
		switch {
		case err == nil && bytes.Equal(got, bad):
			t.Errorf("read returned the CORRUPTED bytes")
		case err == nil:
			t.Errorf("read of a block corrupt on every replica succeeded (%s)", describeDiff(got, a, firstDiff(got, a)))
		case !errors.Is(err, volume.ErrDataLoss):
			t.Errorf("read of a block corrupt on every replica: got %v, want volume.ErrDataLoss", err)
		}
		// Leave no corrupt block behind for the next step: overwrite it.
		if err := v.WriteAt(ctx, a, off); err != nil {
			t.Fatalf("overwrite of a block corrupt everywhere: %v", err)
		}
		readBack(t, ctx, v, off, a, bad, "block overwritten after total corruption")
	})

	t.Run("backup promoted", func(t *testing.T) {
		c := c.sub(t)
		// A chunk led by b1 whose second member takes over when b1 dies.
		off, pg := chunkLedBy(t, rng, v, func(pg clustermap.PG) bool { return pg.Primary() == "b1" })
		next := pg.Bricks[1]
		a := make([]byte, blockBytes)
		fill(rng, a)
		if err := v.WriteAt(ctx, a, off); err != nil {
			t.Fatalf("write: %v", err)
		}
		n, bad := corruptBlock(t, c.proc(next), a)
		c.logf("corrupted %d copies on backup %s (PG %v); killing primary b1", n, next, pg.Bricks)
		readBack(t, ctx, v, off, a, bad, "read with the backup's copy corrupt")
		c.kill("b1")
		c.waitBrickState("b1", "down", brickDownAfter+20*time.Second)
		readBack(t, ctx, v, off, a, bad, fmt.Sprintf("read after %s, whose copy is corrupt, became primary", next))
		if len(occurrences(t, c.proc(next), a)) == 0 {
			t.Errorf("%s has no intact copy after reading as primary", next)
		}
	})
}
