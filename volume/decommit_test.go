package volume

import (
	"math"
	"slices"
	"testing"

	"github.com/plumeria-fs/plumeria/clustermap"
)

// TestDecommitPGs: a decommit asks exactly the PGs holding a chunk of its
// range, and every PG once the range is long.
func TestDecommitPGs(t *testing.T) {
	const chunk = 1 << 20
	vol := &clustermap.Volume{ID: 7, ChunkBytes: chunk, PGs: make([]clustermap.PG, 16)}
	brute := func(off, n uint64) []int {
		var pgs []int
		for c := off / chunk; c <= (off+n-1)/chunk; c++ {
			if pg := int(vol.PGOf(c * chunk)); !slices.Contains(pgs, pg) {
				pgs = append(pgs, pg)
			}
		}
		slices.Sort(pgs)
		return pgs
	}
	all := brute(0, 4096*chunk)
	if len(all) != len(vol.PGs) {
		t.Fatalf("4096 chunks hash to %d of %d PGs", len(all), len(vol.PGs))
	}
	for _, c := range []struct {
		name   string
		off, n uint64
		want   []int
	}{
		{"one block", 5*chunk + 4096, 4096, []int{int(vol.PGOf(5 * chunk))}},
		{"a deleted file's extent", 1 << 40, 16000, []int{int(vol.PGOf(1 << 40))}},
		{"three chunks", 9*chunk - 1, 2*chunk + 2, brute(9*chunk-1, 2*chunk+2)},
		{"last byte of a chunk", 3*chunk - 1, 1, []int{int(vol.PGOf(3*chunk - 1))}},
		{"long range", 0, 1000 * chunk, all},
		{"to the end of the address space", 1 << 50, math.MaxUint64 - (1 << 50) + 1, all},
		{"last chunk", math.MaxUint64 - chunk + 1, chunk, []int{int(vol.PGOf(math.MaxUint64))}},
	} {
		got := decommitPGs(vol, c.off, c.n)
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: PGs %v, want %v", c.name, got, c.want)
		}
	}
}
