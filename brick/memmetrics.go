package brick

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// brickMemory reports the index memory of every brick running in this
// process (a `plumeria up` runs three), one series per brick and kind, and
// each store's group commits (count, batches, time).
type brickMemory struct {
	mu                          sync.Mutex
	servers                     map[*Server]bool
	desc                        *prometheus.Desc
	commits, batches, commitSec *prometheus.Desc
	zeroed                      *prometheus.Desc
	requests                    *prometheus.Desc
}

var memory = &brickMemory{servers: map[*Server]bool{}, desc: prometheus.NewDesc("plumeria_brick_index_memory_bytes",
	"Memory of a brick store's index: kind cache (pebble's block cache, at most 64 MiB per brick) or memtables.",
	[]string{"brick", "kind"}, nil),
	commits: prometheus.NewDesc("plumeria_brick_store_commits_total",
		"Group commits of a brick's store (one segment write and fsync each).", []string{"brick"}, nil),
	batches: prometheus.NewDesc("plumeria_brick_store_batches_total",
		"Batches (a request's changes) a brick's store committed: batches/commits is its batching factor.", []string{"brick"}, nil),
	commitSec: prometheus.NewDesc("plumeria_brick_store_commit_seconds_total",
		"Time a brick's store spent writing and fsyncing group commits.", []string{"brick"}, nil),
	zeroed: prometheus.NewDesc("plumeria_brick_store_zeroed_bytes_total",
		"Zeros a brick's store wrote ahead of its small commits, so their fdatasync flushes data only (brick/store/zero.go).", []string{"brick"}, nil),
	requests: prometheus.NewDesc("plumeria_brick_requests_inflight",
		"Requests a brick is serving, by kind: write (client writes and decommits), read, replicate (changes and backfill batches from primaries). Each holds its data; a client connection carries at most limits.RPCStreamsPerConnMax at once.",
		[]string{"brick", "kind"}, nil),
}

// Kinds of requests counted in plumeria_brick_requests_inflight.
const (
	kindWrite = iota
	kindRead
	kindReplicate
	kinds
)

var kindNames = [kinds]string{"write", "read", "replicate"}

// inflight counts the requests a brick serves, by kind.
type inflight [kinds]atomic.Int64

// enter counts a request of kind k until the returned function runs.
func (f *inflight) enter(k int) func() {
	f[k].Add(1)
	return func() { f[k].Add(-1) }
}

func init() { prometheus.MustRegister(memory) }

func (c *brickMemory) add(s *Server) {
	c.mu.Lock()
	c.servers[s] = true
	c.mu.Unlock()
}

func (c *brickMemory) remove(s *Server) {
	c.mu.Lock()
	delete(c.servers, s)
	c.mu.Unlock()
}

func (c *brickMemory) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.desc
	ch <- c.commits
	ch <- c.batches
	ch <- c.commitSec
	ch <- c.zeroed
	ch <- c.requests
}

func (c *brickMemory) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[string]bool{} // tests may run two bricks of one name
	for s := range c.servers {
		if seen[s.cfg.Name] {
			continue
		}
		seen[s.cfg.Name] = true
		cache, mem := s.store.IndexMemory()
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(cache), s.cfg.Name, "cache")
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(mem), s.cfg.Name, "memtables")
		st := s.store.Stats()
		ch <- prometheus.MustNewConstMetric(c.commits, prometheus.CounterValue, float64(st.Commits), s.cfg.Name)
		ch <- prometheus.MustNewConstMetric(c.batches, prometheus.CounterValue, float64(st.Batches), s.cfg.Name)
		ch <- prometheus.MustNewConstMetric(c.zeroed, prometheus.CounterValue, float64(st.ZeroedBytes), s.cfg.Name)
		ch <- prometheus.MustNewConstMetric(c.commitSec, prometheus.CounterValue, st.CommitTime.Seconds(), s.cfg.Name)
		for k := range kinds {
			ch <- prometheus.MustNewConstMetric(c.requests, prometheus.GaugeValue, float64(s.inflight[k].Load()), s.cfg.Name, kindNames[k])
		}
	}
}
