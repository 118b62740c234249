package clerk

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/plumeria-fs/plumeria/lock"
)

// BenchResult is one measurement, as `plumeria bench` prints it:
// "Name Value Unit".
type BenchResult struct {
	Name  string
	Value float64
	Unit  string
}

func (r BenchResult) String() string { return fmt.Sprintf("%s %.4g %s", r.Name, r.Value, r.Unit) }

// Workload is one standard lock-service measurement. It runs on two
// running clerks of different fs nodes, a and b, with table open.
type Workload struct {
	Name, Unit string
	run        func(ctx context.Context, a, b *Clerk, table string, n int) (float64, error)
}

// Run measures w over n operations.
func (w Workload) Run(ctx context.Context, a, b *Clerk, table string, n int) (BenchResult, error) {
	v, err := w.run(ctx, a, b, table, max(n, 1))
	if err != nil {
		return BenchResult{}, fmt.Errorf("bench %s: %w", w.Name, err)
	}
	return BenchResult{Name: w.Name, Value: v, Unit: w.Unit}, nil
}

// benchConcurrency is the number of acquire loops of the throughput
// workload, split over the two clerks.
const benchConcurrency = 64

// Workloads are the standard measurements:
//   - lock_cached_acquire: Acquire and Unpin of a lock the clerk already
//     holds (no message leaves the node);
//   - lock_remote_acquire: Acquire of a lock nobody holds (request, grant),
//     one at a time, each released after;
//   - lock_handoff: a write lock going back and forth between a and b
//     (request, revoke, the owner's OnRevoke, release, grant);
//   - lock_server_throughput: acquire+release of fresh locks owned by one
//     lock server, benchConcurrency at a time.
//
// Lock ids are drawn at random so that runs do not meet each other's
// sticky locks.
var Workloads = []Workload{
	{"lock_cached_acquire", "ns", benchCached},
	{"lock_remote_acquire", "us", benchRemote},
	{"lock_handoff", "us", benchHandoff},
	{"lock_server_throughput", "ops/s", benchThroughput},
}

// Bench runs every workload with n operations each.
func Bench(ctx context.Context, a, b *Clerk, table string, n int) ([]BenchResult, error) {
	var out []BenchResult
	for _, w := range Workloads {
		r, err := w.Run(ctx, a, b, table, n)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

func freshLock() uint64 { return rand.Uint64N(1 << 62) }

func benchCached(ctx context.Context, a, _ *Clerk, table string, n int) (float64, error) {
	l := freshLock()
	if err := a.Acquire(ctx, table, l, lock.Write); err != nil {
		return 0, err
	}
	a.Unpin(table, l, lock.Write)
	start := time.Now()
	for range n {
		if err := a.Acquire(ctx, table, l, lock.Write); err != nil {
			return 0, err
		}
		a.Unpin(table, l, lock.Write)
	}
	return float64(time.Since(start).Nanoseconds()) / float64(n), nil
}

func benchRemote(ctx context.Context, a, _ *Clerk, table string, n int) (float64, error) {
	ls := a.locksOfOneServer(table, n)
	if err := a.Acquire(ctx, table, ls[0], lock.Write); err != nil { // warm the lease of the group
		return 0, err
	}
	a.Unpin(table, ls[0], lock.Write)
	a.Release(table, ls[0])
	start := time.Now()
	for _, l := range ls {
		if err := a.Acquire(ctx, table, l, lock.Write); err != nil {
			return 0, err
		}
		a.Unpin(table, l, lock.Write)
		a.Release(table, l)
	}
	return float64(time.Since(start).Microseconds()) / float64(n), nil
}

func benchHandoff(ctx context.Context, a, b *Clerk, table string, n int) (float64, error) {
	l := freshLock()
	if err := a.Acquire(ctx, table, l, lock.Write); err != nil {
		return 0, err
	}
	a.Unpin(table, l, lock.Write)
	start := time.Now()
	for i := range n {
		c := b
		if i%2 == 1 {
			c = a
		}
		if err := c.Acquire(ctx, table, l, lock.Write); err != nil {
			return 0, err
		}
		c.Unpin(table, l, lock.Write)
	}
	return float64(time.Since(start).Microseconds()) / float64(n), nil
}

func benchThroughput(ctx context.Context, a, b *Clerk, table string, n int) (float64, error) {
	ls := a.locksOfOneServer(table, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, benchConcurrency)
	start := time.Now()
	for w := range benchConcurrency {
		c := a
		if w%2 == 1 {
			c = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(ls)); i = next.Add(1) - 1 {
				if err := c.Acquire(ctx, table, ls[i], lock.Write); err != nil {
					errs <- err
					return
				}
				c.Unpin(table, ls[i], lock.Write)
				c.Release(table, ls[i])
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(len(ls)) / time.Since(start).Seconds(), nil
}

// locksOfOneServer returns n fresh lock ids whose groups the same lock
// server owns (as the clerk knows today).
func (c *Clerk) locksOfOneServer(table string, n int) []uint64 {
	c.mu.Lock()
	owners := maps.Clone(c.mu.owners)
	c.mu.Unlock()
	base := freshLock()
	target := owners[lock.GroupOf(table, base, c.cfg.Groups)]
	ls := make([]uint64, 0, n)
	for l := base; len(ls) < n; l++ {
		if owners[lock.GroupOf(table, l, c.cfg.Groups)] == target {
			ls = append(ls, l)
		}
	}
	return ls
}
