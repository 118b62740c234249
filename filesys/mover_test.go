package filesys

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys/fstest"
	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// fakePolicies is a PolicyDevice over nothing: every block of a range is
// live, in the home unless a Relayout moved it; it records the calls.
type fakePolicies struct {
	home Policy
	mu   sync.Mutex
	ids  map[Policy]uint16
	at   map[uint64]uint16 // block number → profile id (absent: home)
	ops  []relayoutCall
	seen int // EnsureProfile calls
}

type relayoutCall struct {
	off, n uint64
	id     uint16
}

func newFakePolicies() *fakePolicies {
	home, _ := ParsePolicy("copies=2")
	return &fakePolicies{home: home, ids: map[Policy]uint16{}, at: map[uint64]uint16{}}
}

func (f *fakePolicies) EnsureProfile(ctx context.Context, p Policy) (uint16, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen++
	if p.IsHome() || p == f.home {
		return 0, nil
	}
	if p.Class == "nvme" {
		return 0, fmt.Errorf("%w: policy %s: no bricks of class nvme", ErrInvalid, p)
	}
	if id, ok := f.ids[p]; ok {
		return id, nil
	}
	f.ids[p] = uint16(len(f.ids) + 1)
	return f.ids[p], nil
}

func (f *fakePolicies) Relayout(ctx context.Context, off, n uint64, id uint16, progress func(done, total int64)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops = append(f.ops, relayoutCall{off, n, id})
	for b := off / layout.BlockBytes; b < (off+n)/layout.BlockBytes; b++ {
		f.at[b] = id
	}
	return nil
}

func (f *fakePolicies) Layout(ctx context.Context, off, n uint64) (map[uint16]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[uint16]int64{}
	for b := off / layout.BlockBytes; b < (off+n)/layout.BlockBytes; b++ {
		out[f.at[b]]++
	}
	return out, nil
}

func (f *fakePolicies) Profiles(ctx context.Context) (map[uint16]Policy, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[uint16]Policy{0: f.home}
	for p, id := range f.ids {
		out[id] = p
	}
	return out, nil
}

func (f *fakePolicies) calls() []relayoutCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ops)
}

// waitCalls waits up to 5 s for n relayout calls (a woken pass runs on
// the mover's goroutine).
func (f *fakePolicies) waitCalls(t *testing.T, n int) []relayoutCall {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if c := f.calls(); len(c) >= n {
			return c
		}
	}
	t.Fatalf("%d relayout calls, want %d", len(f.calls()), n)
	return nil
}

type moverWorld struct {
	fs  *FS
	pd  *fakePolicies
	now time.Time
	mu  sync.Mutex
}

func (w *moverWorld) clock() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.now
}

func (w *moverWorld) advance(d time.Duration) {
	w.mu.Lock()
	w.now = w.now.Add(d)
	w.mu.Unlock()
}

// newMoverWorld opens a file system with a fake PolicyDevice, no periodic
// mover passes, and quiet as MoveQuiet.
func newMoverWorld(t *testing.T, quiet time.Duration) *moverWorld {
	t.Helper()
	dev := fstest.NewMemDevice()
	if _, err := Format(context.Background(), dev, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	w := &moverWorld{pd: newFakePolicies(), now: time.Now()}
	fs, err := Open(context.Background(), Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "a", Session: 1,
		Policies: w.pd, MoveInterval: -1, MoveQuiet: quiet, Now: w.clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close(context.Background()) })
	w.fs = fs
	return w
}

func (w *moverWorld) mkdir(t *testing.T, parent uint64, name, policy string) uint64 {
	t.Helper()
	a, err := w.fs.Mkdir(context.Background(), parent, name, 0o755, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	if policy != "" {
		if err := w.fs.Setxattr(context.Background(), a.Ino, PolicyXattr, []byte(policy), 0); err != nil {
			t.Fatal(err)
		}
	}
	return a.Ino
}

// file creates name in parent with size bytes (more than fit inline).
func (w *moverWorld) file(t *testing.T, parent uint64, name string, size int) uint64 {
	t.Helper()
	ctx := context.Background()
	a, err := w.fs.Create(ctx, parent, name, 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.fs.Write(ctx, a.Ino, 0, bytes.Repeat([]byte{7}, size), 0, false); err != nil {
		t.Fatal(err)
	}
	return a.Ino
}

func TestPolicyInherited(t *testing.T) {
	ctx := context.Background()
	w := newMoverWorld(t, -1)
	a := w.mkdir(t, RootIno, "a", "ec=4+2 domain=rack")
	b := w.mkdir(t, a, "b", "")
	c := w.mkdir(t, b, "c", "")
	if p, from, err := w.fs.PolicyAt(ctx, RootIno); err != nil || !p.IsHome() || from != 0 {
		t.Fatalf("root: %v from %d, %v", p, from, err)
	}
	if p, from, err := w.fs.PolicyAt(ctx, c); err != nil || p.String() != "ec=4+2 domain=rack" || from != a {
		t.Fatalf("c: %v from %d, %v (a is %d)", p, from, err, a)
	}
	if err := w.fs.Setxattr(ctx, b, PolicyXattr, []byte("copies=3"), 0); err != nil {
		t.Fatal(err)
	}
	if p, from, err := w.fs.PolicyAt(ctx, c); err != nil || p.String() != "copies=3" || from != b {
		t.Fatalf("c under b's own: %v from %d, %v", p, from, err)
	}
	if err := w.fs.Removexattr(ctx, b, PolicyXattr); err != nil {
		t.Fatal(err)
	}
	if p, from, _ := w.fs.PolicyAt(ctx, c); from != a {
		t.Fatalf("b's removed: %v from %d", p, from)
	}
	// The stored text is the normalised policy.
	if v, err := w.fs.Getxattr(ctx, a, PolicyXattr); err != nil || string(v) != "ec=4+2 domain=rack" {
		t.Fatalf("stored %q %v", v, err)
	}
}

func TestPolicyXattrRefused(t *testing.T) {
	ctx := context.Background()
	w := newMoverWorld(t, -1)
	d := w.mkdir(t, RootIno, "d", "copies=3")
	f := w.file(t, d, "f", 20000)
	before := w.pd.seen
	for _, bad := range []string{"ec=4", "copies=0", "ec=4+2 domain=room", ""} {
		if err := w.fs.Setxattr(ctx, d, PolicyXattr, []byte(bad), 0); !errors.Is(err, ErrInvalid) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
	if w.pd.seen != before {
		t.Fatal("a policy that does not parse reached the cluster")
	}
	if err := w.fs.Setxattr(ctx, d, PolicyXattr, []byte("ec=4+2 class=nvme"), 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a policy the cluster refuses: %v", err)
	}
	if err := w.fs.Setxattr(ctx, f, PolicyXattr, []byte("ec=4+2"), 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a policy on a file: %v", err)
	}
	if v, err := w.fs.Getxattr(ctx, d, PolicyXattr); err != nil || string(v) != "copies=3" {
		t.Fatalf("refusals changed the policy: %q %v", v, err)
	}
	if err := w.fs.Setxattr(ctx, d, LayoutXattr, []byte("{}"), 0); !errors.Is(err, ErrNotPermitted) {
		t.Fatalf("set %s: %v", LayoutXattr, err)
	}
	if err := w.fs.Removexattr(ctx, d, LayoutXattr); !errors.Is(err, ErrNotPermitted) {
		t.Fatalf("remove %s: %v", LayoutXattr, err)
	}
	if names, err := w.fs.Listxattr(ctx, d); err != nil || slices.Contains(names, LayoutXattr) || !slices.Contains(names, PolicyXattr) {
		t.Fatalf("listed %v %v", names, err)
	}
	// Only the one accepted value (copies=3, profile 1) moves f.
	w.pd.waitCalls(t, 1)
	time.Sleep(50 * time.Millisecond)
	if c := w.pd.calls(); len(c) != 1 || c[0].id != 1 {
		t.Fatalf("refused values moved data: %+v", c)
	}
}

func TestMoverRelayoutsOnce(t *testing.T) {
	ctx := context.Background()
	w := newMoverWorld(t, -1)
	d := w.mkdir(t, RootIno, "d", "")
	f := w.file(t, d, "f", 3*layout.BlockBytes+100)
	w.file(t, d, "small", 10)      // inline: nothing to move
	w.file(t, RootIno, "h", 20000) // under the home policy: stays
	if err := w.fs.Setxattr(ctx, d, PolicyXattr, []byte("ec=4+2"), 0); err != nil {
		t.Fatal(err)
	}
	calls := w.pd.waitCalls(t, 1)
	want := relayoutCall{off: layout.ExtentAddr(f), n: 4 * layout.BlockBytes, id: 1}
	if len(calls) != 1 || calls[0] != want {
		t.Fatalf("relayout calls %+v, want one %+v", calls, want)
	}
	st, err := w.fs.MoveData(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.pd.calls()) != 1 {
		t.Fatalf("a compliant file relayouted again: %+v", w.pd.calls())
	}
	if st.Files != 3 || st.Inline != 1 || st.Compliant != 2 || st.Moved != 0 || st.Pending() != 0 ||
		st.TotalBytes != 4*layout.BlockBytes+5*layout.BlockBytes || st.CompliantBytes != st.TotalBytes {
		t.Fatalf("second pass %+v", st)
	}

	// The layout attribute: the directory complies, the file is in ec=4+2.
	var info LayoutInfo
	b, err := w.fs.Getxattr(ctx, d, LayoutXattr)
	if err != nil || json.Unmarshal(b, &info) != nil {
		t.Fatalf("%s: %s %v", LayoutXattr, b, err)
	}
	if info.Policy != "ec=4+2" || info.Home != "copies=2" || info.Files != 2 || info.InlineFiles != 1 ||
		info.TotalBytes != 4*layout.BlockBytes || info.CompliantBytes == nil || *info.CompliantBytes != info.TotalBytes ||
		info.Layouts["ec=4+2"] != info.TotalBytes {
		t.Fatalf("directory layout %s", b)
	}
	b, err = w.fs.Getxattr(ctx, RootIno, LayoutXattr)
	if err != nil || json.Unmarshal(b, &info) != nil {
		t.Fatal(err)
	}
	if info.Policy != "home" || info.Layouts["home"] != 5*layout.BlockBytes || *info.CompliantBytes != 9*layout.BlockBytes {
		t.Fatalf("root layout %s", b)
	}
	b, err = w.fs.Getxattr(ctx, f, LayoutXattr)
	info = LayoutInfo{}
	if err != nil || json.Unmarshal(b, &info) != nil || info.CompliantBytes != nil || info.Layouts["ec=4+2"] != 4*layout.BlockBytes {
		t.Fatalf("file layout %s %v", b, err)
	}
}

func TestMoverQuiet(t *testing.T) {
	ctx := context.Background()
	w := newMoverWorld(t, time.Hour)
	d := w.mkdir(t, RootIno, "d", "ec=4+2")
	w.file(t, d, "f", 20000)
	st, err := w.fs.MoveData(ctx, nil)
	if err != nil || st.Quiet != 1 || st.Pending() != 1 || len(w.pd.calls()) != 0 {
		t.Fatalf("a file just written: %+v %v, calls %+v", st, err, w.pd.calls())
	}
	w.advance(2 * time.Hour)
	st, err = w.fs.MoveData(ctx, nil)
	if err != nil || st.Moved != 1 || len(w.pd.calls()) != 1 {
		t.Fatalf("a file quiet for 2h: %+v %v, calls %+v", st, err, w.pd.calls())
	}
}

func TestMoverWokenByRename(t *testing.T) {
	ctx := context.Background()
	w := newMoverWorld(t, -1)
	ec := w.mkdir(t, RootIno, "ec", "ec=4+2")
	other := w.mkdir(t, RootIno, "other", "")
	f := w.file(t, RootIno, "f", 20000)
	g := w.file(t, RootIno, "g", 20000)
	// A move between two directories of the home policy moves nothing.
	if err := w.fs.Rename(ctx, RootIno, "g", other, "g", 0); err != nil {
		t.Fatal(err)
	}
	if err := w.fs.Rename(ctx, RootIno, "f", ec, "f", 0); err != nil {
		t.Fatal(err)
	}
	calls := w.pd.waitCalls(t, 1)
	if len(calls) != 1 || calls[0] != (relayoutCall{off: layout.ExtentAddr(f), n: 5 * layout.BlockBytes, id: 1}) {
		t.Fatalf("calls %+v (g is %d)", calls, g)
	}
	// A directory moved in: its files follow the policy it now inherits.
	sub := w.mkdir(t, other, "sub", "")
	h := w.file(t, sub, "h", 9000)
	if err := w.fs.Rename(ctx, other, "sub", ec, "sub", 0); err != nil {
		t.Fatal(err)
	}
	calls = w.pd.waitCalls(t, 2)
	if len(calls) != 2 || calls[1].off != layout.ExtentAddr(h) {
		t.Fatalf("calls %+v", calls)
	}
}

func TestMoverHardLinksTakeStricter(t *testing.T) {
	ctx := context.Background()
	w := newMoverWorld(t, -1)
	a := w.mkdir(t, RootIno, "a", "ec=4+2")
	b := w.mkdir(t, RootIno, "b", "ec=8+3")
	f := w.file(t, RootIno, "f", 20000)
	for _, d := range []uint64{a, b} {
		if _, err := w.fs.Link(ctx, f, d, "f"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.fs.MoveData(ctx, nil); err != nil {
		t.Fatal(err)
	}
	id83, _ := w.pd.EnsureProfile(ctx, Policy{K: 8, M: 3})
	var last relayoutCall
	for _, c := range w.pd.calls() {
		if c.off == layout.ExtentAddr(f) {
			last = c
		}
	}
	if last.id != id83 {
		t.Fatalf("linked file ended in profile %d, want ec=8+3 (%d): %+v", last.id, id83, w.pd.calls())
	}
}

// TestMoverMovesBackHome: a directory whose policy becomes the volume's own
// replication has its coded files moved back home (relayout to profile 0).
func TestMoverMovesBackHome(t *testing.T) {
	ctx := context.Background()
	w := newMoverWorld(t, -1)
	d := w.mkdir(t, RootIno, "d", "ec=4+2")
	w.file(t, d, "f", 20000)
	if _, err := w.fs.MoveData(ctx, nil); err != nil || len(w.pd.calls()) != 1 {
		t.Fatalf("%v %+v", err, w.pd.calls())
	}
	if err := w.fs.Setxattr(ctx, d, PolicyXattr, []byte("copies=2"), 0); err != nil { // the home
		t.Fatal(err)
	}
	st, err := w.fs.MoveData(ctx, nil)
	if err != nil || st.Moved != 1 || st.Pending() != 0 || st.Failed != 0 {
		t.Fatalf("%+v %v", st, err)
	}
	calls := w.pd.calls()
	if last := calls[len(calls)-1]; last.id != 0 {
		t.Fatalf("last relayout to profile %d, want 0 (home): %+v", last.id, calls)
	}
	if st, err := w.fs.MoveData(ctx, nil); err != nil || st.Moved != 0 || st.Compliant != 1 {
		t.Fatalf("a pass after the move home: %+v %v", st, err)
	}
}
