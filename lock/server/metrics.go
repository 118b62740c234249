package server

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumeria-fs/plumeria/lock"
)

// stats are a server's metrics: the core's counters, copied by the loop
// after each iteration, and the I/O layer's own. It is a
// prometheus.Collector whose every series carries the label server=ID, so
// several servers can share one registry.
type stats struct {
	descs     []*prometheus.Desc // in the order of coreValues, then the I/O series
	wait      *prometheus.Desc   // the histogram of waits
	tick      time.Duration      // the core's tick, to turn wait ticks into seconds
	streams   atomic.Int64       // clerk streams the loop knows
	groups    atomic.Int64       // groups in the last assignment
	dropped   atomic.Uint64      // messages with no stream or a full outbox
	malformed atomic.Uint64      // frames that failed to decode
	mu        struct {
		sync.Mutex
		core lock.Metrics
	}
}

var coreSeries = []struct{ name, help string }{
	{"plumeria_lock_grants_total", "Locks granted (resends not counted)."},
	{"plumeria_lock_revokes_total", "Revokes sent (resends not counted)."},
	{"plumeria_lock_waits_total", "Requests that could not be granted at once."},
	{"plumeria_lock_lease_renewals_total", "Clerk lease renewals received."},
	{"plumeria_lock_lease_expirations_total", "Clerk sessions whose lease ran out here."},
	{"plumeria_lock_recoveries_total", "Recoveries of dead clerks' logs started."},
	{"plumeria_lock_recoveries_done_total", "Recoveries a clerk reported done."},
	{"plumeria_lock_rejects_total", "Requests refused for a limit."},
}

func coreValues(m lock.Metrics) []uint64 {
	return []uint64{m.Grants, m.Revokes, m.Waits, m.Renewals, m.Expirations, m.Recoveries,
		m.RecoveriesDone, m.Rejects}
}

var ioSeries = []struct {
	name, help string
	kind       prometheus.ValueType
}{
	{"plumeria_lock_clerk_streams", "Clerk session streams connected.", prometheus.GaugeValue},
	{"plumeria_lock_groups_owned", "Lock groups in this server's last assignment.", prometheus.GaugeValue},
	{"plumeria_lock_messages_dropped_total", "Messages to clerks dropped: no stream or a full outbox.", prometheus.CounterValue},
	{"plumeria_lock_frames_malformed_total", "Frames from clerks that failed to decode.", prometheus.CounterValue},
}

// The histogram of the time granted requests waited at this server, made
// from the core's tick counts (lock.Metrics.WaitTicks).
const (
	waitName = "plumeria_lock_wait_seconds"
	waitHelp = "Time granted requests waited at the lock server, from arrival to grant, at tick resolution (0: at once)."
)

func newStats(server string, tick time.Duration) *stats {
	s := &stats{tick: tick}
	labels := prometheus.Labels{"server": server}
	for _, c := range coreSeries {
		s.descs = append(s.descs, prometheus.NewDesc(c.name, c.help, nil, labels))
	}
	for _, c := range ioSeries {
		s.descs = append(s.descs, prometheus.NewDesc(c.name, c.help, nil, labels))
	}
	s.wait = prometheus.NewDesc(waitName, waitHelp, nil, labels)
	return s
}

// register adds s to r. A collector of a server with the same ID (an
// earlier incarnation in this process) is replaced.
func (s *stats) register(r prometheus.Registerer) error {
	err := r.Register(s)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		r.Unregister(are.ExistingCollector)
		err = r.Register(s)
	}
	return err
}

func (s *stats) setCore(m lock.Metrics) {
	s.mu.Lock()
	s.mu.core = m
	s.mu.Unlock()
}

func (s *stats) core() lock.Metrics {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.core
}

// Describe implements prometheus.Collector.
func (s *stats) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range s.descs {
		ch <- d
	}
	ch <- s.wait
}

// Collect implements prometheus.Collector.
func (s *stats) Collect(ch chan<- prometheus.Metric) {
	core := s.core()
	for i, v := range coreValues(core) {
		ch <- prometheus.MustNewConstMetric(s.descs[i], prometheus.CounterValue, float64(v))
	}
	io := []float64{float64(s.streams.Load()), float64(s.groups.Load()), float64(s.dropped.Load()),
		float64(s.malformed.Load())}
	for i, v := range io {
		ch <- prometheus.MustNewConstMetric(s.descs[len(coreSeries)+i], ioSeries[i].kind, v)
	}
	ch <- s.waitHistogram(core)
}

// waitHistogram turns the core's tick histogram into seconds.
func (s *stats) waitHistogram(m lock.Metrics) prometheus.Metric {
	buckets := make(map[float64]uint64, len(lock.WaitBucketTicks))
	var count uint64
	for i, bound := range lock.WaitBucketTicks {
		count += m.WaitTicks[i]
		buckets[(time.Duration(bound) * s.tick).Seconds()] = count
	}
	count += m.WaitTicks[len(lock.WaitBucketTicks)]
	sum := (time.Duration(m.WaitTicksSum) * s.tick).Seconds()
	return prometheus.MustNewConstHistogram(s.wait, count, sum, buckets)
}
