package filesys

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumeria-fs/plumeria/filesys/redo"
	"github.com/plumeria-fs/plumeria/internal/prom"
)

// Metrics of a file system node (docs/operations.md, Metrics), label
// volume. File systems of one process that use the same registry add to
// the same series. The redo log knows no Prometheus: it reports each write
// through redo.Options.AfterWrite and these turn it into metrics.
var (
	// latencyBuckets: a log or block write is one replicated volume write
	// (hundreds of µs) or waits through a failover (seconds); a commit
	// nobody waits for takes up to FlushInterval/4 to be written.
	latencyBuckets  = prometheus.ExponentialBuckets(0.0001, 2, 18) // 100 µs .. 13 s
	batchBuckets    = prometheus.ExponentialBuckets(1, 2, 12)      // 1 .. 2048 records
	recoveryBuckets = prometheus.ExponentialBuckets(0.01, 2, 14)   // 10 ms .. 82 s

	logCommitOpts = prometheus.HistogramOpts{Name: "plumeria_fs_log_commit_seconds", Buckets: latencyBuckets,
		Help: "Time from a transaction's append to the redo log until its record was durable (group commit included)."}
	logWriteOpts = prometheus.HistogramOpts{Name: "plumeria_fs_log_write_seconds", Buckets: latencyBuckets,
		Help: "Time each write of a batch (or marker) to the redo log took on the volume."}
	logBatchOpts = prometheus.HistogramOpts{Name: "plumeria_fs_log_batch_records", Buckets: batchBuckets,
		Help: "Records per batch written to the redo log: the batching factor of group commit (markers not counted)."}
	logBytesOpts = prometheus.CounterOpts{Name: "plumeria_fs_log_bytes_total",
		Help: "Bytes written to the redo log, markers included."}
	writeBackOpts = prometheus.HistogramOpts{Name: "plumeria_fs_writeback_seconds", Buckets: latencyBuckets,
		Help: "Time write-backs of dirty metadata blocks took (waiting for their log records, then writing in place), by reason."}
	writeBackBlocksOpts = prometheus.CounterOpts{Name: "plumeria_fs_writeback_blocks_total",
		Help: "Metadata blocks written in place, by reason: revoke (another node wants the lock) or flush (periodic, log pressure, unmount)."}
	orphansFreedOpts = prometheus.CounterOpts{Name: "plumeria_fs_orphans_freed_total",
		Help: "Unlinked files freed at their last close (or at unmount) instead of at unlink."}
	orphansQueuedOpts = prometheus.GaugeOpts{Name: "plumeria_fs_orphans_queued",
		Help: "Unlinked files the kernel forgot, queued to be freed in batches (freer.go)."}
	orphansWaitingOpts = prometheus.GaugeOpts{Name: "plumeria_fs_orphans_open_elsewhere",
		Help: "Unlinked files this node removed that another node still has open: freed when it closes them (iopen.go)."}
	dataInflightOpts = prometheus.GaugeOpts{Name: "plumeria_fs_data_inflight_bytes",
		Help: "File data written behind: accepted by write() and not yet on the volume."}
	dataBytesOpts = prometheus.CounterOpts{Name: "plumeria_fs_data_write_bytes_total",
		Help: "File data bytes written to the volume."}
	dataErrorsOpts = prometheus.CounterOpts{Name: "plumeria_fs_data_write_errors_total",
		Help: "File data writes to the volume that failed (fsync reports them)."}
	recoveriesOpts = prometheus.CounterOpts{Name: "plumeria_fs_recoveries_total",
		Help: "Recoveries of dead nodes' logs this node finished (RecoverLog)."}
	recoveryFailuresOpts = prometheus.CounterOpts{Name: "plumeria_fs_recovery_failures_total",
		Help: "Recoveries of dead nodes' logs that failed (the lock service asks again)."}
	recoverySecondsOpts = prometheus.HistogramOpts{Name: "plumeria_fs_recovery_seconds", Buckets: recoveryBuckets,
		Help: "Time recoveries of dead nodes' logs took, replay and freeing the slots."}
	recoveryBlocksOpts = prometheus.CounterOpts{Name: "plumeria_fs_recovery_blocks_total",
		Help: "Metadata blocks rewritten by replaying dead nodes' logs."}
	pageHitsOpts = prometheus.CounterOpts{Name: "plumeria_fs_data_cache_hits_total",
		Help: "File data pages (64 KiB) reads found in the fs node's data cache."}
	pageMissesOpts = prometheus.CounterOpts{Name: "plumeria_fs_data_cache_misses_total",
		Help: "File data pages (64 KiB) reads had to read from the volume."}
	pageStreamedOpts = prometheus.CounterOpts{Name: "plumeria_fs_data_cache_streamed_bytes_total",
		Help: "File data read straight into the reader's buffer, not cached here: runs of 256 KiB or more (the kernel's read-ahead; its page cache holds them)."}
	pageBytesOpts = prometheus.GaugeOpts{Name: "plumeria_fs_data_cache_bytes",
		Help: "Bytes of clean file data the fs node caches (bounded by --data-cache)."}
)

// Write-back reasons, the label values of the writeback series.
type wbReason int

const (
	wbRevoke wbReason = iota
	wbFlush
)

var wbReasons = [...]string{wbRevoke: "revoke", wbFlush: "flush"}

// stats are one FS's handles on its volume's series, and the state that
// times commits: the append time of each record not yet durable.
type stats struct {
	logCommit, logWrite, logBatch prometheus.Observer
	logBytes                      prometheus.Counter
	wbSeconds                     [2]prometheus.Observer
	wbBlocks                      [2]prometheus.Counter
	orphansFreed                  prometheus.Counter
	orphansWaiting, orphansQueued prometheus.Gauge
	dataInflight                  prometheus.Gauge
	dataBytes, dataErrors         prometheus.Counter
	recoveries, recoveryFailures  prometheus.Counter
	recoverySeconds               prometheus.Observer
	recoveryBlocks                prometheus.Counter
	pageHits, pageMisses          prometheus.Counter
	streamed                      prometheus.Counter // readPages: streams not cached
	pageBytes                     prometheus.Gauge
	quotaGrows, quotaRefused      prometheus.Counter // quota.go

	writeStart time.Time // the log's writer goroutine only: BeforeWrite to AfterWrite

	mu struct {
		sync.Mutex
		appended map[redo.LSN]time.Time // records appended, not yet durable
		durable  redo.LSN               // highest LSN AfterWrite reported
	}
}

func newStats(r prometheus.Registerer, volume string) *stats {
	hist := func(o prometheus.HistogramOpts) prometheus.Observer {
		return prom.Shared(r, prometheus.NewHistogramVec(o, []string{"volume"})).WithLabelValues(volume)
	}
	counter := func(o prometheus.CounterOpts) prometheus.Counter {
		return prom.Shared(r, prometheus.NewCounterVec(o, []string{"volume"})).WithLabelValues(volume)
	}
	s := &stats{
		logCommit: hist(logCommitOpts), logWrite: hist(logWriteOpts), logBatch: hist(logBatchOpts),
		logBytes:       counter(logBytesOpts),
		orphansFreed:   counter(orphansFreedOpts),
		orphansWaiting: prom.Shared(r, prometheus.NewGaugeVec(orphansWaitingOpts, []string{"volume"})).WithLabelValues(volume),
		orphansQueued:  prom.Shared(r, prometheus.NewGaugeVec(orphansQueuedOpts, []string{"volume"})).WithLabelValues(volume),
		dataInflight:   prom.Shared(r, prometheus.NewGaugeVec(dataInflightOpts, []string{"volume"})).WithLabelValues(volume),
		dataBytes:      counter(dataBytesOpts), dataErrors: counter(dataErrorsOpts),
		recoveries: counter(recoveriesOpts), recoveryFailures: counter(recoveryFailuresOpts),
		recoverySeconds: hist(recoverySecondsOpts), recoveryBlocks: counter(recoveryBlocksOpts),
		pageHits: counter(pageHitsOpts), pageMisses: counter(pageMissesOpts), streamed: counter(pageStreamedOpts),
		pageBytes:  prom.Shared(r, prometheus.NewGaugeVec(pageBytesOpts, []string{"volume"})).WithLabelValues(volume),
		quotaGrows: counter(quotaGrowsOpts), quotaRefused: counter(quotaRefusedOpts),
	}
	wbs := prom.Shared(r, prometheus.NewHistogramVec(writeBackOpts, []string{"volume", "reason"}))
	wbb := prom.Shared(r, prometheus.NewCounterVec(writeBackBlocksOpts, []string{"volume", "reason"}))
	for i, reason := range wbReasons {
		s.wbSeconds[i] = wbs.WithLabelValues(volume, reason)
		s.wbBlocks[i] = wbb.WithLabelValues(volume, reason)
	}
	s.mu.appended = map[redo.LSN]time.Time{}
	return s
}

// appended notes that record lsn, appended at start, waits to be durable.
// The log may have written it already (AfterWrite ran before Append
// returned to the caller): then it counts as durable now.
func (s *stats) appended(lsn redo.LSN, start time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if lsn <= s.mu.durable {
		s.logCommit.Observe(time.Since(start).Seconds())
		return
	}
	s.mu.appended[lsn] = start
}

// beforeWrite and afterWrite run on the log's writer goroutine around
// each write (redo.Options).
func (s *stats) beforeWrite() { s.writeStart = time.Now() }

func (s *stats) afterWrite(w redo.Written) {
	now := time.Now()
	s.logWrite.Observe(now.Sub(s.writeStart).Seconds())
	s.logBytes.Add(float64(w.Bytes))
	if w.Records == 0 {
		return
	}
	s.logBatch.Observe(float64(w.Records))
	s.mu.Lock()
	defer s.mu.Unlock()
	for lsn := w.First; lsn <= w.Last; lsn++ {
		if t, ok := s.mu.appended[lsn]; ok {
			s.logCommit.Observe(now.Sub(t).Seconds())
			delete(s.mu.appended, lsn)
		}
	}
	s.mu.durable = max(s.mu.durable, w.Last)
}

// wroteBack records a write-back of n blocks that began at start.
func (s *stats) wroteBack(reason wbReason, n int, start time.Time) {
	s.wbSeconds[reason].Observe(time.Since(start).Seconds())
	s.wbBlocks[reason].Add(float64(n))
}
