package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/plumeria-fs/plumeria/bench/fsbench"
)

// TestPrintBenchDir: per metric, DIR's line, then the --vs lines, then the
// floor lines, each ratio DIR/other with the unit's sense of better.
func TestPrintBenchDir(t *testing.T) {
	dir := []fsbench.Result{{Name: "files_create", Value: 100, Unit: "files/s"}, {Name: "tree_extract", Value: 2, Unit: "s"}}
	vs := []fsbench.Result{{Name: "files_create", Value: 400, Unit: "files/s"}, {Name: "tree_extract", Value: 0.5, Unit: "s"}}
	floor := []fsbench.Result{{Name: "files_create", Value: 200, Unit: "files/s"}, {Name: "tree_extract", Value: 1, Unit: "s"}}
	for _, c := range []struct {
		vs, floor []fsbench.Result
		want      string
	}{
		{nil, nil, "files_create 100.0 files/s\ntree_extract 2.000 s\n"},
		{vs, nil, "files_create 100.0 files/s\nfiles_create_vs 400.0 files/s\nfiles_create_ratio 0.250 ratio(higher=better)\n" +
			"tree_extract 2.000 s\ntree_extract_vs 0.500 s\ntree_extract_ratio 4.000 ratio(lower=better)\n"},
		{nil, floor, "files_create 100.0 files/s\nfiles_create_floor 200.0 files/s\nfiles_create_floor_ratio 0.500 ratio(higher=better)\n" +
			"tree_extract 2.000 s\ntree_extract_floor 1.000 s\ntree_extract_floor_ratio 2.000 ratio(lower=better)\n"},
		{vs, floor, "files_create 100.0 files/s\nfiles_create_vs 400.0 files/s\nfiles_create_ratio 0.250 ratio(higher=better)\n" +
			"files_create_floor 200.0 files/s\nfiles_create_floor_ratio 0.500 ratio(higher=better)\n" +
			"tree_extract 2.000 s\ntree_extract_vs 0.500 s\ntree_extract_ratio 4.000 ratio(lower=better)\n" +
			"tree_extract_floor 1.000 s\ntree_extract_floor_ratio 2.000 ratio(lower=better)\n"},
	} {
		var b bytes.Buffer
		printBenchDir(&b, dir, c.vs, c.floor)
		if b.String() != c.want {
			t.Errorf("vs %v floor %v: got\n%s\nwant\n%s", c.vs != nil, c.floor != nil, b.String(), c.want)
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
