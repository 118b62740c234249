package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/plumeria-fs/plumeria/coord"
)

// dashboardDownMax is how soon after a SIGKILL the page must show the
// brick down: the coordinator's dead-after time, its reconcile tick, the
// page's one-second poll, and slack for a loaded 2-core machine.
const dashboardDownMax = brickDownAfter + 8*time.Second

// chromium returns the path of a Chromium (or Chrome) binary, or skips
// the test saying so. PLUMERIA_CHROMIUM names one explicitly.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PLUMERIA_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("PLUMERIA_CHROMIUM=%s: %v", p, err)
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("SKIPPED: no Chromium found (looked for chromium, chromium-browser, google-chrome, google-chrome-stable and headless-shell on PATH); " +
		"`make deps` installs Debian's chromium, or set PLUMERIA_CHROMIUM")
	return ""
}

// browser starts a headless Chromium for the test and returns its context.
func browser(t *testing.T, exe, logPath string) context.Context {
	t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // tests run as root
		// The dashboard's certificate is from the run's own CA.
		chromedp.Flag("ignore-certificate-errors", true),
		chromedp.Headless,
		chromedp.WindowSize(1400, 1000),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.CombinedOutput(logf),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// Start the browser now, so a broken install fails here, plainly.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start %s headless: %v (its output is in %s)", exe, err, logPath)
	}
	return ctx
}

// pageState is a one-line summary of what the page shows, for messages.
const pageState = `(() => {
  const rows = [...document.querySelectorAll('#bricks tbody tr[data-brick]')].map(r => r.dataset.brick + ':' + r.dataset.state);
  return 'bricks [' + rows.join(' ') + '] health ' + document.getElementById('health').dataset.health +
    ' error ' + JSON.stringify(document.getElementById('error').textContent) + ' updated ' + document.getElementById('updated').dataset.updated;
})()`

// waitPage polls a JavaScript condition in the page until it holds, and
// fails the test with the page's state once timeout passes.
func waitPage(t *testing.T, c *cluster, ctx context.Context, timeout time.Duration, what, cond string) {
	t.Helper()
	start := time.Now()
	err := chromedp.Do(ctx, chromedp.Poll[chromedp.Void](cond,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	took := time.Since(start)
	if err != nil {
		state, serr := chromedp.Run(ctx, chromedp.Evaluate[string](pageState))
		if serr != nil {
			state = serr.Error()
		}
		t.Fatalf("page: waited %v for %s: %v\npage shows: %s", took.Round(time.Millisecond), what, err, state)
	}
	c.logf("page: %s (after %v)", what, took.Round(time.Millisecond))
}

func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100 makes a PNG, below it a JPEG
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}

// TestDashboard: a coordinator serving the dashboard (--metrics-listen)
// and three bricks, as processes. Headless Chromium loads the page and
// must show three bricks up; a brick is SIGKILLed and the page must show
// it down within seconds, by polling alone (no reload).
//
// PLUMERIA_E2E_SCREENSHOTS=DIR keeps the page's screenshots (before and
// after the kill) in DIR; otherwise they go to the test's temp dir.
func TestDashboard(t *testing.T) {
	exe := chromium(t)
	c := newCluster(t)
	httpAddr := freeAddr(t)
	p := c.newProc("c1")
	p.coordinator = true
	p.args = []string{"server", "--name", "c1", "--listen", p.addr, "--data", p.data, "--coordinator", "--metrics-listen", httpAddr,
		"--metrics-insecure"} // the browser has no client certificate: TLS without one
	c.start(p)
	c.waitStatus(30*time.Second, "c1 leads", func(st *coord.Status) (bool, string) {
		return st.Leader == "c1", fmt.Sprintf("leader %q", st.Leader)
	})
	for i := 1; i <= 3; i++ {
		c.addBrick(fmt.Sprintf("b%d", i), fmt.Sprintf("h%d", i))
	}
	c.waitStatus(30*time.Second, "3 bricks up", func(st *coord.Status) (bool, string) {
		up := 0
		for _, b := range st.Bricks {
			if b.State == "up" && b.LastSeen >= 0 {
				up++
			}
		}
		return up == 3, brickStates(st)
	})
	c.createVolume("vol", 3)

	// Some traffic, so the charts have something to draw.
	v := c.open("vol", "w1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	buf := make([]byte, 64<<10)
	for i := range 64 {
		buf[0] = byte(i)
		if err := v.WriteAt(ctx, buf, uint64(i)*uint64(len(buf))); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if err := v.ReadAt(ctx, buf, uint64(i/2)*uint64(len(buf))); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
	}

	shots := os.Getenv("PLUMERIA_E2E_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	b := browser(t, exe, filepath.Join(c.dir, "chromium.log"))
	url := "https://" + httpAddr + "/"
	if err := chromedp.Do(b, chromedp.Navigate(url)); err != nil {
		t.Fatalf("load %s: %v", url, err)
	}
	waitPage(t, c, b, 30*time.Second, "three bricks up",
		`document.querySelectorAll('#bricks tbody tr[data-brick][data-state="up"]').length === 3 && `+
			`document.querySelectorAll('#map [data-map-brick][data-state="up"]').length === 3`)
	waitPage(t, c, b, 10*time.Second, "c1 shown as the leader",
		`document.querySelector('#coordinators tr[data-coordinator="c1"]')?.dataset.role === "leader"`)
	waitPage(t, c, b, 10*time.Second, "volume vol healthy, health badge healthy",
		`document.querySelector('#volumes tr[data-volume="vol"]')?.dataset.state === "healthy" && `+
			`document.getElementById('health').dataset.health === "healthy"`)
	// The charts draw once the sampler has two samples (a 2 s interval).
	waitPage(t, c, b, 15*time.Second, "charts drawn from samples",
		`[...document.querySelectorAll('canvas[data-chart]')].every(c => Number(c.dataset.samples) >= 2)`)
	screenshot(t, b, shots, "dashboard-up.png")

	c.kill("b2")
	killed := time.Now()
	waitPage(t, c, b, dashboardDownMax, "b2 shown down",
		`document.querySelector('#bricks tr[data-brick="b2"]')?.dataset.state === "down" && `+
			`document.querySelector('#map [data-map-brick="b2"]')?.dataset.state === "down"`)
	t.Logf("the page showed b2 down %v after the SIGKILL (coordinator dead-after %v)", time.Since(killed).Round(time.Millisecond), brickDownAfter)
	state, err := chromedp.Run(b, chromedp.Evaluate[string](pageState))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"b1:up", "b2:down", "b3:up", "health degraded"} {
		if !strings.Contains(state, want) {
			t.Errorf("after b2's SIGKILL the page shows %s; want %q in it", state, want)
		}
	}
	waitPage(t, c, b, 10*time.Second, "volume vol degraded",
		`document.querySelector('#volumes tr[data-volume="vol"]')?.dataset.state === "degraded"`)
	screenshot(t, b, shots, "dashboard-b2-down.png")
}
