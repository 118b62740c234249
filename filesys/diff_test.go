package filesys

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// diffByByte is diff without the word-at-a-time skip: the reference.
func diffByByte(a, b []byte) [][2]int {
	var spans [][2]int
	const gap = 32
	for i := 0; i < len(a); i++ {
		if i == layout.VersionStart {
			i = layout.VersionEnd - 1
			continue
		}
		if a[i] == b[i] {
			continue
		}
		if n := len(spans); n > 0 && i-spans[n-1][1] < gap && !(spans[n-1][1] <= layout.VersionStart && i >= layout.VersionEnd) {
			spans[n-1][1] = i + 1
		} else {
			spans = append(spans, [2]int{i, i + 1})
		}
	}
	return spans
}

// TestDiffMatchesByteByByte: diff finds the same spans as a byte-by-byte
// comparison, for random changes anywhere (the version field included).
func TestDiffMatchesByteByByte(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for it := range 2000 {
		a := make([]byte, layout.BlockBytes)
		for i := range a {
			a[i] = byte(rng.IntN(4))
		}
		b := slices.Clone(a)
		for range rng.IntN(20) {
			at, n := rng.IntN(len(b)), 1+rng.IntN(100)
			for i := at; i < min(at+n, len(b)); i++ {
				b[i] = byte(rng.IntN(4))
			}
		}
		if got, want := diff(a, b), diffByByte(a, b); !slices.Equal(got, want) {
			t.Fatalf("iteration %d: diff %v, byte by byte %v", it, got, want)
		}
	}
}
