package main

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// metricsText is a piece of a gateway's /metrics.
const metricsText = `# HELP plumeria_nfs_durable_waits_total Requests that waited for the redo log before their reply.
# TYPE plumeria_nfs_durable_waits_total counter
plumeria_nfs_durable_waits_total 1234
plumeria_nfs_durable_waits_total_extra 7
# TYPE plumeria_fs_log_batch_records histogram
plumeria_fs_log_batch_records_bucket{volume="default",le="1"} 10
plumeria_fs_log_batch_records_sum{volume="default"} 900
plumeria_fs_log_batch_records_count{volume="default"} 300
plumeria_fs_log_batch_records_count{volume="other"} 5
plumeria_fuse_op_seconds_count{op="fsync"} 42
plumeria_fuse_op_seconds_count{op="fsyncdir"} 3
plumeria_fuse_op_seconds_count{op="create",x="op=\"fsync\""} 9
plumeria_fuse_op_seconds_count{op="lookup"} 1e+06 1700000000000
`

// TestMetricSum: samples of exactly the name, summed over their series,
// filtered by whole labels; a missing metric is not found.
func TestMetricSum(t *testing.T) {
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
		found  bool
	}{
		{metricDurableWaits, nil, 1234, true},
		{metricLogWrites, nil, 305, true},
		{metricLogWrites, []string{`volume="default"`}, 300, true},
		{metricFuseOps, []string{`op="fsync"`}, 42, true},
		{metricFuseOps, []string{`op="lookup"`}, 1e6, true},
		{metricFuseOps, []string{`op="rename"`}, 0, false},
		{"plumeria_fs_log_batch_records", nil, 0, false},
		{"plumeria_nope", nil, 0, false},
	} {
		got, found := metricSum(metricsText, c.name, c.labels...)
		if got != c.want || found != c.found {
			t.Errorf("%s %v: %v %v, want %v %v", c.name, c.labels, got, found, c.want, c.found)
		}
	}
}

// TestFactorSince: increases of requests over increases of log writes;
// unknown without both readings or without a log write between them.
func TestFactorSince(t *testing.T) {
	before := factorCounts{waits: 100, writes: 50, ok: true}
	if f := (factorCounts{waits: 400, writes: 150, ok: true}).factorSince(before); f != 3 {
		t.Errorf("factor %v, want 3", f)
	}
	for _, after := range []factorCounts{{waits: 400, writes: 50, ok: true}, {waits: 400, writes: 150}} {
		if f := after.factorSince(before); f != factorUnknown {
			t.Errorf("%+v since %+v: %v, want unknown", after, before, f)
		}
	}
}

// TestQuantileDuration: nearest rank, as fsbench's latencies.
func TestQuantileDuration(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 200; i++ {
		d = append(d, time.Duration(i))
	}
	for q, want := range map[float64]time.Duration{0.5: 100, 0.99: 198, 1: 200, 0: 1} {
		if got := quantileDuration(d, q); got != want {
			t.Errorf("q %v: %v, want %v", q, got, want)
		}
	}
	if got := quantileDuration(nil, 0.5); got != 0 {
		t.Errorf("empty: %v", got)
	}
}

// TestMedianRun: each field's own median; runs without a factor left out
// of the factor's.
func TestMedianRun(t *testing.T) {
	runs := []createRun{
		{opsPerSec: 300, median: 3 * time.Millisecond, p99: 9 * time.Millisecond, factor: 2},
		{opsPerSec: 100, median: 1 * time.Millisecond, p99: 8 * time.Millisecond, factor: factorUnknown},
		{opsPerSec: 200, median: 5 * time.Millisecond, p99: 7 * time.Millisecond, factor: 4},
	}
	want := createRun{opsPerSec: 200, median: 3 * time.Millisecond, p99: 8 * time.Millisecond, factor: 2}
	if got := medianRun(runs); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got := medianRun(runs[1:2]).factor; got != factorUnknown {
		t.Errorf("no factor: %v", got)
	}
}

// TestPrintBenchNFS: per client count the NFS lines, DIR's, then the
// ratio of their rates; a factor not measured has no line.
func TestPrintBenchNFS(t *testing.T) {
	nfs := []createRun{{opsPerSec: 400, median: 2500 * time.Microsecond, p99: 5 * time.Millisecond, factor: 3.5}}
	fuse := []createRun{{opsPerSec: 200, median: 5 * time.Millisecond, p99: 10 * time.Millisecond, factor: factorUnknown}}
	var b bytes.Buffer
	printBenchNFS(&b, []int{4}, nfs, fuse)
	want := "nfs_create_c4 400.0 ops/s\nnfs_create_c4_latency 2500.0 us\nnfs_create_c4_latency_p99 5000.0 us\n" +
		"nfs_create_c4_batching 3.500 waits/log_write\n" +
		"fuse_create_fsync_c4 200.0 ops/s\nfuse_create_fsync_c4_latency 5000.0 us\nfuse_create_fsync_c4_latency_p99 10000.0 us\n" +
		"nfs_create_c4_ratio 2.000 ratio(higher=better)\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// TestRunClients: every client makes every call; the first error stops
// the run and names its client and call.
func TestRunClients(t *testing.T) {
	var calls [3][5]int
	res, err := runClients(3, 5, func(c, i int) error { calls[c][i]++; return nil })
	if err != nil || res.opsPerSec <= 0 {
		t.Fatalf("%+v %v", res, err)
	}
	for c := range calls {
		for i, n := range calls[c] {
			if n != 1 {
				t.Errorf("client %d call %d made %d times", c, i, n)
			}
		}
	}
	boom := errors.New("boom")
	_, err = runClients(2, 5, func(c, i int) error {
		if c == 1 && i == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "client 1, file 3") {
		t.Errorf("error %v", err)
	}
}

// TestBenchNFSFlags: bounds are checked before anything connects, and the
// help names every metric.
func TestBenchNFSFlags(t *testing.T) {
	dir := t.TempDir()
	for args, want := range map[string]string{
		"":                                      "--gateway",
		"--gateway 127.0.0.1":                   "--gateway",
		"--gateway 127.0.0.1:1 --clients 0":     "--clients",
		"--gateway 127.0.0.1:1 --files 0":       "--files",
		"--gateway 127.0.0.1:1 --runs 0":        "--runs",
		"--gateway 127.0.0.1:1 --export /":      "--export",
		"--gateway 127.0.0.1:1 --clients 1,999": "--clients",
	} {
		c := benchNFSCmd()
		c.SetArgs(append(strings.Fields(args), dir))
		c.SetOut(io.Discard)
		c.SetErr(io.Discard)
		if err := c.Execute(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error naming %s", args, err, want)
		}
	}
	c := benchNFSCmd()
	for _, m := range []string{"nfs_create_cN", "_latency", "_latency_p99", "_batching", "fuse_create_fsync_cN", "_ratio",
		metricDurableWaits, metricLogWrites, metricFuseOps} {
		if !strings.Contains(c.Long, m) {
			t.Errorf("help does not name %s", m)
		}
	}
}
