package brick

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestSpans: normalize sorts and merges, and overlap agrees with a
// block-by-block check on random span lists.
func TestSpans(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := func() []span {
		var out []span
		for range rng.IntN(6) {
			lo := rng.Uint64N(64)
			out = append(out, span{lo, lo + rng.Uint64N(8)})
		}
		return out
	}
	blocks := func(ss []span) map[uint64]bool {
		m := map[uint64]bool{}
		for _, s := range ss {
			for b := s.lo; b < s.hi; b++ {
				m[b] = true
			}
		}
		return m
	}
	for range 2000 {
		a, b := random(), random()
		ba, bb := blocks(a), blocks(b)
		na, nb := normalize(slices.Clone(a)), normalize(slices.Clone(b))
		for i, s := range na {
			if s.lo >= s.hi || (i > 0 && na[i-1].hi >= s.lo) {
				t.Fatalf("normalize(%v) = %v: not sorted, disjoint and apart", a, na)
			}
		}
		if got := blocks(na); len(got) != len(ba) {
			t.Fatalf("normalize(%v) = %v covers %d blocks, want %d", a, na, len(got), len(ba))
		}
		want := false
		for k := range ba {
			want = want || bb[k]
		}
		if got := overlap(na, nb); got != want {
			t.Fatalf("overlap(%v, %v) = %v, want %v", na, nb, got, want)
		}
	}
}

// TestLockRanges: a request holding scattered blocks excludes a later one
// on any of them, and not one on the blocks between.
func TestLockRanges(t *testing.T) {
	l := newPGLock()
	unlock := l.lockRanges([]span{{10, 11}, {2, 3}, {40, 48}}, true)
	between := make(chan struct{})
	go func() { l.lockRanges([]span{{3, 10}, {11, 40}}, true)(); close(between) }()
	select {
	case <-between:
	case <-time.After(10 * time.Second):
		t.Fatal("a request on blocks between the held spans waited")
	}
	clash := make(chan struct{})
	go func() { l.lockRanges([]span{{20, 21}, {47, 50}}, false)(); close(clash) }()
	select {
	case <-clash:
		t.Fatal("a read of a held block did not wait")
	case <-time.After(50 * time.Millisecond):
	}
	unlock()
	select {
	case <-clash:
	case <-time.After(10 * time.Second):
		t.Fatal("the read did not get its blocks after the unlock")
	}
}
