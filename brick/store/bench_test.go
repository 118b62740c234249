package store

import (
	"context"
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
