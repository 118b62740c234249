package node

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/pki"
	"github.com/plumeria-fs/plumeria/volume"
)

// TestTLSInProcess: with a process identity (pki.SetDefault) a
// coordinator + lock server and a brick serve over mutual TLS: a volume
// is written and read back through them; the HTTP ports are HTTPS, the
// coordinator's asking for a client certificate, the brick's
// (MetricsInsecure) not. The other tests of this package run insecure
// (nil identity).
func TestTLSInProcess(t *testing.T) {
	ca, err := pki.NewCA("node-test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certs := t.TempDir()
	if err := ca.Save(certs); err != nil {
		t.Fatal(err)
	}
	id, err := pki.Load(pki.Source{CertsDir: certs, Name: "n", Roles: []string{pki.RoleCoordinator, pki.RoleBrick, pki.RoleLock, pki.RoleClient}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pki.SetDefault(id)
	defer pki.SetDefault(nil)

	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	coordHTTP, brickHTTP := freeLoopback(t), freeLoopback(t)
	c, err := Start(context.Background(), Config{Name: "c1", Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "c1"),
		Coordinator: true, Lock: true, MetricsListen: coordHTTP, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	b, err := Start(context.Background(), Config{Name: "b1", Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "b1"), Brick: true,
		Coord: []string{c.Addr()}, Domain: map[string]string{"host": "h1"}, MetricsListen: brickHTTP, MetricsInsecure: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()

	cl, err := coordclient.New(c.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	tc := &testCluster{t: t, coord: c, cl: cl}
	tc.createVolume("v", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := volume.Open(ctx, cl, "v", volume.Options{Writer: "w"})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	buf := []byte(strings.Repeat("tls!", 2048))
	if err := v.WriteAt(ctx, buf, 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(buf))
	if err := v.ReadAt(ctx, got, 0); err != nil || string(got) != string(buf) {
		t.Fatalf("read back: %v", err)
	}

	get := func(addr string, withCert bool) (string, error) {
		cfg := id.ClientConfigFor(pki.Roles...)
		if !withCert {
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &tls.Certificate{}, nil }
		}
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		r, err := hc.Get("https://" + addr + "/metrics")
		if err != nil {
			return "", err
		}
		defer r.Body.Close()
		body, err := io.ReadAll(r.Body)
		return string(body), err
	}
	if body, err := get(coordHTTP, true); err != nil || !strings.Contains(body, "go_goroutines") {
		t.Errorf("coordinator /metrics with a certificate: %v", err)
	}
	if _, err := get(coordHTTP, false); err == nil {
		t.Error("coordinator /metrics served a client without a certificate")
	}
	if body, err := get(brickHTTP, false); err != nil || !strings.Contains(body, "go_goroutines") {
		t.Errorf("brick /metrics (MetricsInsecure) without a certificate: %v", err)
	}
}
