package fsbench

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// fsyncFileBytes is the size of the file of write_fsync_4k_latency: small,
// so that the latency is the write's and the fsync's, not the file's.
const fsyncFileBytes = 4 << 20

// fsyncLatency: the sync latency workload of fsyncOn on a new file, with
// fsync(2) (write_fsync_4k_latency), then on another with fdatasync(2)
// (write_fdatasync_4k_latency: an overwrite inside the file's size needs
// its data durable, not its new times).
func (r *runner) fsyncLatency(work string) error {
	for _, dataSync := range []bool{false, true} {
		name, file := "write_fsync_4k_latency", "fsync.dat"
		if dataSync {
			name, file = "write_fdatasync_4k_latency", "fdatasync.dat"
		}
		f, err := os.OpenFile(filepath.Join(work, file), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		t := fileTarget(f)
		t.dev = fileDevice{f: f, dataSync: dataSync}
		err = r.syncLatency(t, name)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// fsyncOn is syncLatency as write_fsync_4k_latency.
func (r *runner) fsyncOn(t target) error { return r.syncLatency(t, "write_fsync_4k_latency") }

// syncLatency: FsyncOps times, a 4 KiB write at a random page of the
// first fsyncFileBytes of t (filled and synced first), then a sync, each
// pair timed alone (name us, the median, and name_p99 us); then every page
// is read back and checked.
func (r *runner) syncLatency(t target, name string) error {
	const pages = fsyncFileBytes / PageSize
	cfg := r.cfg
	rng := rand.New(rand.NewPCG(cfg.Seed, 6))
	p := newPattern(rng, 1<<20)
	r.logf("fsync: %d times a 4 KiB write at a random page of %d MiB, then fsync", cfg.FsyncOps, fsyncFileBytes>>20)
	if err := r.writeSeq(t, p, fsyncFileBytes, 1<<20, name+": fill"); err != nil {
		return err
	}
	if err := t.dev.Sync(r.ctx); err != nil {
		return fmt.Errorf("%s: fill: %s: %w", name, t.name, err)
	}

	versions := make([]uint32, pages) // times each page was rewritten
	lat := make([]time.Duration, 0, cfg.FsyncOps)
	buf := make([]byte, PageSize)
	for range cfg.FsyncOps {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		pg := rng.Int64N(pages)
		off := pg * PageSize
		versions[pg]++
		p.version(uint64(versions[pg])).fill(buf, off)
		start := time.Now()
		if err := t.dev.WriteAt(r.ctx, buf, uint64(off)); err != nil {
			return fmt.Errorf("%s: %s at offset %d: %w", name, t.name, off, err)
		}
		if err := t.dev.Sync(r.ctx); err != nil {
			return fmt.Errorf("%s: %s: %w", name, t.name, err)
		}
		lat = append(lat, time.Since(start))
	}

	// Check (untimed) every page from disk before reporting.
	r.drop(t)
	all := make([]int64, pages)
	for i := range all {
		all[i] = int64(i)
	}
	if err := checkPages(r.ctx, t, p, all, func(pg int64) uint64 { return uint64(versions[pg]) }, name+": check"); err != nil {
		return err
	}
	slices.Sort(lat)
	r.add(name, micros(quantile(lat, 0.5)), "us")
	r.add(name+"_p99", micros(quantile(lat, 0.99)), "us")
	return nil
}

// checkPages reads each page of pgs from t and compares it with
// p.version(version(page)); what names the check in errors.
func checkPages(ctx context.Context, t target, p pattern, pgs []int64, version func(int64) uint64, what string) error {
	buf, want := make([]byte, PageSize), make([]byte, PageSize)
	for _, pg := range pgs {
		off := pg * PageSize
		if err := t.dev.ReadAt(ctx, buf, uint64(off)); err != nil {
			return fmt.Errorf("%s: %s at offset %d: %w", what, t.name, off, err)
		}
		v := version(pg)
		if p.version(v).fill(want, off); !bytes.Equal(buf, want) {
			return fmt.Errorf("%s: %s: the page at offset %d is not version %d, the last written", what, t.name, off, v)
		}
	}
	return nil
}

// quantile is the q-quantile (0 < q <= 1) of sorted, by nearest rank: the
// smallest value at least a fraction q of them do not exceed.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// micros is d in microseconds, never 0.
func micros(d time.Duration) float64 {
	return float64(max(d, time.Nanosecond)) / float64(time.Microsecond)
}
