package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/plumeria-fs/plumeria/internal/limits"
)

// BenchmarkApply measures parallel one-block Apply calls (4 KiB puts, each
// fsync'd, group committed). MB/s is of block data; batches/fsync is the
// group commit factor.
func BenchmarkApply(b *testing.B) {
	s := openT(b, b.TempDir(), Options{})
	data := make([]byte, limits.BlockBytes)
	var next atomic.Uint64
	b.SetBytes(limits.BlockBytes)
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			op := Op{Kind: OpPut, Key: Key{Vol: 1, Block: next.Add(1)}, Seq: 1, Data: data}
			if err := s.Apply(context.Background(), []Op{op}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	st := s.Stats()
	b.ReportMetric(float64(st.Batches)/float64(max(st.Commits, 1)), "batches/fsync")
}

// BenchmarkCommit4K: one 4 KiB put at a time, each a group commit of its
// own (write + sync), into a preallocated head segment with fdatasync, and
// as before session 11 (the file grows by appends, fsync: a file wrapped
// the way the fault tests wrap it gets neither preallocation nor
// fdatasync). Compare the two in one run: the machine's disk decides.
func BenchmarkCommit4K(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts Options
	}{
		{"prealloc", Options{}},
		{"prealloc-nozero", Options{noZero: true}},
		{"append", Options{wrapFile: func(f *os.File) segFile { return struct{ *os.File }{f} }}},
	} {
		// Three stores committing at once: the three bricks of `up` on one disk.
		for _, stores := range []int{1, 3} {
			b.Run(fmt.Sprintf("%s-%d", bc.name, stores), func(b *testing.B) {
				var ss []*Store
				for range stores {
					ss = append(ss, openT(b, b.TempDir(), bc.opts))
				}
				data := make([]byte, limits.BlockBytes)
				b.ResetTimer()
				for i := range b.N {
					var wg sync.WaitGroup
					for _, s := range ss {
						wg.Add(1)
						go func() {
							defer wg.Done()
							op := Op{Kind: OpPut, Key: Key{Vol: 1, Block: uint64(i)}, Seq: 1, Data: data}
							if err := s.Apply(context.Background(), []Op{op}); err != nil {
								b.Error(err)
							}
						}()
					}
					wg.Wait()
				}
				var st Stats
				for _, s := range ss {
					x := s.Stats()
					st.Commits += x.Commits
					st.CommitTime += x.CommitTime
				}
				b.ReportMetric(float64(st.CommitTime.Microseconds())/float64(st.Commits), "us/fsync")
			})
		}
	}
}

// BenchmarkMetasRandom: index lookups of random keys, as random 4 KiB
// writes make them (a backup's filterNewer, the committer's lookup of the
// entries it replaces), in a store of 64Ki blocks whose index is in
// tables; half the keys looked up are present.
func BenchmarkMetasRandom(b *testing.B) {
	s := openT(b, b.TempDir(), Options{})
	data := make([]byte, limits.BlockBytes)
	const blocks = 64 << 10
	for lo := uint64(0); lo < blocks; lo += 256 {
		ops := make([]Op, 0, 256)
		for blk := lo; blk < lo+256; blk++ {
			ops = append(ops, Op{Kind: OpPut, Key: Key{Vol: 1, Block: 2 * blk}, Seq: 1, Data: data})
		}
		if err := s.Apply(context.Background(), ops); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.db.Flush(); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			keys := make([]Key, n)
			for b.Loop() {
				for i := range keys {
					keys[i] = Key{Vol: 1, Block: rng.Uint64N(2 * blocks)}
				}
				if _, err := s.Metas(keys); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
