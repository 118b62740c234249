package clerk

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumeria-fs/plumeria/lock"
)

// stats are a clerk's metrics: the core's counters, read under the mutex
// at each scrape, and the histogram of Acquire waits. It is a
// prometheus.Collector whose every series carries the label clerk=ID, so
// several clerks can share one registry.
type stats struct {
	descs []*prometheus.Desc // in the order of coreSeries, then locksHeld
	wait  prometheus.Histogram
	core  func() lock.ClerkMetrics
}

var clerkSeries = []struct{ name, help string }{
	{"plumeria_lock_clerk_requests_total", "Lock requests sent (Acquire found the lock not held well enough)."},
	{"plumeria_lock_clerk_grants_total", "Grants received."},
	{"plumeria_lock_clerk_revokes_total", "Revokes that asked the owner to flush (resends not counted)."},
	{"plumeria_lock_clerk_idle_releases_total", "Locks given back because they were unused for IdleTicks."},
	{"plumeria_lock_clerk_downgrades_total", "Voluntary downgrades from write to read."},
	{"plumeria_lock_clerk_lease_renewals_total", "Lease renewals acknowledged by a lock server."},
	{"plumeria_lock_clerk_recoveries_total", "Recoveries of dead clerks' logs this clerk was asked to run."},
	{"plumeria_lock_clerk_recoveries_done_total", "Recoveries this clerk finished."},
}

func clerkValues(m lock.ClerkMetrics) []uint64 {
	return []uint64{m.Requests, m.Grants, m.Revokes, m.IdleReleases, m.Downgrades, m.Renewals,
		m.Recoveries, m.RecoveriesDone}
}

const (
	locksHeldName = "plumeria_lock_clerk_locks_held"
	locksHeldHelp = "Locks the clerk holds now, running recoveries included."
)

// waitBuckets span a cached miss on an idle lock server (sub-millisecond)
// to a revoke that waits for a slow flush or a recovery (minutes).
var waitBuckets = prometheus.ExponentialBuckets(0.0005, 4, 10) // 0.5 ms .. 131 s

func newStats(id string, core func() lock.ClerkMetrics) *stats {
	labels := prometheus.Labels{"clerk": id}
	s := &stats{core: core, wait: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:        "plumeria_lock_clerk_acquire_wait_seconds",
		Help:        "Time Acquire calls that had to wait (not cached) took until the lock was usable.",
		Buckets:     waitBuckets,
		ConstLabels: labels,
	})}
	for _, c := range clerkSeries {
		s.descs = append(s.descs, prometheus.NewDesc(c.name, c.help, nil, labels))
	}
	s.descs = append(s.descs, prometheus.NewDesc(locksHeldName, locksHeldHelp, nil, labels))
	return s
}

// register adds s to r. A collector of a clerk with the same ID (an earlier
// session in this process) is replaced.
func (s *stats) register(r prometheus.Registerer) error {
	err := r.Register(s)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		r.Unregister(are.ExistingCollector)
		err = r.Register(s)
	}
	return err
}

// observeWait records an Acquire that started waiting at start; a zero
// start (a cached re-acquire) is not recorded.
func (s *stats) observeWait(start time.Time) {
	if !start.IsZero() {
		s.wait.Observe(time.Since(start).Seconds())
	}
}

// Describe implements prometheus.Collector.
func (s *stats) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range s.descs {
		ch <- d
	}
	s.wait.Describe(ch)
}

// Collect implements prometheus.Collector.
func (s *stats) Collect(ch chan<- prometheus.Metric) {
	m := s.core()
	for i, v := range clerkValues(m) {
		ch <- prometheus.MustNewConstMetric(s.descs[i], prometheus.CounterValue, float64(v))
	}
	ch <- prometheus.MustNewConstMetric(s.descs[len(clerkSeries)], prometheus.GaugeValue, float64(m.Held))
	s.wait.Collect(ch)
}
