package fuse

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"
)

// opCount is how many op calls the histogram has seen.
func opCount(t *testing.T, s *stats, op string) uint64 {
	t.Helper()
	var m dto.Metric
	if err := s.seconds.WithLabelValues(op).(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// TestOpMetrics: every operation lands in plumeria_fuse_op_seconds under
// its op, and failed ones in plumeria_fuse_op_errors_total under op and
// errno; a getxattr size probe is no error.
func TestOpMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, m, dir := mountMem(t, Options{Registerer: reg})
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "d", "g"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "rmdir non-empty", unix.Rmdir(filepath.Join(dir, "d")), syscall.ENOTEMPTY)
	_, err := os.Stat(filepath.Join(dir, "missing"))
	wantErrno(t, "stat missing", err, syscall.ENOENT)
	if err := unix.Setxattr(p, "user.a", []byte("value"), 0); err != nil {
		t.Fatal(err)
	}
	if sz, err := unix.Getxattr(p, "user.a", nil); err != nil || sz != 5 {
		t.Fatalf("size probe: %d %v", sz, err)
	}
	if _, err := os.ReadDir(dir); err != nil {
		t.Fatal(err)
	}

	for _, op := range []string{"lookup", "create", "write", "open", "read", "mkdir", "rmdir", "setxattr", "getxattr", "readdir"} {
		if opCount(t, m.stats, op) == 0 {
			t.Errorf("op %s: no observation in plumeria_fuse_op_seconds", op)
		}
	}
	if got := testutil.ToFloat64(m.stats.errors.WithLabelValues("rmdir", "ENOTEMPTY")); got != 1 {
		t.Errorf("errors{rmdir,ENOTEMPTY} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.stats.errors.WithLabelValues("lookup", "ENOENT")); got < 1 {
		t.Errorf("errors{lookup,ENOENT} = %v, want >= 1", got)
	}
	if got := testutil.ToFloat64(m.stats.errors.WithLabelValues("getxattr", "ERANGE")); got != 0 {
		t.Errorf("errors{getxattr,ERANGE} = %v: a size probe counted as an error", got)
	}
	if n, err := testutil.GatherAndCount(reg, "plumeria_fuse_op_seconds", "plumeria_fuse_op_errors_total"); err != nil || n == 0 {
		t.Errorf("registry: %d series, %v", n, err)
	}
}
