package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/plumeria-fs/plumeria/dashboard"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/internal/pki"
)

// httpTLS returns the TLS configuration of an HTTP port (metrics,
// dashboard, pprof) when the process has an identity, nil when it runs
// insecure. The port presents the process's certificate and requires a
// client certificate of the cluster CA (any role: Prometheus and a
// browser get one issued, e.g. the admin's), unless insecureClients: then
// it is TLS without client authentication (`--metrics-insecure`, for a
// scraper that has no certificate).
func httpTLS(insecureClients bool) *tls.Config {
	id := pki.Default()
	if id == nil {
		return nil
	}
	cfg := id.ServerConfig()
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	if insecureClients {
		cfg.ClientAuth = tls.NoClientCert
	}
	return cfg
}

// serveHTTP serves srv on ln, over TLS when cfg is not nil. Handshakes
// are bounded by srv.ReadHeaderTimeout.
func serveHTTP(srv *http.Server, ln net.Listener, cfg *tls.Config) {
	if cfg == nil {
		_ = srv.Serve(ln)
		return
	}
	srv.TLSConfig = cfg
	_ = srv.ServeTLS(ln, "", "") // the certificate comes from cfg.GetCertificate
}

// httpServer is the node's HTTP port (Config.MetricsListen): Prometheus
// /metrics always, and on a coordinator the dashboard at / with its
// sampler (package dashboard).
type httpServer struct {
	srv         *http.Server
	stopSampler context.CancelFunc
	done        chan struct{} // closed when the sampler has returned
}

// startHTTP serves the node's HTTP port, if one is configured.
func (n *Node) startHTTP() error {
	if n.cfg.MetricsListen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", n.cfg.MetricsListen)
	if err != nil {
		return fmt.Errorf("server: metrics listen on %s: %w", n.cfg.MetricsListen, err)
	}
	h := &httpServer{}
	m := http.NewServeMux()
	m.Handle("/metrics", promhttp.Handler())
	handleProfiles(m)
	if c := n.coord; c != nil {
		d := dashboard.New(dashboard.Config{Logger: n.cfg.Logger, Status: func(ctx context.Context) ([]byte, error) {
			r, err := c.Status(ctx, &pb.StatusRequest{})
			if err != nil {
				return nil, err
			}
			return r.StatusJson, nil
		}})
		m.Handle("/", d)
		ctx, cancel := context.WithCancel(context.Background())
		h.stopSampler, h.done = cancel, make(chan struct{})
		go func() {
			defer close(h.done)
			d.Run(ctx)
		}()
	}
	h.srv = &http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second}
	go serveHTTP(h.srv, ln, httpTLS(n.cfg.MetricsInsecure))
	n.http = h
	return nil
}

// Close stops serving and waits for the sampler to return.
func (h *httpServer) Close() error {
	err := h.srv.Close()
	if h.stopSampler != nil {
		h.stopSampler()
		<-h.done
	}
	return err
}

// MetricsServer serves Prometheus /metrics (the default registry) for a
// process with no server role: `plumeria mount --metrics-listen`.
type MetricsServer struct {
	srv *http.Server
	ln  net.Listener
}

// ServeMetrics serves /metrics on listen (HOST:PORT; port 0 picks one)
// until Close: over TLS when the process has an identity (pki.Default),
// requiring a client certificate unless insecureClients.
func ServeMetrics(listen string, insecureClients bool) (*MetricsServer, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("metrics listen on %s: %w", listen, err)
	}
	m := http.NewServeMux()
	m.Handle("/metrics", promhttp.Handler())
	handleProfiles(m)
	s := &MetricsServer{srv: &http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second}, ln: ln}
	go serveHTTP(s.srv, ln, httpTLS(insecureClients))
	return s, nil
}

// handleProfiles serves Go's profiles (CPU, heap, block, mutex, goroutines)
// under /debug/pprof/ next to /metrics: `go tool pprof
// http://HOST:PORT/debug/pprof/profile?seconds=30`. Block and mutex
// profiles sample only after SetBlockProfileRate / SetMutexProfileFraction
// (PLUMERIA_PROFILE_RATES=1 in the environment turns both on at start).
func handleProfiles(m *http.ServeMux) {
	m.HandleFunc("/debug/pprof/", pprof.Index)
	m.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	m.HandleFunc("/debug/pprof/profile", pprof.Profile)
	m.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	m.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

func init() {
	if os.Getenv("PLUMERIA_PROFILE_RATES") == "1" {
		runtime.SetBlockProfileRate(10000) // one sample per 10 µs blocked
		runtime.SetMutexProfileFraction(10)
	}
}

// Addr is the address served.
func (s *MetricsServer) Addr() string { return s.ln.Addr().String() }

// Close stops serving.
func (s *MetricsServer) Close() error { return s.srv.Close() }
