package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
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
		"":                                       "--gateway",
		"--gateway 127.0.0.1":                    "--gateway",
		"--gateway 127.0.0.1:1 --clients 0":      "--clients",
		"--gateway 127.0.0.1:1 --files 0":        "--files",
		"--gateway 127.0.0.1:1 --runs 0":         "--runs",
		"--gateway 127.0.0.1:1 --export /":       "--export",
		"--gateway 127.0.0.1:1 --clients 1,999":  "--clients",
		"--gateway 127.0.0.1:1 --seq-size -1":    "--seq-size",
		"--gateway 127.0.0.1:1 --seq-size 65GiB": "--seq-size",
		"--gateway 127.0.0.1:1 --seq-size x":     "--seq-size",
		"--gateway 127.0.0.1:1 --qd 0":           "--qd",
		"--gateway 127.0.0.1:1 --qd 129":         "--qd",
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
		metricDurableWaits, metricLogWrites, metricFuseOps,
		"nfs_seq_write", "nfs_seq_read", "fuse_seq_write_fsync", "fuse_seq_read", "nfs_seq_write_ratio", "nfs_seq_read_ratio"} {
		if !strings.Contains(c.Long, m) {
			t.Errorf("help does not name %s", m)
		}
	}
}

// TestFillPattern: the same seed and offset give the same bytes, a
// shorter buffer their prefix; another offset or seed other bytes; and
// checkPattern names the first wrong byte of the file.
func TestFillPattern(t *testing.T) {
	a, b := make([]byte, 1000), make([]byte, 1000)
	fillPattern(a, 7, 3<<20)
	fillPattern(b, 7, 3<<20)
	if !bytes.Equal(a, b) {
		t.Fatal("same seed and offset, other bytes")
	}
	short := make([]byte, 13)
	fillPattern(short, 7, 3<<20)
	if !bytes.Equal(short, a[:13]) {
		t.Error("a shorter buffer is not the prefix")
	}
	for _, o := range []struct {
		seed uint64
		off  int64
	}{{7, 4 << 20}, {8, 3 << 20}} {
		fillPattern(b, o.seed, o.off)
		if bytes.Equal(a, b) {
			t.Errorf("seed %d offset %d: the bytes of seed 7 offset 3 MiB", o.seed, o.off)
		}
	}
	scratch := make([]byte, len(a))
	if err := checkPattern(a, scratch, 7, 3<<20); err != nil {
		t.Errorf("the pattern itself: %v", err)
	}
	a[517] ^= 1
	if err := checkPattern(a, scratch, 7, 3<<20); err == nil || !strings.Contains(err.Error(), "byte 3146245 ") {
		t.Errorf("a flipped byte 517: %v", err)
	}
}

// TestCheckVerifiers: one WRITE with another verifier than the COMMIT's
// is an error naming its offset.
func TestCheckVerifiers(t *testing.T) {
	if err := checkVerifiers([]uint64{5, 5, 5}, 5); err != nil {
		t.Error(err)
	}
	if err := checkVerifiers(nil, 5); err != nil {
		t.Error(err)
	}
	if err := checkVerifiers([]uint64{5, 5, 6}, 5); err == nil || !strings.Contains(err.Error(), "WRITE at 2097152 ") {
		t.Errorf("a changed verifier: %v", err)
	}
}

// TestRunPipelined: every chunk once, the last one short; qd calls under
// way at once and never more; an error stops the calls; a cancelled ctx
// makes none.
func TestRunPipelined(t *testing.T) {
	const qd = 3
	size := int64(7*benchNFSChunkBytes + 5)
	var mu sync.Mutex
	seen := map[int64]int{}
	inFlight, most := 0, 0
	full := make(chan struct{})
	err := runPipelined(context.Background(), size, qd, func(w int, off int64, n int) error {
		mu.Lock()
		inFlight++
		if inFlight > most {
			most = inFlight
			if most == qd {
				close(full)
			}
		}
		mu.Unlock()
		select { // the first calls wait until qd are under way
		case <-full:
		case <-time.After(5 * time.Second):
		}
		mu.Lock()
		defer mu.Unlock()
		inFlight--
		seen[off] = n
		if w < 0 || w >= qd {
			return fmt.Errorf("worker %d", w)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 8 || seen[7*benchNFSChunkBytes] != 5 || seen[0] != benchNFSChunkBytes || seen[6*benchNFSChunkBytes] != benchNFSChunkBytes {
		t.Errorf("calls %v", seen)
	}
	if most != qd {
		t.Errorf("at most %d calls under way at once, want %d", most, qd)
	}

	boom := errors.New("boom")
	var calls atomic.Int32
	err = runPipelined(context.Background(), 100*benchNFSChunkBytes, 2, func(w int, off int64, n int) error {
		calls.Add(1)
		if off == 3*benchNFSChunkBytes {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || calls.Load() > 6 {
		t.Errorf("error %v after %d calls", err, calls.Load())
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls.Store(0)
	err = runPipelined(ctx, 10*benchNFSChunkBytes, 2, func(int, int64, int) error { calls.Add(1); return nil })
	if !errors.Is(err, context.Canceled) || calls.Load() != 0 {
		t.Errorf("cancelled: %v after %d calls", err, calls.Load())
	}
}

// TestPrintBenchNFSSeq: each side's MiB/s, then NFS's over DIR's, of the
// medians of the runs.
func TestPrintBenchNFSSeq(t *testing.T) {
	runs := []seqRun{
		{nfsWrite: 300, nfsRead: 90, fuseWrite: 100, fuseRead: 400},
		{nfsWrite: 100, nfsRead: 100, fuseWrite: 200, fuseRead: 200},
		{nfsWrite: 200, nfsRead: 500, fuseWrite: 300, fuseRead: 300},
	}
	var b bytes.Buffer
	printBenchNFSSeq(&b, medianSeq(runs))
	want := "nfs_seq_write 200.0 MiB/s\nnfs_seq_read 100.0 MiB/s\nfuse_seq_write_fsync 200.0 MiB/s\nfuse_seq_read 300.0 MiB/s\n" +
		"nfs_seq_write_ratio 1.000 ratio(higher=better)\nnfs_seq_read_ratio 0.333 ratio(higher=better)\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
