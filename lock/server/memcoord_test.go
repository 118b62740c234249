package server

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/plumeria-fs/plumeria/lock"
)

const testGroups = 64

// subscribe subscribes server id and returns its channel.
func subscribe(t *testing.T, ctx context.Context, mc *MemCoordinator, id string) <-chan lock.Message {
	t.Helper()
	ch, err := mc.Server(id, id+":1").Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// drain collects what a subscriber was sent so far, forwarding it so the
// coordinator never waits on it.
type drain struct {
	ch   <-chan lock.Message
	msgs []lock.Message
}

// next returns the next event.
func (d *drain) next(t *testing.T) lock.Message {
	t.Helper()
	m, ok := <-d.ch
	if !ok {
		t.Fatal("events closed")
	}
	d.msgs = append(d.msgs, m)
	return m
}

// nextAssign skips to the next AssignGroups.
func (d *drain) nextAssign(t *testing.T) lock.AssignGroups {
	t.Helper()
	for {
		if a, ok := d.next(t).(lock.AssignGroups); ok {
			return a
		}
	}
}

func owners(mc *MemCoordinator) []string {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return slices.Clone(mc.mu.owner)
}

func loads(own []string) map[string]int {
	l := map[string]int{}
	for _, o := range own {
		l[o]++
	}
	return l
}

func balanced(t *testing.T, own []string, live ...string) {
	t.Helper()
	l := loads(own)
	lo, hi := testGroups, 0
	for _, id := range live {
		lo, hi = min(lo, l[id]), max(hi, l[id])
	}
	total := 0
	for _, id := range live {
		total += l[id]
	}
	if total != testGroups || hi-lo > 1 {
		t.Fatalf("loads %v over %v: not balanced", l, live)
	}
}

func moves(a, b []string) int {
	n := 0
	for g := range a {
		if a[g] != b[g] {
			n++
		}
	}
	return n
}

// TestMemPlacement: balanced after every join and death, and only the
// groups that must move do.
func TestMemPlacement(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mc := NewMemCoordinator(testGroups)
	var live, before []string
	for i, id := range []string{"a", "b", "c", "d"} {
		ch := subscribe(t, ctx, mc, id)
		go func() { // a server that takes every event at once
			for range ch {
			}
		}()
		live = append(live, id)
		own := owners(mc)
		balanced(t, own, live...)
		if i > 0 {
			if n, want := moves(before, own), testGroups/(i+1)+1; n > want {
				t.Fatalf("join of %s moved %d groups, want at most %d", id, n, want)
			}
		}
		before = own
	}
	mc.Kill("a")
	own := owners(mc)
	balanced(t, own, "b", "c", "d")
	for g := range own {
		if before[g] != "a" && own[g] != before[g] {
			t.Fatalf("group %d moved from live %s to %s on a's death", g, before[g], own[g])
		}
	}
	ow, _, _ := mc.Owners(ctx)
	for g, addr := range ow {
		if addr == "a:1" {
			t.Fatalf("group %d still resolves to dead a", g)
		}
	}
	if len(ow) != testGroups {
		t.Fatalf("%d groups resolve, want %d", len(ow), testGroups)
	}
}

// TestMemLossBeforeGain: a joining server is told of its groups only after
// the server losing them received the assignment that takes them away.
func TestMemLossBeforeGain(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mc := NewMemCoordinator(testGroups)
	a := &drain{ch: subscribe(t, ctx, mc, "a")}
	if got := a.nextAssign(t); len(got.Groups) != testGroups {
		t.Fatalf("first server got %d groups", len(got.Groups))
	}
	joined := make(chan (<-chan lock.Message), 1)
	go func() { joined <- subscribe(t, ctx, mc, "b") }()
	lost := a.nextAssign(t) // only now may b's subscription return
	b := &drain{ch: <-joined}
	gained := b.nextAssign(t)
	if len(lost.Groups)+len(gained.Groups) != testGroups || gained.Epoch < lost.Epoch {
		t.Fatalf("a keeps %v at %d, b gains %v at %d", lost.Groups, lost.Epoch, gained.Groups, gained.Epoch)
	}
	for _, g := range gained.Groups {
		if slices.Contains(lost.Groups, g) {
			t.Fatalf("group %d with both", g)
		}
	}
}

// TestMemFenceAndRecovery: Mount fences older sessions and registers the
// new one; FenceDone carries registered tables to every server; recording
// a recovery needs the fence and drops the registry entry.
func TestMemFenceAndRecovery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mc := NewMemCoordinator(4)
	var fenced []uint64
	mc.OnFence = func(clerk string, session uint64) error {
		fenced = append(fenced, session)
		return nil
	}
	a := &drain{ch: subscribe(t, ctx, mc, "a")}
	a.nextAssign(t)
	h := mc.Server("a", "a:1")
	if sn, err := mc.Mount("n1", "fs0"); sn != 1 || err != nil {
		t.Fatalf("first session %d, %v", sn, err)
	}
	if err := h.RecordRecovered(ctx, "n1", 1, "fs0"); err == nil {
		t.Fatal("recovery recorded before the fence")
	}
	if sn, err := mc.Mount("n1", "fs0"); sn != 2 || err != nil {
		t.Fatalf("second session %d, %v", sn, err)
	}
	f, ok := a.next(t).(lock.FenceDone)
	if !ok || f.Clerk != "n1" || f.Session != 1 || !slices.Equal(f.Tables, []string{"fs0"}) {
		t.Fatalf("after remount: %+v", f)
	}
	if err := h.Fence(ctx, "n1", 1); err != nil { // again: only the asker hears
		t.Fatal(err)
	}
	if f2 := a.next(t); f2.(lock.FenceDone).Session != 1 {
		t.Fatalf("repeated fence: %+v", f2)
	}
	if err := h.RecordRecovered(ctx, "n1", 1, "fs0"); err != nil {
		t.Fatal(err)
	}
	if r, ok := a.next(t).(lock.Recovered); !ok || r != (lock.Recovered{Clerk: "n1", Session: 1, Table: "fs0"}) {
		t.Fatalf("after record: %+v", r)
	}
	if reg := mc.Registered("n1", 1); reg != nil {
		t.Fatalf("recovered session still registered: %v", reg)
	}
	if reg := mc.Registered("n1", 2); !slices.Equal(reg, []string{"fs0"}) {
		t.Fatalf("live session registered with %v", reg)
	}
	if !slices.Equal(fenced, []uint64{1}) {
		t.Fatalf("OnFence saw %v", fenced)
	}
	// A server joining now learns fences and registry from its assignment.
	go func() { // a must take its loss before b's subscription returns
		for range a.ch {
		}
	}()
	b := &drain{ch: subscribe(t, ctx, mc, "b")}
	got := b.nextAssign(t)
	if len(got.Fences) != 1 || got.Fences[0].Session != 1 || len(got.Sessions) != 1 || got.Sessions[0].Session != 2 {
		t.Fatalf("joiner's assignment: %+v", got)
	}
	if _, err := mc.Server("b", "b:1").Events(ctx); err == nil {
		t.Fatal("second subscription of b accepted")
	}
}

// TestMemFenceFailure: a fence storage could not enforce is not recorded,
// and the next attempt does it.
func TestMemFenceFailure(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mc := NewMemCoordinator(4)
	fail := true
	mc.OnFence = func(string, uint64) error {
		if fail {
			return errors.New("bricks unreachable")
		}
		return nil
	}
	a := &drain{ch: subscribe(t, ctx, mc, "a")}
	a.nextAssign(t)
	h := mc.Server("a", "a:1")
	if err := h.Fence(ctx, "n1", 3); err == nil || mc.Fenced("n1") != 0 {
		t.Fatalf("failed fence: err %v, fence %d", err, mc.Fenced("n1"))
	}
	fail = false
	if err := h.Fence(ctx, "n1", 3); err != nil || mc.Fenced("n1") != 3 {
		t.Fatalf("second fence: err %v, fence %d", err, mc.Fenced("n1"))
	}
	if f, ok := a.next(t).(lock.FenceDone); !ok || f.Session != 3 {
		t.Fatalf("after the fence: %+v", f)
	}
	if sn, err := mc.Mount("n1", "fs0"); err != nil || sn != 4 {
		t.Fatalf("mount after a fence of 3: %d, %v", sn, err)
	}
}
