package fuse

import (
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/plumeria-fs/plumeria/internal/prom"
)

// opBuckets span a cached getattr (µs) to an operation that waited for a
// lock held by a node that then died (tens of seconds).
var opBuckets = prometheus.ExponentialBuckets(0.00001, 4, 12) // 10 µs .. 42 s

// The adapter's metrics (docs/operations.md, Metrics). Mounts of one
// process that use the same registry add to the same series.
var (
	opSecondsOpts = prometheus.HistogramOpts{Name: "plumeria_fuse_op_seconds", Buckets: opBuckets,
		Help: "Time FUSE operations took in the adapter, from the request to the reply, by op (failed ones too)."}
	opErrorsOpts = prometheus.CounterOpts{Name: "plumeria_fuse_op_errors_total",
		Help: "FUSE operations answered with an error, by op and errno (ENOENT from lookup is routine)."}
)

type stats struct {
	seconds *prometheus.HistogramVec
	errors  *prometheus.CounterVec
}

func newStats(r prometheus.Registerer) *stats {
	return &stats{
		seconds: prom.Shared(r, prometheus.NewHistogramVec(opSecondsOpts, []string{"op"})),
		errors:  prom.Shared(r, prometheus.NewCounterVec(opErrorsOpts, []string{"op", "errno"})),
	}
}

// done records operation op, begun at start, answered with *en. Each
// operation defers it first thing, with its named errno result:
//
//	defer n.m.stats.done("lookup", time.Now(), &en)
func (s *stats) done(op string, start time.Time, en *syscall.Errno) {
	s.seconds.WithLabelValues(op).Observe(time.Since(start).Seconds())
	e := *en
	if e == 0 || e == syscall.ERANGE && (op == "getxattr" || op == "listxattr") {
		return // ERANGE there answers a size probe (see Getxattr)
	}
	s.errors.WithLabelValues(op, errnoName(e)).Inc()
}

// errnoName is the errno's symbolic name ("ENOENT"), or its number.
func errnoName(e syscall.Errno) string {
	if name := unix.ErrnoName(e); name != "" {
		return name
	}
	return strconv.Itoa(int(e))
}
