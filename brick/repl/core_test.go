package repl

import (
	"slices"
	"testing"

	"github.com/plumeria-fs/plumeria/clustermap"
)

func mapWith(epoch uint64, p clustermap.PG) *clustermap.Map {
	return &clustermap.Map{Epoch: epoch, Volumes: []clustermap.Volume{{ID: 1, Name: "v", ChunkBytes: 1 << 20, PGs: []clustermap.PG{p}}}}
}

func reports(c *Core) [][]string {
	var out [][]string
	for _, r := range c.Ready().Reports {
		out = append(out, r.Bricks)
	}
	c.Advance()
	return out
}

// TestFaultOutlivesLeadership: a fault recorded while this brick led a PG,
// not reported while it did not lead it, is reported again when it leads
// the PG again (instead of refusing the PG's requests forever), and clears
// once the member is syncing under a newer Since.
func TestFaultOutlivesLeadership(t *testing.T) {
	c := NewCore("b1", 0, 0)
	k := PGKey{1, 0}
	m := mapWith(5, clustermap.PG{Bricks: []string{"b3", "b1", "b2"}, Since: 5})
	c.Learn(m)
	c.Install(m)
	c.Advance()
	c.MarkFault(k, 4, []string{"b2"})
	if r := reports(c); len(r) != 0 {
		t.Fatalf("a brick that does not lead the PG reported %v", r)
	}
	// b1 leads again; b2 still in sync in the map: refused, and reported.
	m = mapWith(9, clustermap.PG{Bricks: []string{"b1", "b2", "b3"}, Since: 9})
	c.Learn(m)
	c.Install(m)
	if err := c.Serve(m, k); KindOf(err) != Faulty {
		t.Fatalf("a PG whose member missed a change served: %v", err)
	}
	if r := reports(c); len(r) == 0 || !slices.Equal(r[len(r)-1], []string{"b2"}) {
		t.Fatalf("reports %v, want b2", r)
	}
	// Reported again after FaultReportRetry, not before.
	c.Tick(FaultReportRetry / 2)
	if r := reports(c); len(r) != 0 {
		t.Fatalf("reported again before the retry interval: %v", r)
	}
	c.Tick(FaultReportRetry)
	if r := reports(c); len(r) != 1 {
		t.Fatalf("not reported again after the retry interval: %v", r)
	}
	// The coordinator marks b2 syncing under a newer Since: resolved.
	m = mapWith(10, clustermap.PG{Bricks: []string{"b1", "b3", "b2"}, Syncing: []string{"b2"}, Since: 10})
	c.Learn(m)
	c.Install(m)
	if err := c.Serve(m, k); err != nil {
		t.Fatalf("fault not resolved by a resync: %v", err)
	}
	c.Tick(10 * FaultReportRetry)
	if r := reports(c); len(r) != 0 {
		t.Fatalf("a resolved fault was reported: %v", r)
	}
}

// TestSelfFaultReportedLast: when this primary and a backup both missed a
// change another member applied, the backup is reported first, so the
// lead the coordinator hands on never goes to a member without the change.
func TestSelfFaultReportedLast(t *testing.T) {
	c := NewCore("b1", 0, 0)
	m := mapWith(4, clustermap.PG{Bricks: []string{"b1", "b2", "b3"}, Since: 4})
	c.Learn(m)
	c.Install(m)
	c.Advance()
	c.MarkFault(PGKey{1, 0}, 4, []string{"b1", "b2"})
	if r := reports(c); len(r) != 1 || !slices.Equal(r[0], []string{"b2", "b1"}) {
		t.Fatalf("reported %v, want the backup before this primary", r)
	}
}

// TestAdmit: the refusals of a client request, in order, and the
// reconciliation a new lead needs before it serves.
func TestAdmit(t *testing.T) {
	c := NewCore("b1", 0, 0)
	k := PGKey{1, 0}
	m := mapWith(7, clustermap.PG{Bricks: []string{"b1", "b2"}, Since: 6})
	m.Fences = map[string]uint64{"w": 3}
	c.Learn(m)
	c.Install(m)
	w := &Writer{ID: "w", Epoch: 3}
	check := func(r Request, want Kind) bool {
		t.Helper()
		need, err := c.Admit(m, r)
		if KindOf(err) != want {
			t.Fatalf("Admit(%+v) = %v, want %v", r, err, want)
		}
		return need
	}
	check(Request{PG: k, Epoch: 5, Writer: w, Now: 1}, Stale)
	check(Request{PG: k, Epoch: 7, Writer: w, Now: 1}, NoLease)
	c.SetLease(100, 6)
	check(Request{PG: k, Epoch: 7, Writer: w, Now: 1}, HandOff) // led since epoch 7, installed 6
	c.SetLease(100, 7)
	check(Request{PG: k, Epoch: 7, Writer: &Writer{ID: "w", Epoch: 2}, Now: 1}, Fenced)
	check(Request{PG: k, Epoch: 7, Writer: w, Now: 100}, NoLease)
	if !check(Request{PG: k, Epoch: 7, Writer: w, Now: 1}, 0) {
		t.Fatal("a new lead did not ask for a reconciliation")
	}
	lead, need := c.NeedsReconcile(k)
	if !need || lead != 7 {
		t.Fatalf("NeedsReconcile = %d, %v", lead, need)
	}
	if h := c.Horizon(k); h != 7<<CounterBits {
		t.Fatalf("horizon %d, want the lead's base %d", h, uint64(7)<<CounterBits)
	}
	c.Reconciled(k, lead, 6, nil)
	if check(Request{PG: k, Epoch: 7, Now: 1}, 0) {
		t.Fatal("asked for a reconciliation again")
	}
	// b2 takes the lead: this brick refuses; when b1 leads again it must
	// reconcile again.
	m2 := mapWith(8, clustermap.PG{Bricks: []string{"b2", "b1"}, Since: 8})
	c.Learn(m2)
	if _, err := c.Admit(m2, Request{PG: k, Epoch: 8, Now: 1}); KindOf(err) != NotPrimary {
		t.Fatalf("not primary: %v", err)
	}
	m3 := mapWith(9, clustermap.PG{Bricks: []string{"b1", "b2"}, Since: 9})
	c.Learn(m3)
	c.SetLease(100, 9)
	if need, err := c.Admit(m3, Request{PG: k, Epoch: 9, Now: 1}); err != nil || !need {
		t.Fatalf("a lead regained: need %v, %v", need, err)
	}
}

// TestCheckMember: replication traffic only from the primary, to members,
// with a map not older than the PG's last change.
func TestCheckMember(t *testing.T) {
	c := NewCore("b2", 0, 0)
	c.Learn(mapWith(7, clustermap.PG{Bricks: []string{"b1", "b2"}, Since: 6}))
	if err := c.CheckMember(1, 0, "b1", 6); err != nil {
		t.Fatal(err)
	}
	if err := c.CheckMember(1, 0, "b3", 7); KindOf(err) != NotMember {
		t.Fatalf("from a non-primary: %v", err)
	}
	if err := c.CheckMember(1, 0, "b1", 5); KindOf(err) != Stale {
		t.Fatalf("stale: %v", err)
	}
	if err := c.CheckMember(2, 0, "b1", 7); KindOf(err) != NoVolume {
		t.Fatalf("no volume: %v", err)
	}
}

// TestRestartSeq: a restarted core counts on past the seqs it may have
// assigned without storing them: past its reservation on disk, or past
// its highest stored seq by RestartSeqGap when it has none.
func TestRestartSeq(t *testing.T) {
	if s, _, err := NewCore("b1", 5<<CounterBits+10, 0).NextSeq(5); err != nil || s != 5<<CounterBits+10+RestartSeqGap+1 {
		t.Fatalf("without a reservation: seq %d, %v", s, err)
	}
	if s, _, _ := NewCore("b1", 5<<CounterBits+10, 6<<CounterBits+7).NextSeq(6); s != 6<<CounterBits+8 {
		t.Fatalf("with a reservation: seq %d", s)
	}
	if s, _, _ := NewCore("b1", 0, 0).NextSeq(3); s != 3<<CounterBits+1 {
		t.Fatalf("empty store: seq %d", s)
	}
}

// TestSeqReservation: no seq above the reservation on disk is handed out
// without asking for a new one first, and one reservation covers many.
func TestSeqReservation(t *testing.T) {
	c := NewCore("b1", 0, 0)
	s, r, _ := c.NextSeq(3)
	if r < s {
		t.Fatalf("seq %d handed out with reservation %d", s, r)
	}
	s2, r2, _ := c.NextSeq(3)
	if r2 != r {
		t.Fatalf("a second seq %d before the reservation was recorded: reserve %d, want %d again", s2, r2, r)
	}
	c.Reserved(r)
	if _, r3, _ := c.NextSeq(3); r3 != 0 {
		t.Fatalf("asked to reserve %d inside a recorded reservation", r3)
	}
	// A new epoch's seqs lie above the reservation: a new one.
	s4, r4, _ := c.NextSeq(4)
	if r4 < s4 {
		t.Fatalf("new epoch: seq %d, reserve %d", s4, r4)
	}
	// A restart counts on past the reservation, even with nothing stored.
	if s5, _, _ := NewCore("b1", 0, r4).NextSeq(4); s5 <= s4 || s5 <= r4 {
		t.Fatalf("after a restart: seq %d, not past %d (reserved %d)", s5, s4, r4)
	}
}
