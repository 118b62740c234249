package redo

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkGroupCommit: 32 writers Append and Wait one small record each
// time, on a device whose writes take 1 ms. Without group commit this runs
// at 1000 records/s; the batching factor is records per write.
func BenchmarkGroupCommit(b *testing.B) {
	ctx := context.Background()
	const writers = 32
	mem := NewMemDevice(16 << 20)
	opts := Options{Size: 16 << 20}
	var lp atomic.Pointer[Log]
	opts.OnPressure = func() { l := lp.Load(); l.Release(l.Durable()) }
	l, err := Open(ctx, slowDevice{mem, time.Millisecond}, opts)
	if err != nil {
		b.Fatal(err)
	}
	lp.Store(l)
	ups := []Update{{Addr: 4096, Version: 1, Off: 128, Data: make([]byte, 128)}}
	var next atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				lsn, err := l.Append(ups)
				if err == nil {
					err = l.Wait(ctx, lsn)
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	s := l.Stats()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
	b.ReportMetric(s.BatchingFactor(), "records/batch")
	if err := l.Close(ctx); err != nil {
		b.Fatal(err)
	}
}
