package brick

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// brickMemory reports the index memory of every brick running in this
// process (a `plumeria up` runs three), one series per brick and kind.
type brickMemory struct {
	mu      sync.Mutex
	servers map[*Server]bool
	desc    *prometheus.Desc
}

var memory = &brickMemory{servers: map[*Server]bool{}, desc: prometheus.NewDesc("plumeria_brick_index_memory_bytes",
	"Memory of a brick store's index: kind cache (pebble's block cache, at most 64 MiB per brick) or memtables.",
	[]string{"brick", "kind"}, nil)}

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

func (c *brickMemory) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

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
	}
}
