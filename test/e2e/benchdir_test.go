package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBenchDir: `plumeria bench DIR --vs DIR2` runs the file system
// workloads on two directories and prints, on stdout only, three
// "name value unit" lines per metric: DIR, DIR2 (NAME_vs) and the ratio
// DIR/DIR2 (NAME_ratio); both directories are left as they were. Without
// DIR it prints its usage and fails; its subcommands still resolve.
func TestBenchDir(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, vs := t.TempDir(), t.TempDir()
	cmd := exec.CommandContext(ctx, plumeriaBin, "bench", dir, "--vs", vs, "--files", "200", "--dirs", "4", "--mkdirs", "50",
		"--seq-size", "4MiB", "--rand-size", "1MiB", "--rand-ops", "200", "--tree-files", "60")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench %s --vs %s: %v\nstdout:\n%s\nstderr:\n%s", dir, vs, err, stdout.String(), stderr.String())
	}
	t.Logf("stdout:\n%s", stdout.String())
	metrics := map[string]string{
		"files_create": "files/s", "files_stat": "files/s", "files_readdir": "entries/s", "files_read": "files/s",
		"files_delete": "files/s", "mkdir_rmdir": "dirs/s", "seq_write_fsync": "MiB/s", "seq_read": "MiB/s",
		"rand_read_4k": "IOPS", "rand_write_4k": "IOPS", "tree_extract": "s",
	}
	want := map[string]string{}
	for name, unit := range metrics {
		want[name], want[name+"_vs"] = unit, unit
		want[name+"_ratio"] = "ratio(higher=better)"
		if unit == "s" {
			want[name+"_ratio"] = "ratio(lower=better)"
		}
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
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
