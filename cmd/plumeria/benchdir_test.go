package main

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/bench/fsbench"
)

// TestPrintBenchDir: per metric, DIR's line, then the --vs lines, then the
// floor lines, each ratio DIR/other with the unit's sense of better
// (lower for times: s, us).
func TestPrintBenchDir(t *testing.T) {
	dir := []fsbench.Result{{Name: "files_create", Value: 100, Unit: "files/s"}, {Name: "tree_extract", Value: 2, Unit: "s"}}
	vs := []fsbench.Result{{Name: "files_create", Value: 400, Unit: "files/s"}, {Name: "tree_extract", Value: 0.5, Unit: "s"}}
	floor := []fsbench.Result{{Name: "files_create", Value: 200, Unit: "files/s"}, {Name: "tree_extract", Value: 1, Unit: "s"}}
	lat := []fsbench.Result{{Name: "write_fsync_4k_latency", Value: 900, Unit: "us"}}
	latVs := []fsbench.Result{{Name: "write_fsync_4k_latency", Value: 300, Unit: "us"}}
	for _, c := range []struct {
		dir, vs, floor []fsbench.Result
		want           string
	}{
		{dir, nil, nil, "files_create 100.0 files/s\ntree_extract 2.000 s\n"},
		{dir, vs, nil, "files_create 100.0 files/s\nfiles_create_vs 400.0 files/s\nfiles_create_ratio 0.250 ratio(higher=better)\n" +
			"tree_extract 2.000 s\ntree_extract_vs 0.500 s\ntree_extract_ratio 4.000 ratio(lower=better)\n"},
		{dir, nil, floor, "files_create 100.0 files/s\nfiles_create_floor 200.0 files/s\nfiles_create_floor_ratio 0.500 ratio(higher=better)\n" +
			"tree_extract 2.000 s\ntree_extract_floor 1.000 s\ntree_extract_floor_ratio 2.000 ratio(lower=better)\n"},
		{dir, vs, floor, "files_create 100.0 files/s\nfiles_create_vs 400.0 files/s\nfiles_create_ratio 0.250 ratio(higher=better)\n" +
			"files_create_floor 200.0 files/s\nfiles_create_floor_ratio 0.500 ratio(higher=better)\n" +
			"tree_extract 2.000 s\ntree_extract_vs 0.500 s\ntree_extract_ratio 4.000 ratio(lower=better)\n" +
			"tree_extract_floor 1.000 s\ntree_extract_floor_ratio 2.000 ratio(lower=better)\n"},
		{lat, latVs, nil, "write_fsync_4k_latency 900.0 us\nwrite_fsync_4k_latency_vs 300.0 us\n" +
			"write_fsync_4k_latency_ratio 3.000 ratio(lower=better)\n"},
	} {
		var b bytes.Buffer
		printBenchDir(&b, c.dir, c.vs, c.floor)
		if b.String() != c.want {
			t.Errorf("%s vs %v floor %v: got\n%s\nwant\n%s", c.dir[0].Name, c.vs != nil, c.floor != nil, b.String(), c.want)
		}
	}
}

// TestFloorBytes: the floor's memory need is its largest workload's data,
// named by its flag; random I/O counts only when it runs.
func TestFloorBytes(t *testing.T) {
	cfg := fsbench.DefaultConfig()
	if n, flag := floorBytes(cfg); n != cfg.SeqSize || flag != "--seq-size" {
		t.Errorf("defaults: %d %s, want %d --seq-size", n, flag, cfg.SeqSize)
	}
	cfg.SeqSize, cfg.RandOps = 0, 0
	if n, flag := floorBytes(cfg); flag != "--tree-files" || n < int64(cfg.TreeFiles)<<14 {
		t.Errorf("no seq, no rand: %d %s, want --tree-files", n, flag)
	}
	cfg.RandOps = 1
	if _, flag := floorBytes(cfg); flag != "--rand-size" {
		t.Errorf("rand: %s, want --rand-size", flag)
	}
	if err := floorReady(fsbench.Config{SeqSize: 1 << 60}); err == nil || !strings.Contains(err.Error(), "--floor") {
		t.Errorf("floorReady of an exabyte: %v", err)
	}
}

// TestBenchDirFlags: the mixed and fsync workloads have their flags, with
// the library's defaults, and the help names their metrics.
func TestBenchDirFlags(t *testing.T) {
	c := &cobra.Command{}
	benchDir(c)
	def := fsbench.DefaultConfig()
	for name, want := range map[string]int{"rand-qd": def.RandQD, "fsync-ops": def.FsyncOps} {
		f := c.Flags().Lookup(name)
		if f == nil || f.DefValue != strconv.Itoa(want) {
			t.Errorf("--%s: %v, want default %d", name, f, want)
		}
	}
	for _, m := range []string{"rand_mixed_qd16", "write_fsync_4k_latency", "write_fsync_4k_latency_p99", "--rand-qd"} {
		if !strings.Contains(c.Long, m) {
			t.Errorf("help does not name %s", m)
		}
	}
}

// TestPrintVdisk: per metric of a volume, its line under the prefix, then
// its ratio to the local file's, with the unit's sense of better.
func TestPrintVdisk(t *testing.T) {
	local := []fsbench.Result{{Name: "seq_read", Value: 400, Unit: "MiB/s"}, {Name: "write_fsync_4k_latency", Value: 250, Unit: "us"}}
	vol := []fsbench.Result{{Name: "seq_read", Value: 100, Unit: "MiB/s"}, {Name: "write_fsync_4k_latency", Value: 1000, Unit: "us"}}
	var b bytes.Buffer
	printVdisk(&b, "vdisk_r2_", vol, local)
	want := "vdisk_r2_seq_read 100.0 MiB/s\nvdisk_r2_seq_read_ratio 0.250 ratio(higher=better)\n" +
		"vdisk_r2_write_fsync_4k_latency 1000.0 us\nvdisk_r2_write_fsync_4k_latency_ratio 4.000 ratio(lower=better)\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// TestBenchVdiskFlags: the random and fsync workloads have the flags of
// `bench DIR`, with the library's defaults; the help names the metrics;
// --replicas is checked before anything runs.
func TestBenchVdiskFlags(t *testing.T) {
	c := benchVdiskCmd()
	def := fsbench.DefaultConfig()
	for name, want := range map[string]string{"rand-ops": strconv.Itoa(def.RandOps), "rand-qd": strconv.Itoa(def.RandQD),
		"fsync-ops": strconv.Itoa(def.FsyncOps), "rand-time": def.RandTime.String(), "size": "256MiB", "replicas": "[1,2,3]"} {
		if f := c.Flags().Lookup(name); f == nil || f.DefValue != want {
			t.Errorf("--%s: %v, want default %s", name, f, want)
		}
	}
	for _, m := range []string{"seq_write_fsync", "seq_read", "rand_read_4k", "rand_write_4k", "rand_mixed_qd16",
		"write_fsync_4k_latency", "_p99", "local_file_", "vdisk_rN_", "_ratio"} {
		if !strings.Contains(c.Long, m) {
			t.Errorf("help does not name %s", m)
		}
	}
	for _, bad := range []string{"0", "1,9"} {
		c := benchVdiskCmd()
		c.SetArgs([]string{"--replicas", bad, "--dir", t.TempDir()})
		c.SetOut(io.Discard)
		c.SetErr(io.Discard)
		if err := c.Execute(); err == nil || !strings.Contains(err.Error(), "--replicas") {
			t.Errorf("--replicas %s: %v", bad, err)
		}
	}
}
