package fsbench

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestRunTwoLocal: the two-node workloads on one local directory seen as
// both sides (the control run; test/e2e runs them on two mounts).
func TestRunTwoLocal(t *testing.T) {
	dir := t.TempDir()
	res, err := RunTwo(context.Background(), dir, dir, TwoConfig{PingPongOps: 301, Files: 300, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ name, unit string }{
		{"pingpong_ops", "ops/s"}, {"pingpong_handoff_ms", "ms"}, {"pingpong_handoff_p90_ms", "ms"},
		{"listcreate_create", "files/s"}, {"listcreate_list", "listings/s"},
	}
	if len(res) != len(want) {
		t.Fatalf("%d results, want %d: %v", len(res), len(want), res)
	}
	for i, w := range want {
		r := res[i]
		if r.Name != w.name || r.Unit != w.unit || !(r.Value > 0) {
			t.Errorf("result %d: %q, want %s, a positive value, %s", i, r, w.name, w.unit)
		}
		if f := strings.Fields(r.String()); len(f) != 3 {
			t.Errorf("%q is not three fields", r)
		}
	}
	if res[1].Value > res[2].Value {
		t.Errorf("median %v above p90 %v", res[1], res[2])
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left behind in %s: %v", dir, left)
	}

	res, err = RunTwo(context.Background(), dir, dir, TwoConfig{Files: 5})
	if err != nil || len(res) != 2 || res[0].Name != "listcreate_create" {
		t.Errorf("ping-pong skipped: %v %v", res, err)
	}
	if _, err := RunTwo(context.Background(), dir, dir+"/missing", TwoConfig{Files: 1}); err == nil {
		t.Error("a missing dirB: no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := RunTwo(ctx, dir, dir, DefaultTwoConfig()); err == nil {
		t.Error("a cancelled context: no error")
	}
}

// TestPingPongCheck: a page another operation wrote fails the read-back
// check and says whose it is.
func TestPingPongCheck(t *testing.T) {
	path := t.TempDir() + "/f"
	want, got := make([]byte, PageSize), make([]byte, PageSize)
	if err := writeNew(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := pingPongOp(path, 0, -1, want, got); err != nil {
		t.Fatal(err)
	}
	if err := pingPongOp(path, 256, 0, want, got); err != nil { // same page: 256*4 KiB mod 1 MiB
		t.Fatal(err)
	}
	err := pingPongOp(path, 1, 0, want, got)
	if err == nil || !strings.Contains(err.Error(), "incoherent") || !strings.Contains(err.Error(), "operation 256's stamp") {
		t.Fatalf("stale page read back: %v", err)
	}
}

// TestCheckListing: missing, repeated and foreign names are found.
func TestCheckListing(t *testing.T) {
	name := func(i int) string { return "c" + strings.Repeat("0", 6) + string(rune('0'+i)) }
	for _, tc := range []struct {
		names []string
		done  int
		bad   string
	}{
		{[]string{"c0000000", "c0000001"}, 2, ""},
		{[]string{"c0000000", "c0000002"}, 1, ""},
		{[]string{"c0000000"}, 2, "c0000001 missing"},
		{[]string{"c0000000", "c0000000"}, 1, "twice"},
		{[]string{"x"}, 0, "unexpected"},
		{[]string{"c9"}, 0, "unexpected"},
	} {
		err := checkListing(tc.names, tc.done, 3, name)
		if (err == nil) != (tc.bad == "") || err != nil && !strings.Contains(err.Error(), tc.bad) {
			t.Errorf("%v done %d: %v, want %q", tc.names, tc.done, err, tc.bad)
		}
	}
}
