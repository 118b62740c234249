package repl

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/plumeria-fs/plumeria/clustermap"
)

// Core is one brick's replication state: for every placement group, the
// map epoch at which its primary last changed (the lead), whether the
// in-sync members were reconciled for that lead, and the members that
// missed a change this brick applied as primary (faults); for the brick,
// its seq counter, its primary lease and the epoch every brick has
// installed. It decides, for the brick's I/O layer:
//
//   - whether a client request may be served here (Admit, then Serve once
//     the PG's lock is held), with a typed Refusal otherwise;
//   - the seqs of new blocks (NextSeq) and the backfill horizon (Horizon);
//   - what a replicated change comes to (Replicated: acknowledge, retry, or
//     fail; who missed it);
//   - whether a peer's replication traffic is accepted (CheckMember);
//   - what background work is due (Ready: fault reports for the
//     coordinator, PGs to reconcile, members to backfill).
//
// It does no I/O and reads no clock: time comes in through Tick and
// Request.Now, maps through Learn and Install. Not safe for concurrent
// use: the brick serialises calls with one mutex; the simulator in
// repltest drives several Cores with a model network and store.
type Core struct {
	self       string
	now        int64 // nanoseconds, from Tick
	leaseUntil int64 // may act as primary until then
	installed  uint64
	lastSeq    uint64
	// Seqs up to durable may be assigned: the brick recorded them as
	// reserved on disk (a restarted brick counts on past them). reserved
	// is the reservation asked for and not yet confirmed.
	durable, reserved uint64
	latest            *clustermap.Map
	serving           *clustermap.Map
	pgs               map[PGKey]*pgState
	out               Ready
	// reconcileAt is when PGs that still need a reconciliation are
	// offered again in Ready.Reconcile.
	reconcileAt int64
	// legacy reverts the fixes of two divergence bugs the chaos harness
	// found, for the simulator's scenarios that must find them again
	// (tests only): a primary whose own apply failed while backups applied
	// the change did not count itself as having missed it (selfMiss), and
	// a new primary served without reconciling its in-sync members first
	// (reconcile).
	legacy struct{ selfMiss, reconcile bool }
}

// PGKey names a placement group of a volume.
type PGKey struct {
	Vol uint64
	PG  uint32
}

type pgState struct {
	lead       uint64 // map epoch at which the PG's primary last changed
	reconciled uint64 // the lead whose in-sync members were reconciled
	faults     []fault
	reportAt   int64 // next time the faults are reported again
}

// fault is a member that missed a change while the PG's Since was since.
// It is resolved once the member is gone, or syncing under a newer Since
// (a backfill pass that starts after the miss), in the serving map or in
// a map learned at epoch seen (0: none yet) at or below the serving one.
type fault struct {
	brick string
	since uint64
	seen  uint64
}

// Timers of the background work, in nanoseconds.
const (
	FaultReportRetry = 200e6
	ReconcileRetry   = 500e6
)

// RestartSeqGap is how far past its highest stored seq a brick without a
// seq reservation on disk (made by an older version) starts assigning:
// more seqs than a brick can have assigned and not yet stored. A map
// epoch's counter (2^32) allows 256 such restarts within one epoch.
const RestartSeqGap = 1 << 24

// SeqReserve is how many seqs one reservation covers: a brick records a
// new reservation on disk (one small synchronous write) after this many
// seqs, and at the first seq of each new map epoch it assigns under.
const SeqReserve = 1 << 20

// NewCore returns the state of brick self after a start: maxStored is the
// highest seq in its store (0 when empty) and reserved the seq reservation
// it recorded on disk (0: none). Seqs the brick assigned before it stopped
// but never stored (its own apply runs beside the replication, and may
// fail or be lost in a crash) may be on other members, so it counts on
// from past every seq it may have assigned: a seq never names two blocks,
// and a new lead's horizon covers them.
func NewCore(self string, maxStored, reserved uint64) *Core {
	if maxStored > 0 && reserved == 0 {
		maxStored += RestartSeqGap
	}
	last := max(maxStored, reserved)
	empty := &clustermap.Map{}
	return &Core{self: self, lastSeq: last, durable: last, reserved: last, latest: empty, serving: empty, pgs: map[PGKey]*pgState{}}
}

// Ready is the background work a Core asks its I/O layer to do. Take it
// with Ready, carry it out, and call Advance.
type Ready struct {
	// Reports ask the coordinator to mark members syncing, in order (this
	// brick last: the coordinator hands the lead to the next member in
	// sync, which must not be one that missed the change); stop at the
	// first that fails. Repeated every FaultReportRetry until resolved.
	Reports []Report
	// Reconcile lists PGs this brick leads whose in-sync members must be
	// reconciled before they serve (ensure it under the PG's lock; see
	// NeedsReconcile and Reconciled).
	Reconcile []PGKey
	// Backfills lists syncing members of PGs this brick leads: start a
	// backfill for each unless one runs already.
	Backfills []Backfill
}

// Report asks the coordinator to mark Bricks of PG syncing, in order.
type Report struct {
	PG     PGKey
	Bricks []string
}

// Backfill is a syncing member of a PG this brick leads.
type Backfill struct {
	PG     PGKey
	Target string
}

// HasReady reports whether Ready holds work.
func (c *Core) HasReady() bool {
	return len(c.out.Reports)+len(c.out.Reconcile)+len(c.out.Backfills) > 0
}

// Ready returns the work due; call Advance once it is taken.
func (c *Core) Ready() Ready { return c.out }

// Advance drops the work Ready returned.
func (c *Core) Advance() { c.out = Ready{} }

func (c *Core) pg(k PGKey) *pgState {
	p := c.pgs[k]
	if p == nil {
		p = &pgState{}
		c.pgs[k] = p
	}
	return p
}

// Latest is the newest map learned; Serving the map installed for client
// requests (the brick switches it once requests under the old one ended).
func (c *Core) Latest() *clustermap.Map  { return c.latest }
func (c *Core) Serving() *clustermap.Map { return c.serving }

// Learn records m if it is newer than the latest map, noting each PG whose
// primary changed (a new lead: the PG is reconciled again before it
// serves). On the first map every PG counts as changed. It reports whether
// m was newer.
func (c *Core) Learn(m *clustermap.Map) bool {
	old := c.latest
	if m.Epoch <= old.Epoch {
		return false
	}
	for _, v := range m.Volumes {
		ov := old.VolumeByID(v.ID)
		for i, p := range v.PGs {
			fresh := ov == nil || old.Epoch == 0 || i >= len(ov.PGs)
			if fresh || ov.PGs[i].Primary() != p.Primary() {
				c.pg(PGKey{v.ID, uint32(i)}).lead = m.Epoch
			}
		}
	}
	c.latest = m
	// A member that missed a change is resolved once a map shows it
	// syncing under a newer Since: note it in every map learned, not only
	// in the serving one. This primary backfills the member as soon as it
	// installs such a map, and the coordinator may mark it in sync again
	// before the next map reaches the serving view; a fault checked only
	// against serving maps would then never resolve, and be reported again
	// and again (a resync storm, found by the simulator).
	// A request already admitted under an older serving map must still be
	// refused, so the fault is only marked: it is resolved for every
	// serving map from this epoch on.
	for k, p := range c.pgs {
		for i, f := range p.faults {
			if f.seen == 0 && c.resolves(m, k, f) {
				p.faults[i].seen = m.Epoch
			}
		}
	}
	return true
}

// Install makes m the serving map (requests under the older one have
// ended) and asks for the backfills and reconciliations it calls for.
func (c *Core) Install(m *clustermap.Map) {
	if m.Epoch <= c.serving.Epoch {
		return
	}
	c.serving = m
	for _, v := range m.Volumes {
		for i, p := range v.PGs {
			if p.Primary() != c.self {
				continue
			}
			k := PGKey{v.ID, uint32(i)}
			for _, t := range p.Syncing {
				c.out.Backfills = append(c.out.Backfills, Backfill{k, t})
			}
		}
	}
	c.offerReconciles()
}

// SetLease records a heartbeat's answer: this brick may act as primary
// until until, and every brick that may act as primary has installed map
// epoch installed.
func (c *Core) SetLease(until int64, installed uint64) {
	c.leaseUntil = until
	c.installed = installed
}

// Tick advances the clock to now and re-offers due background work:
// reports of unresolved faults of the PGs this brick leads, and
// reconciliations still to do.
func (c *Core) Tick(now int64) {
	c.now = max(c.now, now)
	for _, k := range c.sortedPGs() {
		p := c.pgs[k]
		if len(p.faults) > 0 && c.now >= p.reportAt {
			if _, ok := c.resolve(c.serving, k); !ok {
				c.report(k)
			}
		}
	}
	if c.now >= c.reconcileAt {
		c.offerReconciles()
	}
}

func (c *Core) sortedPGs() []PGKey {
	keys := make([]PGKey, 0, len(c.pgs))
	for k := range c.pgs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b PGKey) int {
		return cmp.Or(cmp.Compare(a.Vol, b.Vol), cmp.Compare(a.PG, b.PG))
	})
	return keys
}

func (c *Core) offerReconciles() {
	any := false
	for _, v := range c.serving.Volumes {
		for i, p := range v.PGs {
			k := PGKey{v.ID, uint32(i)}
			if _, need := c.NeedsReconcile(k); need && p.Primary() == c.self && !c.legacy.reconcile {
				c.out.Reconcile = append(c.out.Reconcile, k)
				any = true
			}
		}
	}
	if any {
		c.reconcileAt = c.now + ReconcileRetry
	}
}

// Writer is who sends a change: a mount's id and the epoch of its session.
type Writer struct {
	ID    string
	Epoch uint64
}

// Request is a client request at the primary.
type Request struct {
	PG     PGKey
	Epoch  uint64  // the map epoch the client routed it with
	Writer *Writer // nil for a read
	Now    int64   // when it arrived, in nanoseconds
}

// Admit runs the primary's checks for a client request under the serving
// map m, in order: the PG did not change since the request's epoch, this
// brick leads it with a lease and a settled hand-off, the writer is not
// fenced. needReconcile says the PG's in-sync members were not reconciled
// since this brick took the lead: the caller reconciles first (under the
// PG's lock, see NeedsReconcile). After taking the PG's lock the caller
// calls Serve.
func (c *Core) Admit(m *clustermap.Map, r Request) (needReconcile bool, err error) {
	if err := c.checkEpoch(r.PG, r.Epoch); err != nil {
		return false, err
	}
	v, p, err := Locate(m, r.PG.Vol, r.PG.PG, 0, 0)
	if err != nil {
		return false, err
	}
	if p.Primary() != c.self {
		return false, refuse(NotPrimary, "brick %s is not the primary of volume %s pg %d (%s is)", c.self, v.Name, r.PG.PG, p.Primary())
	}
	if r.Now >= c.leaseUntil {
		return false, refuse(NoLease, "brick %s: primary lease expired (coordinator unreachable)", c.self)
	}
	st := c.pg(r.PG)
	if c.installed < st.lead {
		return false, refuse(HandOff, "brick %s: new primary of volume %s pg %d waits until the previous primary has learned map epoch %d", c.self, v.Name, r.PG.PG, st.lead)
	}
	if r.Writer != nil {
		if err := CheckFence(m, r.Writer); err != nil {
			return false, err
		}
	}
	return st.reconciled != st.lead && !c.legacy.reconcile, nil
}

// CheckFence refuses a change from a writer the map fences.
func CheckFence(m *clustermap.Map, w *Writer) error {
	if w == nil || w.ID == "" {
		return refuse(BadRequest, "write without a writer id")
	}
	if min := m.FenceEpoch(w.ID); w.Epoch < min {
		return refuse(Fenced, "writer %s is fenced: epoch %d is below %d", w.ID, w.Epoch, min)
	}
	return nil
}

// checkEpoch refuses a request routed with a map older than the last
// change of its PG's configuration in the newest map (PG.Since).
func (c *Core) checkEpoch(k PGKey, epoch uint64) error {
	if changed := c.since(k); epoch < changed {
		return refuse(Stale, "stale map epoch %d: the placement group changed at epoch %d", epoch, changed)
	}
	return nil
}

// since is the epoch of the last change of a PG's configuration in the
// newest map.
func (c *Core) since(k PGKey) uint64 {
	v := c.latest.VolumeByID(k.Vol)
	if v == nil || int(k.PG) >= len(v.PGs) {
		return 0
	}
	return v.PGs[k.PG].Since
}

// ServeEpoch is the map epoch a primary serves a request of epoch under:
// one that knows the PG's newest configuration (backups refuse requests
// from a primary routed with an older one).
func (c *Core) ServeEpoch(k PGKey, epoch uint64) uint64 { return max(epoch, c.since(k)) }

// Serve checks, with the PG's lock held, that the PG is not waiting for a
// member that missed a change to be resynced. A fault recorded while this
// brick led the PG before, still unresolved, is reported again.
func (c *Core) Serve(m *clustermap.Map, k PGKey) error {
	left, ok := c.resolve(m, k)
	if ok {
		return nil
	}
	c.report(k)
	name := fmt.Sprint(k.Vol)
	if v := m.VolumeByID(k.Vol); v != nil {
		name = v.Name
	}
	return refuse(Faulty, "volume %s pg %d: replicas %v missed a change and are being resynced; retry", name, k.PG, left)
}

// report offers k's unresolved faults to the coordinator, this brick last.
func (c *Core) report(k PGKey) {
	p := c.pgs[k]
	v := c.serving.VolumeByID(k.Vol)
	if v == nil || int(k.PG) >= len(v.PGs) || v.PGs[k.PG].Primary() != c.self {
		return // only a primary reports; it reports again when it leads again
	}
	var bricks []string
	for _, f := range p.faults {
		if !slices.Contains(bricks, f.brick) {
			bricks = append(bricks, f.brick)
		}
	}
	slices.SortStableFunc(bricks, func(a, b string) int {
		return cmp.Compare(boolInt(a == c.self), boolInt(b == c.self))
	})
	c.out.Reports = append(c.out.Reports, Report{k, bricks})
	p.reportAt = c.now + FaultReportRetry
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// resolve reports whether every failed member of k is syncing under a
// newer Since or no longer a member in m, clearing the fault if so;
// otherwise it lists the members left.
func (c *Core) resolve(m *clustermap.Map, k PGKey) (left []string, ok bool) {
	st := c.pgs[k]
	if st == nil || len(st.faults) == 0 {
		return nil, true
	}
	v := m.VolumeByID(k.Vol)
	if v == nil || int(k.PG) >= len(v.PGs) {
		return []string{st.faults[0].brick}, false
	}
	var rest []fault
	for _, f := range st.faults {
		if !c.resolves(m, k, f) && (f.seen == 0 || m.Epoch < f.seen) {
			rest = append(rest, f)
			left = append(left, f.brick)
		}
	}
	st.faults = rest
	return left, len(rest) == 0
}

// resolves reports whether m resolves fault f of PG k: its member is gone,
// or syncing under a newer Since.
func (c *Core) resolves(m *clustermap.Map, k PGKey, f fault) bool {
	v := m.VolumeByID(k.Vol)
	if v == nil || int(k.PG) >= len(v.PGs) {
		return false
	}
	p := v.PGs[k.PG]
	if f.brick == c.self && p.Primary() == c.self && len(p.InSync()) == 1 {
		// This primary missed a change others applied, but none of them
		// is in sync any more: they are backfilled from here.
		return true
	}
	return !slices.Contains(p.Bricks, f.brick) || (slices.Contains(p.Syncing, f.brick) && p.Since > f.since)
}

// MarkFault records members of k that missed a change while the PG's
// Since was since, and reports them.
func (c *Core) MarkFault(k PGKey, since uint64, missed []string) {
	if len(missed) == 0 {
		return
	}
	p := c.pg(k)
	for _, b := range missed {
		if !slices.ContainsFunc(p.faults, func(f fault) bool { return f.brick == b && f.since == since }) {
			p.faults = append(p.faults, fault{brick: b, since: since})
		}
	}
	c.report(k)
}

// Faults lists the members of k recorded as having missed a change.
func (c *Core) Faults(k PGKey) []string {
	var out []string
	if p := c.pgs[k]; p != nil {
		for _, f := range p.faults {
			out = append(out, f.brick)
		}
	}
	return out
}

// NextSeq assigns a fresh seq under map epoch. When it lies above the
// reservation on disk, reserve is the reservation to record first: the
// caller must not use the seq before it recorded at least reserve and
// called Reserved.
func (c *Core) NextSeq(epoch uint64) (seq, reserve uint64, err error) {
	seq, err = NextSeq(c.lastSeq, epoch)
	if err != nil {
		return 0, 0, refuse(SeqExhausted, "brick %s: %v", c.self, err)
	}
	c.lastSeq = seq
	if seq > c.durable {
		if seq > c.reserved {
			c.reserved = seq + SeqReserve
		}
		reserve = c.reserved
	}
	return seq, reserve, nil
}

// Reserved records that seqs up to r are reserved on disk.
func (c *Core) Reserved(r uint64) { c.durable = max(c.durable, r) }

// LastSeq is the highest seq assigned here.
func (c *Core) LastSeq() uint64 { return c.lastSeq }

// Horizon is the backfill horizon of a PG this brick leads: every seq it
// has assigned so far, and every seq assigned under an earlier lead
// (another primary's, whose seqs this brick's own counter may be behind).
// Seqs this brick assigns later are above it.
func (c *Core) Horizon(k PGKey) uint64 {
	return max(c.lastSeq, c.pg(k).lead<<CounterBits)
}

// NeedsReconcile reports whether k's current lead has not been
// reconciled, and the lead.
func (c *Core) NeedsReconcile(k PGKey) (lead uint64, need bool) {
	p := c.pg(k)
	return p.lead, p.reconciled != p.lead
}

// Reconciled records that k's in-sync members were reconciled for lead,
// except missed (which could not be reached: they missed changes while
// the PG's Since was since). Faults recorded before are superseded: every
// in-sync member reached now holds exactly what this brick holds.
func (c *Core) Reconciled(k PGKey, lead, since uint64, missed []string) {
	p := c.pg(k)
	p.faults = nil
	p.reconciled = lead
	c.MarkFault(k, since, missed)
}

// Replicated decides a change this primary applied locally and forwarded
// to the other members of PG k (Since since, syncing members syncing),
// given what each made of it. Members that missed
// the change are recorded as faults (the PG refuses requests until they
// are resynced) and reported.
func (c *Core) Replicated(k PGKey, since uint64, r Replies, syncing []string) Outcome {
	out := Decide(c.self, r, syncing)
	if failed := r.failed(); c.legacy.selfMiss && slices.Contains(failed, c.self) {
		// Before the fix: only backups were ever marked, and the
		// primary's own failure was the answer.
		out = Outcome{Missed: slices.DeleteFunc(failed, func(b string) bool { return b == c.self })}
	}
	c.MarkFault(k, since, out.Missed)
	return out
}

// CheckMember refuses replication traffic (a change, a backfill, an
// inventory taken for one) from anyone but the PG's primary, to anyone but
// a member, or routed with a map older than the PG's last change; checked
// against the newest map.
func (c *Core) CheckMember(vol uint64, pg uint32, primary string, epoch uint64) error {
	v, p, err := Locate(c.latest, vol, pg, 0, 0)
	if err != nil {
		return err
	}
	if p.Primary() != primary || !slices.Contains(p.Bricks, c.self) {
		return refuse(NotMember, "volume %s pg %d at epoch %d: %s is not primary or %s not a member", v.Name, pg, c.latest.Epoch, primary, c.self)
	}
	return c.checkEpoch(PGKey{vol, pg}, epoch)
}

// Locate checks that the volume and PG exist in m and that [off, off+n)
// lies in one chunk of that PG.
func Locate(m *clustermap.Map, vol uint64, pg uint32, off, n uint64) (*clustermap.Volume, *clustermap.PG, error) {
	v := m.VolumeByID(vol)
	if v == nil {
		return nil, nil, refuse(NoVolume, "no volume with id %d", vol)
	}
	if int(pg) >= len(v.PGs) {
		return nil, nil, refuse(BadRequest, "volume %s has no placement group %d", v.Name, pg)
	}
	if n > 0 {
		if off+n-1 < off {
			return nil, nil, refuse(BadRequest, "range at %d length %d passes 2^64", off, n)
		}
		cb := uint64(v.ChunkBytes)
		if off/cb != (off+n-1)/cb {
			return nil, nil, refuse(BadRequest, "range at %d length %d crosses a chunk boundary (chunk %d bytes)", off, n, cb)
		}
		if v.PGOf(off) != pg {
			return nil, nil, refuse(BadRequest, "offset %d belongs to pg %d, not %d", off, v.PGOf(off), pg)
		}
	}
	return v, &v.PGs[pg], nil
}
