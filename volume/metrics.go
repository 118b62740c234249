package volume

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumeria-fs/plumeria/internal/prom"
)

// latencyBuckets span a replicated write on an idle LAN (a few hundred
// µs) to one that waited through a failover (seconds).
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 2, 18) // 100 µs .. 13 s

// The client's metrics (docs/operations.md, Metrics), label volume. Every
// Volume of a process that uses one registry adds to the same series.
var (
	readSecondsOpts = prometheus.HistogramOpts{Name: "plumeria_vdisk_read_seconds", Buckets: latencyBuckets,
		Help: "Time ReadAt calls took, retries included (failed calls too; see plumeria_vdisk_errors_total)."}
	writeSecondsOpts = prometheus.HistogramOpts{Name: "plumeria_vdisk_write_seconds", Buckets: latencyBuckets,
		Help: "Time WriteAt calls took until every replica had the bytes durable, retries included."}
	decommitSecondsOpts = prometheus.HistogramOpts{Name: "plumeria_vdisk_decommit_seconds", Buckets: latencyBuckets,
		Help: "Time Decommit calls took, retries included."}
	readBytesOpts  = prometheus.CounterOpts{Name: "plumeria_vdisk_read_bytes_total", Help: "Bytes returned by ReadAt calls that succeeded."}
	writeBytesOpts = prometheus.CounterOpts{Name: "plumeria_vdisk_write_bytes_total", Help: "Bytes written by WriteAt calls that succeeded."}
	errorsOpts     = prometheus.CounterOpts{Name: "plumeria_vdisk_errors_total", Help: "ReadAt, WriteAt and Decommit calls that returned an error, by op."}
	batchOpts      = prometheus.HistogramOpts{Name: "plumeria_vdisk_write_batch_pieces", Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		Help: "Write pieces (each in one chunk) per request sent to a PG's primary: how many writes the client's group commit gathered (batch.go)."}
	retriesOpts = prometheus.CounterOpts{Name: "plumeria_vdisk_retries_total", Help: "Chunk requests sent again after a failure (failover, map change, brick unreachable)."}
)

type opKind int

const (
	opRead opKind = iota
	opWrite
	opDecommit
)

var opNames = [...]string{opRead: "read", opWrite: "write", opDecommit: "decommit"}

// stats are one Volume's handles on the shared series of its volume.
type stats struct {
	seconds [3]prometheus.Observer
	bytes   [2]prometheus.Counter // read, write
	errors  [3]prometheus.Counter
	retries prometheus.Counter
	// batchExtents: pieces per write request (batch.go).
	batchExtents prometheus.Observer
}

func newStats(r prometheus.Registerer, volume string) *stats {
	s := &stats{}
	for op, o := range []prometheus.HistogramOpts{readSecondsOpts, writeSecondsOpts, decommitSecondsOpts} {
		s.seconds[op] = prom.Shared(r, prometheus.NewHistogramVec(o, []string{"volume"})).WithLabelValues(volume)
	}
	for op, o := range []prometheus.CounterOpts{readBytesOpts, writeBytesOpts} {
		s.bytes[op] = prom.Shared(r, prometheus.NewCounterVec(o, []string{"volume"})).WithLabelValues(volume)
	}
	errs := prom.Shared(r, prometheus.NewCounterVec(errorsOpts, []string{"volume", "op"}))
	for op, name := range opNames {
		s.errors[op] = errs.WithLabelValues(volume, name)
	}
	s.batchExtents = prom.Shared(r, prometheus.NewHistogramVec(batchOpts, []string{"volume"})).WithLabelValues(volume)
	s.retries = prom.Shared(r, prometheus.NewCounterVec(retriesOpts, []string{"volume"})).WithLabelValues(volume)
	return s
}

// done records a call of op that began at start and moved n bytes; it is
// deferred with the call's named error result.
func (s *stats) done(op opKind, start time.Time, n int, err *error) {
	s.seconds[op].Observe(time.Since(start).Seconds())
	switch {
	case *err != nil:
		s.errors[op].Inc()
	case op != opDecommit:
		s.bytes[op].Add(float64(n))
	}
}
