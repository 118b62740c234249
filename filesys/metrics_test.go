package filesys

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/plumeria-fs/plumeria/filesys/fstest"
	"github.com/plumeria-fs/plumeria/lock"
)

// histogram returns an observer's sample count and sum.
func histogram(t *testing.T, o prometheus.Observer) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := o.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

func openWithRegistry(t *testing.T, dev *memDevice, id string, reg prometheus.Registerer) *FS {
	t.Helper()
	fs, err := Open(context.Background(), Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: id, Session: 1,
		FlushInterval: time.Hour, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// TestLogMetrics: after Sync every record appended is in the batch-size
// histogram and the commit histogram, the writes in the write histogram.
func TestLogMetrics(t *testing.T) {
	ctx := context.Background()
	fs := openWithRegistry(t, formatted(t), "a", prometheus.NewRegistry())
	defer fs.Close(ctx)
	for i := range 20 {
		if _, err := fs.Mkdir(ctx, RootIno, fmt.Sprintf("d%d", i), 0o755, Caller{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	s := fs.stats
	batches, records := histogram(t, s.logBatch)
	commits, _ := histogram(t, s.logCommit)
	writes, _ := histogram(t, s.logWrite)
	ls := fs.LogStats()
	if batches != ls.Batches || uint64(records) != ls.Records || records < 20 {
		t.Errorf("batch histogram: %d batches, %v records; log stats %+v", batches, records, ls)
	}
	if commits != uint64(records) {
		t.Errorf("%d commits timed, %v records durable", commits, records)
	}
	if writes < batches {
		t.Errorf("%d writes timed, %d batches", writes, batches)
	}
	// Open's marker is written before the hooks are set up.
	if got := testutil.ToFloat64(s.logBytes); got == 0 || got != float64(ls.Bytes-512) {
		t.Errorf("log bytes %v, log stats %+v", got, ls)
	}
}

// TestWriteBackAndDataMetrics: a revoke writes back under reason revoke,
// unmount under flush; file data is counted once written, and nothing is
// left in flight after fsync.
func TestWriteBackAndDataMetrics(t *testing.T) {
	ctx := context.Background()
	fs := openWithRegistry(t, formatted(t), "a", prometheus.NewRegistry())
	f, err := fs.Create(ctx, RootIno, "f", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("x"), 64<<10) // leaves the inode: written to the extent
	if _, err := fs.Write(ctx, f.Ino, 0, data, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := fs.Fsync(ctx, f.Ino, false); err != nil {
		t.Fatal(err)
	}
	s := fs.stats
	if got := testutil.ToFloat64(s.dataBytes); got < float64(len(data)) {
		t.Errorf("data bytes %v, wrote %d", got, len(data))
	}
	if got := testutil.ToFloat64(s.dataInflight); got != 0 {
		t.Errorf("data in flight after fsync: %v", got)
	}
	if err := fs.Revoke(ctx, "v", inodeLock(f.Ino), lock.None); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(s.wbBlocks[wbRevoke]); got == 0 {
		t.Error("revoke of a dirty inode's lock wrote back no block")
	}
	if n, _ := histogram(t, s.wbSeconds[wbRevoke]); n != 1 {
		t.Errorf("%d revoke write-backs timed, want 1", n)
	}
	if _, err := fs.Mkdir(ctx, RootIno, "d", 0o755, Caller{}); err != nil {
		t.Fatal(err)
	}
	if err := fs.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(s.wbBlocks[wbFlush]); got == 0 {
		t.Error("unmount wrote back no block under reason flush")
	}
}

// TestOrphanMetric: an unlinked file still open is freed at its last
// Release, and counted then.
func TestOrphanMetric(t *testing.T) {
	ctx := context.Background()
	fs := openWithRegistry(t, formatted(t), "a", prometheus.NewRegistry())
	defer fs.Close(ctx)
	f, err := fs.Create(ctx, RootIno, "f", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Open(ctx, f.Ino, f.Gen); err != nil {
		t.Fatal(err)
	}
	if err := fs.Unlink(ctx, RootIno, "f"); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(fs.stats.orphansFreed); got != 0 {
		t.Fatalf("orphans freed while open: %v", got)
	}
	fs.Release(ctx, f.Ino)
	if got := testutil.ToFloat64(fs.stats.orphansFreed); got != 1 {
		t.Errorf("orphans freed after the last release: %v, want 1", got)
	}
}

// TestRecoveryMetrics: RecoverLog counts the recovery, its time and the
// blocks it rewrote; a failed one counts as a failure.
func TestRecoveryMetrics(t *testing.T) {
	ctx := context.Background()
	dev := formatted(t)
	a := openWithRegistry(t, dev, "a", prometheus.NewRegistry())
	for i := range 10 {
		if _, err := a.Mkdir(ctx, RootIno, fmt.Sprintf("dir-%d", i), 0o755, Caller{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	a.Halt()
	reg := prometheus.NewRegistry()
	opts := RecoverOptions{Volume: "v", Registerer: reg}
	if err := RecoverLog(ctx, dev, "a", 1, opts); err != nil {
		t.Fatal(err)
	}
	st := newStats(reg, "v") // the same series, from the registry
	if got := testutil.ToFloat64(st.recoveries); got != 1 {
		t.Errorf("recoveries %v, want 1", got)
	}
	if n, _ := histogram(t, st.recoverySeconds); n != 1 {
		t.Errorf("%d recoveries timed, want 1", n)
	}
	if got := testutil.ToFloat64(st.recoveryBlocks); got == 0 {
		t.Error("recovery rewrote no block")
	}
	if err := RecoverLog(ctx, fstest.NewMemDevice(), "a", 1, opts); err == nil {
		t.Fatal("recovery on an unformatted device succeeded")
	}
	if got := testutil.ToFloat64(st.recoveryFailures); got != 1 {
		t.Errorf("recovery failures %v, want 1", got)
	}
}
