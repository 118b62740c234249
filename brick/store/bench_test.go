package store

import (
	"context"
	"os"
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
		wrap func(*os.File) segFile
	}{
		{"prealloc", nil},
		{"append", func(f *os.File) segFile { return struct{ *os.File }{f} }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := openT(b, b.TempDir(), Options{wrapFile: bc.wrap})
			data := make([]byte, limits.BlockBytes)
			for i := range b.N {
				op := Op{Kind: OpPut, Key: Key{Vol: 1, Block: uint64(i)}, Seq: 1, Data: data}
				if err := s.Apply(context.Background(), []Op{op}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
