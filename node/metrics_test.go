package node

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/volume"
)

// scrape GETs url (a /metrics) and parses the families.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := httpGet(t, url)
	if code != 200 {
		t.Fatalf("GET %s: %d", url, code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// value is the value of the gauge or counter series of fam with labels
// (name, value pairs); ok is false if there is none.
func value(fam *dto.MetricFamily, labels ...string) (float64, bool) {
	if fam == nil {
		return 0, false
	}
next:
	for _, m := range fam.Metric {
		for i := 0; i < len(labels); i += 2 {
			found := false
			for _, l := range m.Label {
				found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		}
	}
	return 0, false
}

// newMetricsCluster starts a coordinator with a lock server and an HTTP
// port (returned), two bricks b1 and b2 on hosts of their own, volume
// "fs" (2 replicas, formatted) and volume "one" (1 replica).
func newMetricsCluster(t *testing.T) (*testCluster, string) {
	tc := &testCluster{t: t, dir: t.TempDir()}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	coordHTTP := freeLoopback(t)
	c, err := Start(context.Background(), Config{Name: "c1", Listen: "127.0.0.1:0", DataDir: filepath.Join(tc.dir, "c1"),
		Coordinator: true, Lock: true, MetricsListen: coordHTTP, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	tc.coord = c
	for i := 1; i <= 2; i++ {
		tc.bricks = append(tc.bricks, tc.startBrick(i, "127.0.0.1:0"))
	}
	if tc.cl, err = coordclient.New(c.Addr()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tc.cl.Close()
		for _, b := range tc.bricks {
			if b != nil {
				b.Stop()
			}
		}
		c.Stop()
	})
	tc.createVolume("fs", 2)
	tc.createVolume("one", 1)
	v, err := volume.Open(context.Background(), tc.cl, "fs", volume.Options{Writer: "format"})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if _, err := filesys.Format(context.Background(), NewFSDevice(v), false, time.Now()); err != nil {
		t.Fatal(err)
	}
	return tc, coordHTTP
}

// TestMetrics: a volume client's series move with its calls; an
// in-process coordinator's /metrics (the default registry) and
// ServeMetrics (the port of `plumeria mount`) show the metric families of
// every role in the process; a dead brick's 1-replica PGs count as
// degraded and unavailable.
func TestMetrics(t *testing.T) {
	tc, coordHTTP := newMetricsCluster(t)
	t.Run("vdisk", func(t *testing.T) { testVdiskMetrics(t, tc) })
	t.Run("scrape", func(t *testing.T) { testScrape(t, tc, coordHTTP) })
	t.Run("dead brick", func(t *testing.T) {
		if testing.Short() {
			t.Skip("short")
		}
		testDeadBrickMetrics(t, tc, coordHTTP)
	})
}

// testVdiskMetrics: a volume client on its own registry, exact counts.
func testVdiskMetrics(t *testing.T, tc *testCluster) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	v, err := volume.Open(ctx, tc.cl, "one", volume.Options{Writer: "w", Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8192)
	for i := range 10 {
		if err := v.WriteAt(ctx, buf, uint64(i)<<20); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.ReadAt(ctx, buf, 0); err != nil {
		t.Fatal(err)
	}
	if err := v.ReadAt(ctx, buf, math.MaxUint64-10); !errors.Is(err, volume.ErrRange) {
		t.Fatalf("read past 2^64: %v", err)
	}
	if err := v.Decommit(ctx, 0, 8192); err != nil {
		t.Fatal(err)
	}
	v.Close()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	for name, want := range map[string]float64{"plumeria_vdisk_write_bytes_total": 10 * 8192, "plumeria_vdisk_read_bytes_total": 8192} {
		if got, _ := value(byName[name], "volume", "one"); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got, _ := value(byName["plumeria_vdisk_errors_total"], "volume", "one", "op", "read"); got != 1 {
		t.Errorf("read errors = %v, want 1", got)
	}
	for name, want := range map[string]uint64{"plumeria_vdisk_write_seconds": 10, "plumeria_vdisk_read_seconds": 2, "plumeria_vdisk_decommit_seconds": 1} {
		if f := byName[name]; f == nil || f.Metric[0].Histogram.GetSampleCount() != want {
			t.Errorf("%s: %v, want %d observations", name, f, want)
		}
	}
}

// testScrape mounts an fs node on the default registry, works on it, and
// scrapes both HTTP ports.
func testScrape(t *testing.T, tc *testCluster, coordHTTP string) {
	ctx := context.Background()
	n, err := MountFS(ctx, tc.cl, "fs", "n1", FSNodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := n.FS.Create(ctx, filesys.RootIno, "f", 0o644, filesys.Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.FS.Write(ctx, f.Ino, 0, make([]byte, 100<<10), 0, false); err != nil {
		t.Fatal(err)
	}
	if err := n.FS.Fsync(ctx, f.Ino, false); err != nil {
		t.Fatal(err)
	}
	ms, err := ServeMetrics("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	fsFamilies := map[string]dto.MetricType{
		"plumeria_vdisk_read_seconds":               dto.MetricType_HISTOGRAM,
		"plumeria_vdisk_write_seconds":              dto.MetricType_HISTOGRAM,
		"plumeria_vdisk_write_bytes_total":          dto.MetricType_COUNTER,
		"plumeria_fs_log_commit_seconds":            dto.MetricType_HISTOGRAM,
		"plumeria_fs_log_write_seconds":             dto.MetricType_HISTOGRAM,
		"plumeria_fs_log_batch_records":             dto.MetricType_HISTOGRAM,
		"plumeria_fs_log_bytes_total":               dto.MetricType_COUNTER,
		"plumeria_fs_data_inflight_bytes":           dto.MetricType_GAUGE,
		"plumeria_fs_data_write_bytes_total":        dto.MetricType_COUNTER,
		"plumeria_lock_clerk_requests_total":        dto.MetricType_COUNTER,
		"plumeria_lock_clerk_acquire_wait_seconds":  dto.MetricType_HISTOGRAM,
		"plumeria_lock_grants_total":                dto.MetricType_COUNTER,
		"plumeria_coord_raft_last_index":            dto.MetricType_GAUGE,
		"plumeria_cluster_brick_capacity_bytes":     dto.MetricType_GAUGE,
		"plumeria_cluster_chunks":                   dto.MetricType_GAUGE,
		"plumeria_brick_index_memory_bytes":         dto.MetricType_GAUGE,
		"plumeria_brick_store_commits_total":        dto.MetricType_COUNTER,
		"plumeria_brick_store_batches_total":        dto.MetricType_COUNTER,
		"plumeria_brick_store_commit_seconds_total": dto.MetricType_COUNTER,
		"plumeria_brick_requests_inflight":          dto.MetricType_GAUGE,
	}
	for _, url := range []string{"http://" + coordHTTP + "/metrics", "http://" + ms.Addr() + "/metrics"} {
		fams := scrape(t, url)
		for name, typ := range fsFamilies {
			if fams[name] == nil || fams[name].GetType() != typ {
				t.Errorf("%s: family %s missing or not a %v: %v", url, name, typ, fams[name])
			}
		}
		if got, _ := value(fams["plumeria_fs_data_write_bytes_total"], "volume", "fs"); got < 100<<10 {
			t.Errorf("%s: fs data bytes %v, wrote %d", url, got, 100<<10)
		}
	}
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The coordinator leads; both bricks are up; nothing degraded.
	fams := scrape(t, "http://"+coordHTTP+"/metrics")
	for _, s := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"plumeria_coord_is_leader", []string{"coordinator", "c1"}, 1},
		{"plumeria_cluster_bricks", []string{"state", "up"}, 2},
		{"plumeria_cluster_bricks", []string{"state", "down"}, 0},
		{"plumeria_cluster_pgs", []string{"volume", "one"}, 16},
		{"plumeria_cluster_degraded_pgs", []string{"volume", "one"}, 0},
		{"plumeria_cluster_degraded_pgs", []string{"volume", "fs"}, 0},
		{"plumeria_cluster_coordinators", []string{"state", "up"}, 1},
		{"plumeria_cluster_lock_servers", []string{"state", "up"}, 1},
	} {
		if got, ok := value(fams[s.name], s.labels...); !ok || got != s.want {
			t.Errorf("%s%v = %v (found %v), want %v", s.name, s.labels, got, ok, s.want)
		}
	}
}

// testDeadBrickMetrics stops b2: the 1-replica PGs it held are degraded
// and unavailable.
func testDeadBrickMetrics(t *testing.T, tc *testCluster, coordHTTP string) {
	m, err := tc.cl.Map(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	onB2 := 0
	for _, p := range m.Volume("one").PGs {
		if p.Primary() == "b2" {
			onB2++
		}
	}
	if onB2 == 0 {
		t.Fatal("no PG of volume one on b2")
	}
	tc.bricks[1].Stop()
	tc.bricks[1] = nil
	deadline := time.Now().Add(30 * time.Second)
	for {
		fams := scrape(t, "http://"+coordHTTP+"/metrics")
		down, _ := value(fams["plumeria_cluster_bricks"], "state", "down")
		deg, _ := value(fams["plumeria_cluster_degraded_pgs"], "volume", "one")
		unav, _ := value(fams["plumeria_cluster_unavailable_pgs"], "volume", "one")
		if down == 1 && deg == float64(onB2) && unav == float64(onB2) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("with b2 down: bricks down %v, volume one degraded %v, unavailable %v PGs; want 1, %d, %d", down, deg, unav, onB2, onB2)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// gathered is the value of a gauge or counter series in the default
// registry (0 if there is none).
func gathered(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	fams, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			v, _ := value(f, labels...)
			return v
		}
	}
	return 0
}
