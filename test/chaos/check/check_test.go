package check

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

const sec = time.Second

func w(client int, key, v string, start, end time.Duration, out Outcome) Op {
	return Op{Client: client, Node: "n", Kind: Write, Key: key, Value: v, Start: start, End: end, Outcome: out}
}

func r(client int, key, v string, start, end time.Duration) Op {
	return Op{Client: client, Node: "n", Kind: Read, Key: key, Value: v, Start: start, End: end, Outcome: OK}
}

func TestRegisterLinearizable(t *testing.T) {
	h := []Op{
		w(0, "k", "a", 0, 1*sec, OK),
		r(1, "k", "init", 0, 2*sec), // concurrent with the write: either value
		r(1, "k", "a", 3*sec, 4*sec),
		w(0, "k", "b", 5*sec, 0, Unknown), // may take effect any time after 5 s
		r(1, "k", "a", 6*sec, 7*sec),
		r(2, "k", "b", 8*sec, 9*sec),
		w(0, "j", "x", 0, 1*sec, Failed), // never happened
		r(2, "j", "init", 2*sec, 3*sec),
	}
	res := Register(h, "init", 10*sec)
	if len(res.Anomalies) != 0 || res.Keys != 2 || res.Ops != 7 {
		t.Fatalf("Register = %+v, want 2 keys, 7 ops, no anomaly", res)
	}
}

func TestRegisterStaleReadShrunk(t *testing.T) {
	var h []Op
	// Noise: 40 sequential writes and reads that are fine.
	at := time.Duration(0)
	for i := range 40 {
		v := string(rune('a' + i%26))
		h = append(h, w(0, "k", v+"x", at, at+sec, OK), r(1, "k", v+"x", at+2*sec, at+3*sec))
		at += 4 * sec
	}
	// Then a stale read after a completed write.
	h = append(h, w(0, "k", "new", at, at+sec, OK), r(2, "k", "zx", at+2*sec, at+3*sec))
	res := Register(h, "init", 10*sec)
	if len(res.Anomalies) != 1 || res.Anomalies[0].Kind != "linearizability" {
		t.Fatalf("anomalies = %v, want one linearizability anomaly", res.Anomalies)
	}
	short := res.Anomalies[0].History
	// The shortest history: the write of "zx" the read needs, the newer write, the stale read.
	if len(short) != 3 {
		t.Fatalf("shrunk to %d ops, want 3:\n%s", len(short), res.Anomalies[0])
	}
	var buf bytes.Buffer
	if err := VisualizeRegister(h, "init", "k", 10*sec, &buf); err != nil || !strings.Contains(buf.String(), "<html") {
		t.Fatalf("visualize: %v (%d bytes)", err, buf.Len())
	}
}

func TestRegisterTornRead(t *testing.T) {
	h := []Op{w(0, "k", "abc", 0, sec, OK), r(1, "k", "", 2*sec, 3*sec)}
	res := Register(h, "init", 10*sec)
	if len(res.Anomalies) != 1 || res.Anomalies[0].Kind != "read of a value never written" {
		t.Fatalf("anomalies = %v", res.Anomalies)
	}
}

func TestRegisterLostAcknowledgedWrite(t *testing.T) {
	// An acknowledged write that later reads do not see (lost in a crash).
	h := []Op{w(0, "k", "a", 0, sec, OK), r(1, "k", "a", 2*sec, 3*sec), w(0, "k", "b", 4*sec, 5*sec, OK), r(1, "k", "a", 6*sec, 7*sec)}
	if res := Register(h, "init", 10*sec); len(res.Anomalies) != 1 {
		t.Fatalf("anomalies = %v, want one", res.Anomalies)
	}
}

func setOp(kind Kind, key, from, to string, start time.Duration, out Outcome) Op {
	return Op{Kind: kind, Key: key, From: from, To: to, Start: start, End: start + sec/2, Outcome: out}
}

func TestSet(t *testing.T) {
	h := []Op{
		setOp(Create, "e1", "", "e1", 0, OK),                                             // stays
		setOp(Create, "e2", "", "e2", 0, OK), setOp(Rename, "e2", "e2", "e2.r", sec, OK), // renamed
		setOp(Create, "e3", "", "e3", 0, OK), setOp(Unlink, "e3", "", "e3", sec, OK), // gone
		setOp(Create, "e4", "", "e4", 0, OK), setOp(Rename, "e4", "e4", "e4.r", sec, Unknown), // either
		setOp(Create, "e5", "", "e5", 0, Unknown), // either
		setOp(Create, "e6", "", "e6", 0, OK), setOp(Rename, "e6", "e6", "e6.r", sec, OK), setOp(Unlink, "e6", "", "e6.r", 2*sec, OK),
	}
	ok := map[string][]string{"a": {"e1", "e2.r", "e4"}, "b": {"e4", "e2.r", "e1"}}
	if res := Set(h, ok); len(res.Anomalies) != 0 || res.Elements != 6 {
		t.Fatalf("Set = %+v, want 6 elements, no anomaly", res)
	}
	for _, tc := range []struct {
		listing []string
		kind    string
	}{
		{[]string{"e2.r", "e4"}, "lost create"},
		{[]string{"e1", "e2.r", "e3", "e4"}, "unlinked entry reappeared"},
		{[]string{"e1", "e2", "e2.r", "e4.r"}, "duplicate"},
		{[]string{"e1", "e2", "e4.r"}, "rename undone"},
		{[]string{"e1", "e2.r", "e4", "e6.r"}, "unlinked entry reappeared"},
		{[]string{"e1", "e2.r", "e4", "zz"}, "unexpected entry"},
	} {
		res := Set(h, map[string][]string{"a": tc.listing})
		if len(res.Anomalies) != 1 || res.Anomalies[0].Kind != tc.kind {
			t.Errorf("listing %v: anomalies %v, want one %q", tc.listing, res.Anomalies, tc.kind)
		}
	}
	res := Set(h, map[string][]string{"a": {"e1", "e2.r", "e4"}, "b": {"e1", "e4"}})
	if len(res.Anomalies) != 2 || res.Anomalies[0].Kind != "listings differ" {
		t.Fatalf("anomalies %v, want listings differ and lost create", res.Anomalies)
	}
}

func TestDurable(t *testing.T) {
	f := DurableFile{Path: "d", Node: "n", Attempted: []byte("0123456789"), Written: 8, Synced: 5, Crashed: true}
	for _, tc := range []struct {
		got     string
		missing bool
		kind    string // "" for allowed
	}{
		{"01234", false, ""},
		{"0123456789", false, ""}, // the write in flight landed
		{"0123", false, "fsync'd bytes lost"},
		{"01234\x00", false, "bytes never written"},
		{"0123456789x", false, "bytes never written"},
		{"", true, "fsync'd file lost"},
	} {
		a := Durable(f, []byte(tc.got), tc.missing)
		if (a == nil) != (tc.kind == "") || (a != nil && a.Kind != tc.kind) {
			t.Errorf("got %q missing %v: %v, want %q", tc.got, tc.missing, a, tc.kind)
		}
	}
	f.Crashed = false
	if a := Durable(f, []byte("0123456"), false); a == nil || a.Kind != "acknowledged write not visible" {
		t.Errorf("live writer, short file: %v", a)
	}
}

func TestTreeModel(t *testing.T) {
	tr := NewTree()
	for _, op := range []TreeOp{
		{Kind: "mkdir", Path: "d", Mode: 0o755},
		{Kind: "create", Path: "d/f", Mode: 0o644},
		{Kind: "write", Path: "d/f", Data: "hello"},
		{Kind: "link", Path: "d/f", To: "g"},
		{Kind: "chmod", Path: "g", Mode: 0o600},
		{Kind: "symlink", Path: "s", Data: "d/f"},
		{Kind: "mkdir", Path: "e", Mode: 0o755},
		{Kind: "rename", Path: "d", To: "e"}, // replaces the empty directory
		{Kind: "truncate", Path: "g", Size: 2},
	} {
		if err := tr.Apply(op); err != nil {
			t.Fatalf("%v: %v", op, err)
		}
	}
	want := Snapshot{
		"e":   {Kind: 'd', Mode: 0o755},
		"e/f": {Kind: 'f', Data: "he", Mode: 0o600, Link: "e/f"},
		"g":   {Kind: 'f', Data: "he", Mode: 0o600, Link: "e/f"},
		"s":   {Kind: 'l', Data: "d/f"},
	}
	if d := Diff(want, tr.Snapshot(), "", 10); len(d) > 0 {
		t.Fatalf("model tree differs: %v", d)
	}
	for _, bad := range []TreeOp{
		{Kind: "rmdir", Path: "e"},
		{Kind: "rename", Path: "e", To: "e/x"},
		{Kind: "create", Path: "nodir/f"},
		{Kind: "write", Path: "g", Data: "x"},
	} {
		if err := tr.Apply(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestRecovered(t *testing.T) {
	ops := []TreeOp{
		{Kind: "mkdir", Path: "d", Mode: 0o755},
		{Kind: "create", Path: "d/a", Mode: 0o644},
		{Kind: "write", Path: "d/a", Data: "aaaa"},
		{Kind: "fsync", Path: "d/a"},
		{Kind: "create", Path: "d/b", Mode: 0o644},
		{Kind: "write", Path: "d/b", Data: "bbbbbbbb", Outcome: Unknown}, // in flight at the kill
	}
	base := Snapshot{"d": {Kind: 'd', Mode: 0o755}, "d/a": {Kind: 'f', Data: "aaaa", Mode: 0o644}}
	withB := func(data string) Snapshot {
		s := Snapshot{}
		for k, v := range base {
			s[k] = v
		}
		s["d/b"] = Entry{Kind: 'f', Data: data, Mode: 0o644}
		return s
	}
	for _, tc := range []struct {
		got  Snapshot
		k    int
		fail bool
	}{
		{base, 4, false},
		{withB(""), 5, false},
		{withB("bbb"), 6, false}, // half of the write in flight
		{withB("bbbbbbbb"), 6, false},
		{Snapshot{"d": {Kind: 'd', Mode: 0o755}}, -1, true}, // lost the fsync'd file
		{withB("xx"), -1, true},
	} {
		k, a := Recovered(ops, 4, tc.got)
		if (a != nil) != tc.fail || k != tc.k {
			t.Errorf("got %v: k=%d anomaly %v, want k=%d fail %v", tc.got, k, a, tc.k, tc.fail)
		}
	}
}

func TestSummaryTable(t *testing.T) {
	var s Summary
	s.Runs, s.Seeds = 1, []uint64{7}
	s.Fault("kill-fs")
	s.Fault("kill-fs")
	s.Checked("register", 100)
	s.Note("sch_netem missing")
	var total Summary
	total.Add(s)
	total.Add(Summary{Runs: 1, Seeds: []uint64{8}, Anomalies: []RunAnomaly{{Run: "chaos", Seed: 8, Anomaly: Anomaly{Kind: "lost create", Key: "e1", Known: true}}}})
	tab := total.Table()
	for _, want := range []string{"2 runs, seeds 7 8", "kill-fs", "register", "lost create (known gap)", "note: sch_netem missing"} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
	if total.Failed() {
		t.Errorf("only known gaps, but Failed")
	}
}

func TestNotSynced(t *testing.T) {
	h := []Op{
		{Node: "a", Inc: 1, Kind: Create, Key: "e1", To: "e1", Start: 0, End: sec, Outcome: OK},           // synced at 2 s
		{Node: "a", Inc: 1, Kind: Create, Key: "e2", To: "e2", Start: 3 * sec, End: 4 * sec, Outcome: OK}, // after the last fsync
		{Node: "b", Inc: 1, Kind: Create, Key: "e3", To: "e3", Start: 3 * sec, End: 4 * sec, Outcome: OK}, // b did not crash
	}
	out := NotSynced(h, func(n string, inc int) bool { return n == "a" },
		func(n string, inc int) (time.Duration, bool) { return 2 * sec, n == "a" })
	if out[0].Outcome != OK || out[1].Outcome != Unknown || out[2].Outcome != OK {
		t.Fatalf("NotSynced = %v", out)
	}
	if res := Set(out, map[string][]string{"x": {"e1", "e3"}}); len(res.Anomalies) != 0 {
		t.Fatalf("lost unsynced create reported: %v", res.Anomalies)
	}
}
