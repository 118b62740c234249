package coord

import (
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumeria-fs/plumeria/clustermap"
)

// collector computes the coordinator's metrics from its current state at
// each scrape (docs/operations.md, Metrics). Every series carries the
// label coordinator=Name, so several coordinators can share one registry.
// The plumeria_coord_* series describe this coordinator; the
// plumeria_cluster_* series describe the cluster as the leader sees it
// (brick usage and chunk counts reach only the leader) and are exported by
// the leader alone, so each is counted once.
type collector struct {
	s     *Server
	descs map[string]*prometheus.Desc
}

type seriesDef struct {
	name, help string
	labels     []string
}

var coordSeries = []seriesDef{
	{"plumeria_coord_is_leader", "1 if this coordinator is the Raft leader, else 0.", nil},
	{"plumeria_coord_map_epoch", "Epoch of this coordinator's copy of the cluster map.", nil},
	{"plumeria_coord_raft_last_index", "Index of the last entry in this coordinator's Raft log.", nil},
	{"plumeria_coord_raft_applied_index", "Index of the last Raft entry this coordinator applied to its map.", nil},
	{"plumeria_coord_recoveries_recorded_total", "Recoveries of dead fs nodes' logs this coordinator recorded in the map as leader.", nil},
}

var clusterSeries = []seriesDef{
	{"plumeria_cluster_bricks", "Bricks in the map by state: up, down (no heartbeat for 4 s), draining (up and draining).", []string{"state"}},
	{"plumeria_cluster_brick_up", "1 if the brick is up, 0 if down.", []string{"brick"}},
	{"plumeria_cluster_brick_capacity_bytes", "The brick's capacity (--capacity, or its disk's free space), from its heartbeats.", []string{"brick"}},
	{"plumeria_cluster_brick_used_bytes", "Bytes of segments on the brick's disk, from its heartbeats.", []string{"brick"}},
	{"plumeria_cluster_brick_pgs", "Placement groups listing the brick.", []string{"brick"}},
	{"plumeria_cluster_pgs", "Placement groups of the volume.", []string{"volume"}},
	{"plumeria_cluster_degraded_pgs", "PGs with fewer in-sync replicas on up bricks than the volume's replica count.", []string{"volume"}},
	{"plumeria_cluster_unavailable_pgs", "PGs with no in-sync replica on an up brick: their data cannot be served.", []string{"volume"}},
	{"plumeria_cluster_syncing_pgs", "PGs with a replica being backfilled (rebuild in progress).", []string{"volume"}},
	{"plumeria_cluster_chunks", "Chunks holding data, as the bricks last counted them.", []string{"volume"}},
	{"plumeria_cluster_degraded_chunks", "Chunks in degraded PGs: what is left to rebuild.", []string{"volume"}},
	{"plumeria_cluster_coordinators", "Raft members by state: up (heard within 4 s) or down.", []string{"state"}},
	{"plumeria_cluster_lock_servers", "Lock servers by state: up or down.", []string{"state"}},
	{"plumeria_cluster_sessions", "fs node lock sessions open, or fenced and not yet recovered.", nil},
	{"plumeria_cluster_recoveries_pending", "Sessions fenced on every brick whose logs are not yet recovered (recoveries in progress).", nil},
}

func newCollector(s *Server) *collector {
	c := &collector{s: s, descs: map[string]*prometheus.Desc{}}
	labels := prometheus.Labels{"coordinator": s.cfg.Name}
	for _, d := range append(append([]seriesDef{}, coordSeries...), clusterSeries...) {
		c.descs[d.name] = prometheus.NewDesc(d.name, d.help, d.labels, labels)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(name string, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.GaugeValue, v, labels...)
	}
	s := c.s
	leader := s.raft.State() == raft.Leader
	gauge("plumeria_coord_is_leader", b2f(leader))
	gauge("plumeria_coord_map_epoch", float64(s.fsm.Map().Epoch))
	gauge("plumeria_coord_raft_last_index", float64(s.raft.LastIndex()))
	gauge("plumeria_coord_raft_applied_index", float64(s.raft.AppliedIndex()))
	ch <- prometheus.MustNewConstMetric(c.descs["plumeria_coord_recoveries_recorded_total"], prometheus.CounterValue,
		float64(s.recoveriesRecorded.Load()))
	if leader {
		c.collectCluster(s.status(time.Now()), gauge)
	}
}

func (c *collector) collectCluster(st Status, gauge func(name string, v float64, labels ...string)) {
	bricks := map[string]int{"up": 0, "down": 0, "draining": 0}
	for _, b := range st.Bricks {
		up := b.State == string(clustermap.BrickUp)
		switch {
		case !up:
			bricks["down"]++
		case b.Draining:
			bricks["draining"]++
		default:
			bricks["up"]++
		}
		gauge("plumeria_cluster_brick_up", b2f(up), b.Name)
		gauge("plumeria_cluster_brick_capacity_bytes", float64(b.CapacityBytes), b.Name)
		gauge("plumeria_cluster_brick_used_bytes", float64(b.UsedBytes), b.Name)
		gauge("plumeria_cluster_brick_pgs", float64(b.PGs), b.Name)
	}
	for state, n := range bricks {
		gauge("plumeria_cluster_bricks", float64(n), state)
	}
	for _, v := range st.Volumes {
		gauge("plumeria_cluster_pgs", float64(v.PGs), v.Name)
		gauge("plumeria_cluster_degraded_pgs", float64(v.DegradedPGs), v.Name)
		gauge("plumeria_cluster_unavailable_pgs", float64(v.UnavailablePGs), v.Name)
		gauge("plumeria_cluster_syncing_pgs", float64(v.SyncingPGs), v.Name)
		gauge("plumeria_cluster_chunks", float64(v.Chunks), v.Name)
		gauge("plumeria_cluster_degraded_chunks", float64(v.DegradedChunks), v.Name)
	}
	coords := map[string]int{"up": 0, "down": 0}
	for _, m := range st.Coordinators {
		coords[upDown(m.Up)]++
	}
	for state, n := range coords {
		gauge("plumeria_cluster_coordinators", float64(n), state)
	}
	locks := map[string]int{"up": 0, "down": 0}
	for _, l := range st.LockServers {
		locks[upDown(l.State == string(clustermap.BrickUp))]++
	}
	for state, n := range locks {
		gauge("plumeria_cluster_lock_servers", float64(n), state)
	}
	pending := 0
	for _, sess := range st.Sessions {
		if st.FencesInForce[sess.Clerk] > sess.Session {
			pending++
		}
	}
	gauge("plumeria_cluster_sessions", float64(len(st.Sessions)))
	gauge("plumeria_cluster_recoveries_pending", float64(pending))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func upDown(up bool) string {
	if up {
		return "up"
	}
	return "down"
}
