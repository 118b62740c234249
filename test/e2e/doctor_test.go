package e2e

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/coord"
)

// doctorLines runs `plumeria doctor` and returns its result and each
// check's line by check name. Every line must start with a verdict, and
// the exit code must be non-zero exactly when a line says FAIL.
func (c *cluster) doctor(args ...string) (cliResult, map[string]string) {
	c.t.Helper()
	r := c.run(cliTimeout, nil, append([]string{"doctor"}, args...)...)
	lines := map[string]string{}
	failed := false
	for _, l := range strings.Split(strings.TrimSpace(string(r.stdout)), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || f[0] != "OK" && f[0] != "WARN" && f[0] != "FAIL" {
			c.t.Fatalf("doctor line without a verdict: %q\n%s", l, r)
		}
		name := f[1]
		if (name == "listen" || name == "coordinator" || name == "clock") && len(f) > 2 {
			name += " " + f[2]
		}
		lines[name] = l
		failed = failed || f[0] == "FAIL"
	}
	if failed != (r.code != 0) {
		c.t.Fatalf("doctor exit %d, but FAIL lines: %v\n%s\nstdout:\n%s", r.code, failed, r, r.stdout)
	}
	return r, lines
}

func wantVerdict(t *testing.T, lines map[string]string, check string, verdicts string, words ...string) {
	t.Helper()
	l, ok := lines[check]
	if !ok {
		t.Errorf("no %q line in doctor's output: %v", check, lines)
		return
	}
	if !strings.Contains(verdicts, strings.Fields(l)[0]) {
		t.Errorf("%s: %q, want verdict %s", check, l, verdicts)
	}
	for _, w := range words {
		if !strings.Contains(l, w) {
			t.Errorf("%s: %q does not mention %q", check, l, w)
		}
	}
}

// TestDoctor runs `plumeria doctor` against a real coordinator process:
// on the coordinator's own port, data directory and address everything
// passes; a dead coordinator and a port held by another program fail,
// and the exit code says so.
func TestDoctor(t *testing.T) {
	c := newCluster(t)
	p := c.addCoordinator("c1")
	c.waitStatus(30*time.Second, "c1 leads", func(st *coord.Status) (bool, string) {
		return st.Leader == "c1", fmt.Sprintf("leader %q", st.Leader)
	})

	r, lines := c.doctor("--skip-fuse", "--coord", p.addr, "--listen", p.addr, "--data", p.data)
	if r.code != 0 {
		t.Errorf("doctor failed on a healthy node: %s\n%s", r, r.stdout)
	}
	wantVerdict(t, lines, "os", "OK", "linux")
	wantVerdict(t, lines, "open-files", "OK WARN", "ulimit -n")
	wantVerdict(t, lines, "listen "+p.addr, "OK", "plumeria (pid", "runs here already")
	wantVerdict(t, lines, "data-dir", "OK", p.data)
	wantVerdict(t, lines, "disk-space", "OK WARN", "free of")
	wantVerdict(t, lines, "coordinator "+p.addr, "OK", "leader c1", "coordinators 1")
	// Same machine, same clock: never a real skew; a loaded machine may
	// make the round trip too slow to tell (WARN), never FAIL.
	wantVerdict(t, lines, "clock "+p.addr, "OK WARN", "±")
	wantVerdict(t, lines, "tls", "OK", "certificate admin of cluster e2e")
	if _, ok := lines["fuse-device"]; ok {
		t.Errorf("--skip-fuse ran the FUSE checks")
	}

	// The FUSE checks run by default; whatever this machine has, each
	// says something and the exit code matches (checked in doctor).
	_, lines = c.doctor()
	for _, name := range []string{"fuse-device", "fuse-module", "fuse-mount"} {
		wantVerdict(t, lines, name, "OK WARN FAIL")
	}

	// Broken: nothing answers at dead, and this test holds the port.
	dead := freeAddr(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held := ln.Addr().String()
	r, lines = c.doctor("--skip-fuse", "--coord", dead+","+p.addr, "--listen", held, "--data", p.data+"/new")
	if r.code == 0 {
		t.Fatalf("doctor passed with a dead coordinator and a taken port:\n%s", r.stdout)
	}
	if msg := strings.TrimSpace(string(r.stderr)); !strings.Contains(msg, "2 of") || strings.Contains(msg, "\n") {
		t.Errorf("stderr %q, want one line counting 2 failed checks", msg)
	}
	wantVerdict(t, lines, "coordinator "+dead, "FAIL", "unreachable", "fix:")
	wantVerdict(t, lines, "coordinator "+p.addr, "OK") // the live one still passes
	wantVerdict(t, lines, "listen "+held, "FAIL", "not plumeria", "another --listen")
	wantVerdict(t, lines, "data-dir", "OK", "does not exist yet")
}
