package main

import (
	"bytes"
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
