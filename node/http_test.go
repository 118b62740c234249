package node

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/coord"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/volume"
)

func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

// TestHTTP: a coordinator's HTTP port serves /metrics and the dashboard,
// whose status shows the bricks' request counters from their heartbeats;
// a brick's serves /metrics only.
func TestHTTP(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	coordHTTP, brickHTTP := freeLoopback(t), freeLoopback(t)
	c, err := Start(context.Background(), Config{Name: "c1", Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "c1"),
		Coordinator: true, MetricsListen: coordHTTP, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	coordStopped := false
	defer func() {
		if !coordStopped {
			c.Stop()
		}
	}()
	b, err := Start(context.Background(), Config{Name: "b1", Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "b1"), Brick: true,
		Coord: []string{c.Addr()}, Domain: map[string]string{"host": "h1"}, MetricsListen: brickHTTP, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()

	if code, body := httpGet(t, "http://"+coordHTTP+"/"); code != 200 || !strings.Contains(body, `id="bricks"`) {
		t.Errorf("coordinator GET /: %d %.100s", code, body)
	}
	for _, a := range []string{coordHTTP, brickHTTP} {
		if code, body := httpGet(t, "http://"+a+"/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") {
			t.Errorf("GET %s/metrics: %d", a, code)
		}
	}
	if code, _ := httpGet(t, "http://"+brickHTTP+"/"); code != 404 {
		t.Errorf("brick GET /: %d, want 404 (the dashboard is the coordinator's)", code)
	}

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
	buf := make([]byte, 8192)
	for i := range 10 {
		if err := v.WriteAt(ctx, buf, uint64(i)*uint64(len(buf))); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.ReadAt(ctx, buf, 0); err != nil {
		t.Fatal(err)
	}
	// The next heartbeats (every 250 ms) carry the counters.
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := httpGet(t, "http://"+coordHTTP+"/api/status")
		var st coord.Status
		if code == 200 && json.Unmarshal([]byte(body), &st) == nil && len(st.Bricks) == 1 {
			io := st.Bricks[0].IO
			if io != nil && io.Write.Ops == 10 && io.Write.Bytes == 10*8192 && io.Read.Ops == 1 && len(io.Write.Latency) > 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed b1's 10 writes and 1 read: %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}

	coordStopped = true
	c.Stop()
	if _, err := http.Get("http://" + coordHTTP + "/"); err == nil {
		t.Errorf("the HTTP port still answers after Stop")
	}
}
