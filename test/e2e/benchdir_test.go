package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tinyBench are workload sizes that take a second or so.
var tinyBench = []string{"--files", "200", "--dirs", "4", "--mkdirs", "50",
	"--seq-size", "4MiB", "--rand-size", "1MiB", "--rand-ops", "200", "--fsync-ops", "50", "--tree-files", "60"}

// benchMetrics are the metrics of `plumeria bench DIR` and their units.
var benchMetrics = map[string]string{
	"files_create": "files/s", "files_stat": "files/s", "files_readdir": "entries/s", "files_read": "files/s",
	"files_relist": "entries/s", "files_reread": "files/s",
	"files_delete": "files/s", "mkdir_rmdir": "dirs/s", "seq_write_fsync": "MiB/s", "seq_read": "MiB/s",
	"rand_read_4k": "IOPS", "rand_write_4k": "IOPS", "rand_mixed_qd16": "IOPS",
	"write_fsync_4k_latency": "us", "write_fsync_4k_latency_p99": "us",
	"write_fdatasync_4k_latency": "us", "write_fdatasync_4k_latency_p99": "us", "tree_extract": "s",
}

// checkBenchLines checks that out holds exactly, once each, the
// "name value unit" lines of every metric: NAME, NAME+suffix in the
// metric's unit and NAME+rsuffix, the ratio, for each (suffix, rsuffix)
// pair in suffixes; every value a positive number.
func checkBenchLines(t *testing.T, out string, suffixes ...string) {
	t.Helper()
	want := map[string]string{}
	for name, unit := range benchMetrics {
		want[name] = unit
		for i := 0; i+1 < len(suffixes); i += 2 {
			want[name+suffixes[i]] = unit
			want[name+suffixes[i+1]] = "ratio(higher=better)"
			if unit == "s" || unit == "us" {
				want[name+suffixes[i+1]] = "ratio(lower=better)"
			}
		}
	}
	checkMetricLines(t, out, want)
}

// checkMetricLines checks that out holds exactly the "name value unit"
// lines of want (name to unit), once each, every value a positive number.
func checkMetricLines(t *testing.T, out string, want map[string]string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(want) {
		t.Errorf("%d lines on stdout, want %d", len(lines), len(want))
	}
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Errorf("line %q is not: name value unit", line)
			continue
		}
		unit, ok := want[f[0]]
		if !ok {
			t.Errorf("unexpected or repeated metric in %q", line)
			continue
		}
		delete(want, f[0])
		if f[2] != unit {
			t.Errorf("%q: unit %q, want %q", line, f[2], unit)
		}
		if v, err := strconv.ParseFloat(f[1], 64); err != nil || !(v > 0) {
			t.Errorf("%q: value %q is not a positive number", line, f[1])
		}
	}
	if len(want) > 0 {
		t.Errorf("missing metrics %v", want)
	}
}

// TestBenchDir: `plumeria bench DIR --vs DIR2` runs the file system
// workloads on two directories and prints, on stdout only, three
// "name value unit" lines per metric: DIR, DIR2 (NAME_vs) and the ratio
// DIR/DIR2 (NAME_ratio); both directories are left as they were. Without
// DIR it prints its usage and fails; its subcommands still resolve.
func TestBenchDir(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, vs := t.TempDir(), t.TempDir()
	cmd := exec.CommandContext(ctx, plumeriaBin, append([]string{"bench", dir, "--vs", vs}, tinyBench...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench %s --vs %s: %v\nstdout:\n%s\nstderr:\n%s", dir, vs, err, stdout.String(), stderr.String())
	}
	t.Logf("stdout:\n%s", stdout.String())
	checkBenchLines(t, stdout.String(), "_vs", "_ratio")
	if !strings.Contains(stderr.String(), "tree_extract") {
		t.Errorf("no progress on stderr:\n%s", stderr.String())
	}
	for _, d := range []string{dir, vs} {
		if left, err := os.ReadDir(d); err != nil || len(left) != 0 {
			t.Errorf("%s after the run: %v %v", d, left, err)
		}
	}

	out, err := exec.CommandContext(ctx, plumeriaBin, "bench").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Usage:") || !strings.Contains(string(out), "missing DIR") {
		t.Errorf("bench without DIR: %v\n%s", err, out)
	}
	missing := dir + "/missing"
	out, err = exec.CommandContext(ctx, plumeriaBin, "bench", missing, "--files", "1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), missing) {
		t.Errorf("bench of a missing directory: %v\n%s", err, out)
	}
	for sub, text := range map[string]string{"vdisk": "plumeria bench vdisk", "locks": "plumeria bench locks"} {
		out, err := exec.CommandContext(ctx, plumeriaBin, "bench", sub, "--help").CombinedOutput()
		if err != nil || !strings.Contains(string(out), text) {
			t.Errorf("bench %s --help: %v\n%s", sub, err, out)
		}
	}
}

// TestBenchDirFloor: `plumeria bench DIR --floor` also runs the workloads
// on an in-memory file system mounted through the FUSE adapter, and prints
// NAME_floor and NAME_floor_ratio for every metric after NAME_vs and
// NAME_ratio; the floor is unmounted and its directory removed. Without
// root or /dev/fuse it fails at once, naming what is missing.
func TestBenchDirFloor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, vs := t.TempDir(), t.TempDir()
	cmd := exec.CommandContext(ctx, plumeriaBin, append([]string{"bench", dir, "--vs", vs, "--floor"}, tinyBench...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if _, ferr := os.Stat("/dev/fuse"); ferr != nil || os.Geteuid() != 0 {
		missing := "root"
		if ferr != nil {
			missing = "/dev/fuse"
		}
		if err == nil || !strings.Contains(stderr.String(), "--floor") || !strings.Contains(stderr.String(), missing) {
			t.Errorf("bench --floor without %s: %v, stderr:\n%s", missing, err, stderr.String())
		}
		if stdout.Len() > 0 || strings.Contains(stderr.String(), "running in") {
			t.Errorf("bench --floor ran workloads though it cannot mount the floor:\n%s%s", stdout.String(), stderr.String())
		}
		t.Skipf("checked the error without %s; the floor itself needs root and /dev/fuse", missing)
	}
	if err != nil {
		t.Fatalf("bench %s --vs %s --floor: %v\nstdout:\n%s\nstderr:\n%s", dir, vs, err, stdout.String(), stderr.String())
	}
	t.Logf("stdout:\n%s", stdout.String())
	checkBenchLines(t, stdout.String(), "_vs", "_ratio", "_floor", "_floor_ratio")
	// Per metric: NAME, NAME_vs, NAME_ratio, NAME_floor, NAME_floor_ratio.
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	for i := 0; i+4 < len(lines); i += 5 {
		name := strings.Fields(lines[i])[0]
		for j, sfx := range []string{"_vs", "_ratio", "_floor", "_floor_ratio"} {
			if got := strings.Fields(lines[i+1+j])[0]; got != name+sfx {
				t.Errorf("line %d is %s, want %s", i+2+j, got, name+sfx)
			}
		}
	}
	floor := regexp.MustCompile(`running in the FUSE floor (\S+)`).FindStringSubmatch(stderr.String())
	if floor == nil {
		t.Fatalf("no floor directory named on stderr:\n%s", stderr.String())
	}
	if _, err := os.Stat(floor[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("floor directory %s after the run: %v", floor[1], err)
	}
	if mounts, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(mounts), floor[1]) {
		t.Errorf("%s still mounted after the run", floor[1])
	}
	for _, d := range []string{dir, vs} {
		if left, err := os.ReadDir(d); err != nil || len(left) != 0 {
			t.Errorf("%s after the run: %v %v", d, left, err)
		}
	}
}
