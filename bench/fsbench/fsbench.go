// Package fsbench runs the standard file system workloads on any
// directory: a Plumeria FUSE mount, or a local directory to compare it
// with. Each workload runs in its own fresh subdirectory of the target,
// removed afterwards, and yields one or more Results ("name value unit").
//
// Workloads, in order (names and units of the Results):
//
//   - small files: create Files files of FileSize bytes spread over Dirs
//     directories (files_create files/s), lstat each (files_stat files/s),
//     list the directories (files_readdir entries/s) and list them again
//     (files_relist entries/s), read each back and compare, its pages
//     dropped first (files_read files/s), read each again (files_reread
//     files/s), unlink each (files_delete files/s);
//   - mkdir+rmdir of Mkdirs directories in one directory (mkdir_rmdir dirs/s);
//   - sequential: SeqSize bytes in SeqIO-byte writes, then fsync, both timed
//     (seq_write_fsync MiB/s), then read back and compared (seq_read MiB/s);
//   - random: RandOps 4 KiB preads at distinct random offsets of a RandSize
//     file (rand_read_4k IOPS), then RandOps 4 KiB pwrites and one final
//     fsync, timed together (rand_write_4k IOPS), then on the same file
//     RandOps 4 KiB preads and pwrites at random pages, 70% reads, with
//     RandQD of them in flight from as many goroutines, and one final fsync,
//     timed together (rand_mixed_qdN IOPS, N = RandQD); each bounded by
//     RandTime. Every read of the mixed phase is checked against the version
//     of its page last written (each goroutine owns a disjoint set of pages);
//   - fsync latency: FsyncOps times, a 4 KiB pwrite at a random page of a
//     fresh 4 MiB file then fsync, each pair timed alone; the median
//     (write_fsync_4k_latency us, lower is better) and the 99th percentile
//     (write_fsync_4k_latency_p99 us) by nearest rank; then the same with
//     fdatasync on another file (write_fdatasync_4k_latency and _p99 us);
//   - source tree: extract an in-memory tarball of TreeFiles regular files
//     in nested directories, with symlinks and executable modes, using
//     archive/tar the way tar(1) would (tree_extract s, lower is better);
//     the result is then checked entry by entry.
//
// Before every timed read the page cache of the files to be read is
// dropped where the platform allows it (fsync/syncfs, then
// posix_fadvise(POSIX_FADV_DONTNEED)), so reads measure the file system
// rather than memory. Every byte read is checked against what was written.
//
// A zero count or size skips its workload (RandOps 0 all three random
// phases, RandQD 0 only the mixed one).
//
// The sequential, random and fsync workloads are block workloads: they
// need only positioned reads and writes and a sync (Device). RunDevice runs
// them, with the same names, units and checks, on any Device, such as a
// raw Plumeria volume (`plumeria bench vdisk`), and RunFile on a local file.
package fsbench

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"time"
)

// Result is one measurement, as `plumeria bench DIR` prints it:
// "Name Value Unit".
type Result struct {
	Name  string
	Value float64
	Unit  string
}

func (r Result) String() string { return r.Name + " " + FormatValue(r.Value) + " " + r.Unit }

// FormatValue prints v with 1 decimal from 10 upwards and 3 below, in
// plain (not exponent) notation.
func FormatValue(v float64) string {
	if math.Abs(v) >= 10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

// LowerIsBetter reports whether a smaller value of a metric with this unit
// is better (durations: s, ms, us) rather than larger (rates).
func LowerIsBetter(unit string) bool { return unit == "s" || unit == "ms" || unit == "us" }

// Config sizes the workloads. DefaultConfig gives the standard sizes.
type Config struct {
	Files    int // small files created, stat-ed, listed, read, deleted
	Dirs     int // directories the small files are spread over
	FileSize int // bytes per small file

	Mkdirs int // directories made then removed

	SeqSize int64 // bytes written then read sequentially
	SeqIO   int   // bytes per sequential write and read

	RandSize int64         // bytes of the random I/O file (rounded down to 4 KiB)
	RandOps  int           // 4 KiB reads, then 4 KiB writes, then mixed reads and writes
	RandTime time.Duration // bound on each of the random read, write and mixed phases
	RandQD   int           // operations in flight in the mixed phase (0: none), at most RandQDMax

	FsyncOps int // 4 KiB writes, each followed by an fsync and timed with it

	TreeFiles int // regular files in the extracted source tree

	Seed uint64 // pseudo-random choices (tree shape, offsets, data)

	// Log receives progress lines (nil: none).
	Log io.Writer
}

// DefaultConfig returns the standard workload sizes.
func DefaultConfig() Config {
	return Config{
		Files: 10000, Dirs: 10, FileSize: 1 << 10,
		Mkdirs:  2000,
		SeqSize: 2 << 30, SeqIO: 1 << 20,
		RandSize: 256 << 20, RandOps: 20000, RandTime: 30 * time.Second, RandQD: 16,
		FsyncOps:  200,
		TreeFiles: 3000,
		Seed:      1,
	}
}

// PageSize is the size of the random I/O requests and of the stamped
// pages that make read-back checks position-sensitive.
const PageSize = 4096

func (c Config) validate() error {
	switch {
	case c.Files < 0 || c.Dirs < 0 || c.FileSize < 0 || c.Mkdirs < 0 || c.SeqSize < 0 || c.SeqIO < 0 ||
		c.RandSize < 0 || c.RandOps < 0 || c.RandTime < 0 || c.RandQD < 0 || c.FsyncOps < 0 || c.TreeFiles < 0:
		return fmt.Errorf("fsbench: negative size in config")
	case c.Files > 0 && c.Dirs == 0:
		return fmt.Errorf("fsbench: %d files need at least one directory", c.Files)
	case c.SeqSize > 0 && c.SeqIO == 0:
		return fmt.Errorf("fsbench: sequential I/O size is 0")
	case c.SeqIO > 64<<20:
		return fmt.Errorf("fsbench: sequential I/O size %d is over 64 MiB", c.SeqIO)
	case c.RandOps > 0 && c.RandSize < PageSize:
		return fmt.Errorf("fsbench: random I/O file of %d bytes is smaller than one %d-byte page", c.RandSize, PageSize)
	case c.RandQD > RandQDMax:
		return fmt.Errorf("fsbench: queue depth %d is over %d", c.RandQD, RandQDMax)
	case c.RandOps > 0 && c.RandSize/PageSize < int64(c.RandQD):
		return fmt.Errorf("fsbench: random I/O file of %d pages is too small for a queue depth of %d (a page or more each)",
			c.RandSize/PageSize, c.RandQD)
	}
	return nil
}

// Run runs every workload of cfg in dir, which must be an existing
// directory, and returns the results in the order of the package comment.
// On error it returns the results so far and an error that names the
// workload and the operation that failed.
func Run(ctx context.Context, dir string, cfg Config) ([]Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%s: not a directory", dir)
	}
	r := &runner{ctx: ctx, dir: dir, cfg: cfg}
	steps := []struct {
		skip bool
		run  func(work string) error
		name string
	}{
		{cfg.Files == 0, r.smallFiles, "files"},
		{cfg.Mkdirs == 0, r.mkdirs, "mkdir"},
		{cfg.SeqSize == 0, r.sequential, "seq"},
		{cfg.RandOps == 0, r.random, "rand"},
		{cfg.FsyncOps == 0, r.fsyncLatency, "fsync"},
		{cfg.TreeFiles == 0, r.tree, "tree"},
	}
	for _, s := range steps {
		if s.skip {
			continue
		}
		if err := ctx.Err(); err != nil {
			return r.out, err
		}
		work, err := os.MkdirTemp(dir, "fsbench-"+s.name+"-")
		if err != nil {
			return r.out, fmt.Errorf("%s: %w", s.name, err)
		}
		err = s.run(work)
		if rerr := os.RemoveAll(work); rerr != nil && err == nil {
			err = fmt.Errorf("%s: clean up: %w", s.name, rerr)
		}
		if err != nil {
			return r.out, err
		}
	}
	return r.out, nil
}

type runner struct {
	ctx       context.Context
	dir       string // the directory under test; under RunDevice, the device's name
	cfg       Config
	out       []Result
	noDropLog bool // the page cache could not be dropped; said once
}

func (r *runner) logf(format string, args ...any) {
	if r.cfg.Log != nil {
		fmt.Fprintf(r.cfg.Log, "fsbench %s: "+format+"\n", append([]any{r.dir}, args...)...)
	}
}

// add records a result and logs it.
func (r *runner) add(name string, v float64, unit string) {
	res := Result{Name: name, Value: v, Unit: unit}
	r.out = append(r.out, res)
	r.logf("%s", res)
}

// rate is n per second over d (never dividing by zero).
func rate(n float64, d time.Duration) float64 { return n / max(d, time.Nanosecond).Seconds() }

// drop evicts t's cached pages where possible, saying once when it cannot.
func (r *runner) drop(t target) {
	if t.drop == nil {
		return
	}
	if err := t.drop(); err != nil && !r.noDropLog {
		r.noDropLog = true
		r.logf("cannot drop the page cache (%v); reads may be served from memory", err)
	}
}
