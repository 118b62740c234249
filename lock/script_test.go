package lock

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestServerScripts runs the interaction scripts in testdata/server_*.txt
// against one Server and prints everything it sends. Regenerate the
// expected output with -rewrite after an intended change.
//
// Commands (clerk sessions default to 1, the table to "t", ReqIDs count up
// per clerk; lock=log-a names LogLock("a")):
//
//	server [groups=N lease=N retry=N grace=N]   a new server
//	assign epoch=E groups=(0,...) [sessions=(a,...)] [fences=(a,...)]
//	open|renew|close clerk=a
//	request clerk=a lock=L mode=read|write [req=N]
//	release|downgrade clerk=a lock=L req=N
//	held clerk=a epoch=E groups=(..) [locks=(L:mode:req,..)] [pending=(..)] [recovering=(b:1,..)]
//	recovery-done clerk=a dead=b [dead-session=1]
//	fence-done|recovered clerk=a [session=1]
//	tick [n=N]
//	state                                        the lock table
func TestServerScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if !strings.HasPrefix(filepathBase(path), "server_") {
			t.Skip("not a server script")
		}
		h := &scriptHarness{reqs: map[string]uint64{}, seqs: map[string]uint64{}}
		datadriven.RunTest(t, path, h.run)
	})
}

func filepathBase(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

type scriptHarness struct {
	s      *Server
	clerks []string
	reqs   map[string]uint64
	seqs   map[string]uint64
}

func (h *scriptHarness) run(t *testing.T, d *datadriven.TestData) string {
	if d.Cmd == "server" {
		cfg := Config{Groups: 1, LeaseTicks: 20, RetryTicks: 5}
		d.MaybeScanArgs(t, "groups", &cfg.Groups)
		d.MaybeScanArgs(t, "lease", &cfg.LeaseTicks)
		d.MaybeScanArgs(t, "retry", &cfg.RetryTicks)
		d.MaybeScanArgs(t, "grace", &cfg.RebuildGraceTicks)
		s, err := NewServer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		h.s = s
		return ""
	}
	if h.s == nil {
		t.Fatal("no server: start the script with 'server'")
	}
	if d.Cmd == "state" {
		return h.state()
	}
	if d.Cmd == "tick" {
		n := 1
		d.MaybeScanArgs(t, "n", &n)
		for range n {
			h.s.Tick()
		}
		return h.drain(nil)
	}
	return h.drain(h.s.Step(h.message(t, d)))
}

func (h *scriptHarness) message(t *testing.T, d *datadriven.TestData) Message {
	clerk, table, sn := "", "t", uint64(1)
	d.MaybeScanArgs(t, "clerk", &clerk)
	d.MaybeScanArgs(t, "table", &table)
	d.MaybeScanArgs(t, "session", &sn)
	h.see(clerk)
	var lock uint64
	if arg, ok := d.Arg("lock"); ok {
		lock = h.lock(t, arg.SingleVal(t))
	}
	req := func() uint64 {
		var r uint64
		if d.MaybeScanArgs(t, "req", &r) {
			return r
		}
		h.reqs[clerk]++
		return h.reqs[clerk]
	}
	switch d.Cmd {
	case "assign":
		return h.assign(t, d)
	case "open":
		return OpenTable{Clerk: clerk, Session: sn, Table: table}
	case "close":
		return CloseTable{Clerk: clerk, Session: sn, Table: table, RenewSeq: h.seqs[clerk]}
	case "renew":
		h.seqs[clerk]++
		return Renew{Clerk: clerk, Session: sn, Seq: h.seqs[clerk], Tables: []string{table}}
	case "request":
		var mode string
		d.ScanArgs(t, "mode", &mode)
		return Request{Clerk: clerk, Session: sn, Table: table, Lock: lock, Mode: parseMode(t, mode), ReqID: req()}
	case "release":
		return Release{Clerk: clerk, Session: sn, Table: table, Lock: lock, ReqID: req()}
	case "downgrade":
		return Downgrade{Clerk: clerk, Session: sn, Table: table, Lock: lock, ReqID: req()}
	case "held":
		return h.held(t, d, clerk, sn, table)
	case "recovery-done":
		var dead string
		ds := uint64(1)
		d.ScanArgs(t, "dead", &dead)
		d.MaybeScanArgs(t, "dead-session", &ds)
		return RecoveryDone{Clerk: clerk, Session: sn, Table: table, Dead: dead, DeadSession: ds}
	case "fence-done":
		return FenceDone{Clerk: clerk, Session: sn}
	case "recovered":
		return Recovered{Clerk: clerk, Session: sn, Table: table}
	}
	t.Fatalf("unknown command %q", d.Cmd)
	return nil
}

func (h *scriptHarness) assign(t *testing.T, d *datadriven.TestData) Message {
	var m AssignGroups
	d.ScanArgs(t, "epoch", &m.Epoch)
	if arg, ok := d.Arg("groups"); ok {
		for _, v := range arg.Vals {
			g, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			m.Groups = append(m.Groups, g)
		}
	}
	if arg, ok := d.Arg("sessions"); ok {
		for _, v := range arg.Vals {
			h.see(v)
			m.Sessions = append(m.Sessions, Registered{Clerk: v, Session: 1, Tables: []string{"t"}})
		}
	}
	if arg, ok := d.Arg("fences"); ok {
		for _, v := range arg.Vals {
			m.Fences = append(m.Fences, FenceDone{Clerk: v, Session: 1})
		}
	}
	return m
}

func (h *scriptHarness) held(t *testing.T, d *datadriven.TestData, clerk string, sn uint64, table string) Message {
	m := Held{Clerk: clerk, Session: sn, Table: table}
	d.ScanArgs(t, "epoch", &m.Epoch)
	arg, _ := d.Arg("groups")
	for _, v := range arg.Vals {
		g, _ := strconv.Atoi(v)
		m.Groups = append(m.Groups, g)
	}
	locks := func(key string) []HeldLock {
		arg, _ := d.Arg(key)
		var out []HeldLock
		for _, v := range arg.Vals {
			f := strings.Split(v, ":")
			r, _ := strconv.ParseUint(f[2], 10, 64)
			out = append(out, HeldLock{Lock: h.lock(t, f[0]), Mode: parseMode(t, f[1]), ReqID: r})
		}
		return out
	}
	m.Locks, m.Pending = locks("locks"), locks("pending")
	arg, _ = d.Arg("recovering")
	for _, v := range arg.Vals {
		f := strings.Split(v, ":")
		s, _ := strconv.ParseUint(f[1], 10, 64)
		m.Recovering = append(m.Recovering, DeadSession{Clerk: f[0], Session: s})
	}
	return m
}

func (h *scriptHarness) see(clerk string) {
	if clerk != "" && !slices.Contains(h.clerks, clerk) {
		h.clerks = append(h.clerks, clerk)
	}
}

func (h *scriptHarness) lock(t *testing.T, v string) uint64 {
	if name, ok := strings.CutPrefix(v, "log-"); ok {
		h.see(name)
		return LogLock(name)
	}
	l, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func (h *scriptHarness) lockName(l uint64) string {
	for _, c := range h.clerks {
		if LogLock(c) == l {
			return "log-" + c
		}
	}
	return strconv.FormatUint(l, 10)
}

func parseMode(t *testing.T, s string) Mode {
	for _, m := range []Mode{None, Read, Write} {
		if m.String() == s {
			return m
		}
	}
	t.Fatalf("bad mode %q", s)
	return None
}

// drain prints and acknowledges what the server produced.
func (h *scriptHarness) drain(err error) string {
	var b strings.Builder
	if err != nil {
		fmt.Fprintf(&b, "error: %v\n", err)
	}
	rd := h.s.Ready()
	for _, m := range rd.Messages {
		b.WriteString(formatMessage(m, h.lockName) + "\n")
	}
	for _, a := range rd.Actions {
		fmt.Fprintf(&b, "action %T %+v\n", a, a)
	}
	h.s.Advance(rd)
	h.s.CheckInvariants()
	return strings.ReplaceAll(b.String(), "lock.", "")
}

func formatMessage(m Message, name func(uint64) string) string {
	id, sn := ClerkOf(m)
	to := "→" + id
	if sn != 1 {
		to += "/" + strconv.FormatUint(sn, 10)
	}
	switch m := m.(type) {
	case Grant:
		return fmt.Sprintf("%s grant %s/%s %v req=%d e=%d", to, m.Table, name(m.Lock), m.Mode, m.ReqID, m.Epoch)
	case Revoke:
		return fmt.Sprintf("%s revoke %s/%s to=%v req=%d e=%d", to, m.Table, name(m.Lock), m.To, m.ReqID, m.Epoch)
	case RenewAck:
		return fmt.Sprintf("%s renew-ack seq=%d groups=%v", to, m.Seq, m.Groups)
	case QueryHeld:
		return fmt.Sprintf("%s query-held %s e=%d groups=%v", to, m.Table, m.Epoch, m.Groups)
	case Recover:
		return fmt.Sprintf("%s recover %s dead=%s/%d e=%d", to, m.Table, m.Dead, m.DeadSession, m.Epoch)
	case Reject:
		return fmt.Sprintf("%s reject %s/%s req=%d: %v", to, m.Table, name(m.Lock), m.ReqID, m.Reason)
	case Expired:
		return to + " expired"
	}
	return fmt.Sprintf("%s %T %+v", to, m, m)
}

// state prints every lock: holders (with revoke marks) and waiters.
func (h *scriptHarness) state() string { return h.s.DebugString(h.lockName) }
