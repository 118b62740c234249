package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/bench/fsbench"
)

// benchDir makes c, the parent `bench` command, run the file system
// workloads of bench/fsbench on its positional DIR.
func benchDir(c *cobra.Command) {
	def := fsbench.DefaultConfig()
	cfg := def
	var vs, seqSize, seqIO, randSize, fileSize string
	var floor bool
	c.Use = "bench DIR [--vs DIR] [--floor]"
	c.Short = "Benchmarks; one line per metric: name value unit"
	c.Long = "`plumeria bench DIR` runs the standard file system workloads in fresh subdirectories of DIR\n" +
		"(a Plumeria mount, or any directory) and removes them afterwards. Results go to stdout, one\n" +
		"line per metric, progress to stderr:\n" +
		"  files_create, files_stat, files_read (cold), files_reread (again), files_delete files/s;\n" +
		"  files_readdir, files_relist (again) entries/s;\n" +
		"  mkdir_rmdir dirs/s; seq_write_fsync, seq_read MiB/s; rand_read_4k, rand_write_4k IOPS;\n" +
		"  rand_mixed_qd16 IOPS (4 KiB random reads and writes, 70/30, 16 in flight: --rand-qd);\n" +
		"  write_fsync_4k_latency, write_fsync_4k_latency_p99 us (a 4 KiB write then fsync, median\n" +
		"  and 99th percentile; lower is better); write_fdatasync_4k_latency and _p99 us (the same\n" +
		"  with fdatasync);\n" +
		"  tree_extract s (extracting a generated source tarball; lower is better).\n" +
		"Every byte read back is checked. A size or count of 0 skips its workload.\n" +
		"With --vs DIR2 the same workloads also run on DIR2 and each metric prints three lines:\n" +
		"  NAME value unit        on DIR\n" +
		"  NAME_vs value unit     on DIR2\n" +
		"  NAME_ratio DIR/DIR2 ratio(higher=better)   or ratio(lower=better) for times (s, us)\n" +
		"With --floor (root, /dev/fuse) they also run on the FUSE floor: an in-memory file system\n" +
		"served through the same FUSE adapter and options as a Plumeria mount, on a temporary\n" +
		"directory; each metric then adds NAME_floor (its value there) and NAME_floor_ratio (DIR/floor),\n" +
		"showing how much of DIR's cost is FUSE's own.\n" +
		"The subcommands benchmark the cluster's own layers (vdisk, locks) and two mounts of one volume (two)."
	c.Example = "  plumeria bench /mnt/plumeria --vs /var/tmp --floor\n" +
		"  plumeria bench /mnt/plumeria --files 1000 --seq-size 256MiB --rand-ops 2000 --tree-files 300"
	f := c.Flags()
	f.StringVar(&vs, "vs", "", "also run on this directory and print the ratios DIR/VS")
	f.BoolVar(&floor, "floor", false, "also run on an in-memory file system served through the same FUSE adapter, and print the ratios DIR/floor (root, /dev/fuse)")
	f.IntVar(&cfg.Files, "files", def.Files, "small files created, stat-ed, listed, read and deleted")
	f.IntVar(&cfg.Dirs, "dirs", def.Dirs, "directories the small files are spread over")
	f.StringVar(&fileSize, "file-size", "1KiB", "bytes per small file")
	f.IntVar(&cfg.Mkdirs, "mkdirs", def.Mkdirs, "directories made then removed")
	f.StringVar(&seqSize, "seq-size", "2GiB", "bytes written (then fsync) and read back sequentially")
	f.StringVar(&seqIO, "seq-io", "1MiB", "bytes per sequential write and read")
	f.StringVar(&randSize, "rand-size", "256MiB", "size of the file of the random 4 KiB reads and writes")
	randFlags(f, &cfg, def, "fsync")
	f.IntVar(&cfg.TreeFiles, "tree-files", def.TreeFiles, "regular files in the extracted source tree")
	f.Uint64Var(&cfg.Seed, "seed", def.Seed, "seed of the tree shape, offsets and data")
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) != 1 {
			cmd.Usage() // to stderr
			if len(args) == 0 {
				return errors.New("bench: missing DIR (or a subcommand)")
			}
			return fmt.Errorf("bench: want one DIR, got %d arguments", len(args))
		}
		for _, s := range []struct {
			flag, v string
			dst     *int64
		}{{"--seq-size", seqSize, &cfg.SeqSize}, {"--rand-size", randSize, &cfg.RandSize}} {
			n, err := parseBytes(s.v)
			if err != nil {
				return fmt.Errorf("%s: %w", s.flag, err)
			}
			*s.dst = n
		}
		for _, s := range []struct {
			flag, v string
			dst     *int
			max     uint64
		}{{"--seq-io", seqIO, &cfg.SeqIO, 64 << 20}, {"--file-size", fileSize, &cfg.FileSize, 1 << 30}} {
			n, err := parseUint(s.v)
			if err != nil {
				return fmt.Errorf("%s: %w", s.flag, err)
			}
			if n > s.max {
				return fmt.Errorf("%s: %s is over %s", s.flag, s.v, humanBytes(int64(s.max)))
			}
			*s.dst = int(n)
		}
		dirs := []string{args[0]}
		if vs != "" {
			dirs = append(dirs, vs)
		}
		for _, d := range dirs {
			if err := checkBenchDir(c, d); err != nil {
				return err
			}
		}
		if floor {
			if err := floorReady(cfg); err != nil {
				return err
			}
			fm, err := mountFloor()
			if err != nil {
				return err
			}
			defer func() {
				if err := fm.unmount(); err != nil {
					fmt.Fprintln(os.Stderr, err)
				}
			}()
			dirs = append(dirs, fm.dir)
		}
		cfg.Log = os.Stderr
		var results [][]fsbench.Result
		for i, d := range dirs {
			start := time.Now()
			what := d
			if floor && i == len(dirs)-1 {
				what = "the FUSE floor " + d
			}
			fmt.Fprintf(os.Stderr, "bench: running in %s\n", what)
			res, err := fsbench.Run(cmd.Context(), d, cfg)
			if err != nil {
				return fmt.Errorf("bench %s: %w", what, err)
			}
			fmt.Fprintf(os.Stderr, "bench: %s done in %v\n", what, time.Since(start).Round(time.Second))
			results = append(results, res)
		}
		var vsRes, floorRes []fsbench.Result
		if vs != "" {
			vsRes = results[1]
		}
		if floor {
			floorRes = results[len(results)-1]
		}
		printBenchDir(os.Stdout, results[0], vsRes, floorRes)
		return nil
	}
}

// checkBenchDir names a mistyped subcommand rather than a missing directory.
func checkBenchDir(c *cobra.Command, dir string) error {
	st, err := os.Stat(dir)
	if err == nil && !st.IsDir() {
		return fmt.Errorf("bench: %s is not a directory", dir)
	}
	if err != nil && !strings.ContainsRune(dir, os.PathSeparator) {
		if c.SuggestionsMinimumDistance <= 0 {
			c.SuggestionsMinimumDistance = 2 // as cobra's own "unknown command"
		}
		if s := c.SuggestionsFor(dir); len(s) > 0 {
			return fmt.Errorf("bench: %w (did you mean `plumeria bench %s`?)", err, s[0])
		}
	}
	return err
}

// printBenchDir prints one line per metric of the run on DIR; with the
// run on --vs, that metric there (NAME_vs) and the ratio DIR/VS
// (NAME_ratio); with the run on the FUSE floor, that metric there
// (NAME_floor) and the ratio DIR/floor (NAME_floor_ratio).
func printBenchDir(w io.Writer, dir, vs, floor []fsbench.Result) {
	others := []struct {
		res          []fsbench.Result
		suffix, rsfx string
	}{{vs, "_vs", "_ratio"}, {floor, "_floor", "_floor_ratio"}}
	for i, a := range dir {
		better := ratioUnit(a.Unit)
		fmt.Fprintln(w, a)
		for _, o := range others {
			if o.res == nil {
				continue
			}
			b := o.res[i] // the same workloads, in the same order
			fmt.Fprintln(w, fsbench.Result{Name: a.Name + o.suffix, Value: b.Value, Unit: b.Unit})
			fmt.Fprintf(w, "%s%s %.3f %s\n", a.Name, o.rsfx, a.Value/b.Value, better)
		}
	}
}

// ratioUnit is the unit of a ratio of two values of a metric in unit:
// which way is better.
func ratioUnit(unit string) string {
	if fsbench.LowerIsBetter(unit) {
		return "ratio(lower=better)"
	}
	return "ratio(higher=better)"
}
