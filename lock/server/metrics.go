package server

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumeria-fs/plumeria/lock"
)

// stats are a server's metrics: the core's counters, copied by the loop
// after each iteration, and the I/O layer's own. It is a
// prometheus.Collector whose every series carries the label server=ID, so
// several servers can share one registry.
type stats struct {
	descs     []*prometheus.Desc // in the order of coreValues, then the I/O series
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

func newStats(server string) *stats {
	s := &stats{}
	labels := prometheus.Labels{"server": server}
	for _, c := range coreSeries {
		s.descs = append(s.descs, prometheus.NewDesc(c.name, c.help, nil, labels))
	}
	for _, c := range ioSeries {
		s.descs = append(s.descs, prometheus.NewDesc(c.name, c.help, nil, labels))
	}
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
}

// Collect implements prometheus.Collector.
func (s *stats) Collect(ch chan<- prometheus.Metric) {
	for i, v := range coreValues(s.core()) {
		ch <- prometheus.MustNewConstMetric(s.descs[i], prometheus.CounterValue, float64(v))
	}
	io := []float64{float64(s.streams.Load()), float64(s.groups.Load()), float64(s.dropped.Load()),
		float64(s.malformed.Load())}
	for i, v := range io {
		ch <- prometheus.MustNewConstMetric(s.descs[len(coreSeries)+i], ioSeries[i].kind, v)
	}
}
