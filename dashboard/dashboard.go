// Package dashboard is the web page every coordinator serves at / on its
// HTTP port (--metrics-listen): the cluster map with brick states and
// failure domains, capacity, degraded data and rebuild progress,
// throughput and latency charts of the last minutes, fs node sessions and
// recoveries, and the coordinators. The page is plain HTML, CSS and
// JavaScript embedded in the binary (no external resources); it polls the
// JSON endpoints below every second and redraws.
//
//	GET /             the page (assets under /assets/)
//	GET /api/status   the leader's status, as `plumeria status --json` prints it (docs/status-json.md)
//	GET /api/view     the status with every state decided, as the page draws it (View)
//	GET /api/series   the samples of the last Window, oldest first ([]Sample)
//
// A sampler (Run) fetches the status every Interval and keeps the samples
// in memory, so the charts start empty when the coordinator starts. The
// dashboard reads only: it changes nothing in the cluster.
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/plumeria-fs/plumeria/coord"
)

//go:embed assets
var assets embed.FS

const (
	intervalDefault = 2 * time.Second
	windowDefault   = 10 * time.Minute
	statusTimeout   = 3 * time.Second // one status fetch
)

// StatusFunc returns the cluster status as `plumeria status --json`
// prints it (coord.Server.Status answers it, forwarding to the leader).
type StatusFunc func(ctx context.Context) ([]byte, error)

// Config configures a dashboard.
type Config struct {
	Status   StatusFunc
	Interval time.Duration // between samples; 0: 2 s
	Window   time.Duration // history kept for the charts; 0: 10 min
	Logger   *slog.Logger
}

// Dashboard serves the page and its data; see the package doc.
type Dashboard struct {
	cfg Config
	mux *http.ServeMux
	mu  struct {
		sync.Mutex
		ring      *ring
		prev      *coord.Status // status of the newest sample
		prevAt    time.Time
		rebuild   rebuild
		rebuildV  RebuildView
		firstSeen map[sessionKey]time.Time // sessions in the map → first seen
	}
}

// New returns a dashboard; call Run to sample and serve it as an http.Handler.
func New(cfg Config) *Dashboard {
	if cfg.Interval <= 0 {
		cfg.Interval = intervalDefault
	}
	if cfg.Window <= 0 {
		cfg.Window = windowDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d := &Dashboard{cfg: cfg, mux: http.NewServeMux()}
	d.mu.ring = newRing(int(cfg.Window / cfg.Interval))
	d.mu.firstSeen = map[sessionKey]time.Time{}
	d.mu.rebuildV = RebuildView{Progress: 1}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	d.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, sub, "index.html")
	})
	d.mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(sub)))
	d.mux.HandleFunc("GET /api/status", d.serveStatus)
	d.mux.HandleFunc("GET /api/view", d.serveView)
	d.mux.HandleFunc("GET /api/series", d.serveSeries)
	return d
}

// ServeHTTP serves the page and the API.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) { d.mux.ServeHTTP(w, r) }

// Run samples the status every Interval until ctx ends.
func (d *Dashboard) Run(ctx context.Context) {
	t := time.NewTicker(d.cfg.Interval)
	defer t.Stop()
	for {
		if err := d.sample(ctx, time.Now()); err != nil && ctx.Err() == nil {
			d.cfg.Logger.Debug("dashboard: sample", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sample fetches the status and records the interval since the last one.
// A failed fetch records nothing: the charts show a gap.
func (d *Dashboard) sample(ctx context.Context, now time.Time) error {
	st, _, err := d.status(ctx)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := takeSample(d.mu.prev, d.mu.prevAt, st, now)
	d.mu.ring.add(s)
	d.mu.prev, d.mu.prevAt = st, now
	d.mu.rebuildV = d.mu.rebuild.observe(s)
	d.observeSessionsLocked(st, now)
	return nil
}

func (d *Dashboard) observeSessionsLocked(st *coord.Status, now time.Time) {
	live := make(map[sessionKey]bool, len(st.Sessions))
	for _, s := range st.Sessions {
		k := sessionKey{s.Clerk, s.Session}
		live[k] = true
		if _, ok := d.mu.firstSeen[k]; !ok {
			d.mu.firstSeen[k] = now
		}
	}
	for k := range d.mu.firstSeen {
		if !live[k] {
			delete(d.mu.firstSeen, k)
		}
	}
}

func (d *Dashboard) status(ctx context.Context) (*coord.Status, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	raw, err := d.cfg.Status(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("status: %w", err)
	}
	var st coord.Status
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, nil, fmt.Errorf("status: unreadable: %w", err)
	}
	return &st, raw, nil
}

func (d *Dashboard) serveStatus(w http.ResponseWriter, r *http.Request) {
	_, raw, err := d.status(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(append(raw, '\n'))
}

func (d *Dashboard) serveView(w http.ResponseWriter, r *http.Request) {
	st, _, err := d.status(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	now := time.Now()
	d.mu.Lock()
	d.observeSessionsLocked(st, now)
	v := buildView(st, d.mu.firstSeen, d.mu.rebuildV, now)
	v.Latest = d.mu.ring.latest()
	d.mu.Unlock()
	v.Series = &SeriesReference{URL: "api/series", IntervalMs: d.cfg.Interval.Milliseconds(), WindowMs: d.cfg.Window.Milliseconds()}
	writeJSON(w, http.StatusOK, v)
}

func (d *Dashboard) serveSeries(w http.ResponseWriter, _ *http.Request) {
	d.mu.Lock()
	s := d.mu.ring.samples()
	d.mu.Unlock()
	writeJSON(w, http.StatusOK, s)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// writeError answers 503: the coordinator could not get the status (no
// leader yet, or the leader did not answer); the page says so and retries.
func writeError(w http.ResponseWriter, err error) {
	writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
}
