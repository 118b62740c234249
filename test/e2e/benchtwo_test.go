package e2e

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestBenchTwo: `plumeria bench two A B` on two mounts of one volume (two
// fs node processes) prints, on stdout only, each two-node metric once as
// "name value unit", and leaves the directory as it was.
func TestBenchTwo(t *testing.T) {
	c := newFSCluster(t)
	a, b := c.mountNode("n1"), c.mountNode("n2")
	r := c.run(90*time.Second, nil, "bench", "two", a, b, "--ops", "200", "--files", "200")
	if r.code != 0 {
		t.Fatalf("%s\nstdout:\n%s", r, r.stdout)
	}
	t.Logf("bench two in %v:\n%s", r.dur.Round(time.Millisecond), r.stdout)
	want := map[string]string{
		"pingpong_ops": "ops/s", "pingpong_handoff_ms": "ms", "pingpong_handoff_p90_ms": "ms",
		"listcreate_create": "files/s", "listcreate_list": "listings/s",
	}
	checkMetricLines(t, string(r.stdout), want)
	if !strings.Contains(string(r.stderr), "listcreate") {
		t.Errorf("no progress on stderr:\n%s", r.stderr)
	}
	for _, d := range []string{a, b} {
		if left, err := os.ReadDir(d); err != nil || len(left) != 0 {
			t.Errorf("%s after the run: %v %v", d, left, err)
		}
	}
	if r := c.run(cliTimeout, nil, "bench", "two", a); r.code == 0 || !strings.Contains(string(r.stderr), "accepts 2 arg") {
		t.Errorf("bench two with one directory: %s", r)
	}
}
