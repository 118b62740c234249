package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBenchVdisk: `plumeria bench vdisk` runs the block workloads of
// `plumeria bench DIR` (sequential, 4 KiB random at QD1 and QD16, write +
// sync latency) on a local file and on a raw volume per --replicas count
// (here on its own in-process cluster), and prints on stdout only
// local_file_NAME for each metric, then per count vdisk_rN_NAME and
// vdisk_rN_NAME_ratio (vdisk/local, lower=better for us), in the units of
// `bench DIR`. The local file is removed afterwards.
func TestBenchVdisk(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, plumeriaBin, "bench", "vdisk", "--dir", dir, "--replicas", "1,3",
		"--size", "4MiB", "--rand-size", "1MiB", "--rand-ops", "200", "--fsync-ops", "20")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench vdisk: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	t.Logf("stdout:\n%s", stdout.String())
	want := map[string]string{}
	for name, unit := range benchMetrics {
		if !strings.HasPrefix(name, "seq_") && !strings.HasPrefix(name, "rand_") && !strings.HasPrefix(name, "write_fsync") {
			continue // the file system's own workloads
		}
		want["local_file_"+name] = unit
		for _, r := range []string{"vdisk_r1_", "vdisk_r3_"} {
			want[r+name] = unit
			want[r+name+"_ratio"] = "ratio(higher=better)"
			if unit == "us" {
				want[r+name+"_ratio"] = "ratio(lower=better)"
			}
		}
	}
	checkMetricLines(t, stdout.String(), want)
	for _, s := range []string{"rand_mixed_qd16", "(1 replica)", "(3 replicas) done in"} {
		if !strings.Contains(stderr.String(), s) {
			t.Errorf("no %q in the progress on stderr:\n%s", s, stderr.String())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "local.dat")); !os.IsNotExist(err) {
		t.Errorf("local file after the run: %v", err)
	}
}
