package e2e

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBenchLocks: `plumeria bench locks` runs a coordinator, a lock server
// and two clerks, and prints one "name value unit" line per measurement.
func TestBenchLocks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, plumeriaBin, "bench", "locks", "--ops", "200").CombinedOutput()
	if err != nil {
		t.Fatalf("bench locks: %v\n%s", err, out)
	}
	want := map[string]string{"lock_cached_acquire": "ns", "lock_remote_acquire": "us", "lock_handoff": "us", "lock_server_throughput": "ops/s"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		if unit, ok := want[f[0]]; ok && f[2] == unit {
			if v, err := strconv.ParseFloat(f[1], 64); err != nil || v <= 0 {
				t.Fatalf("%s: value %q", f[0], f[1])
			}
			delete(want, f[0])
		}
	}
	if len(want) > 0 {
		t.Fatalf("missing measurements %v in:\n%s", want, out)
	}
}
