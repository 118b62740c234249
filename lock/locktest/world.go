// Package locktest is a deterministic simulator for the lock service: N
// clerks (with a model fs-node owner each), M lock servers, a coordinator
// that assigns lock groups, fences and records recoveries, and a network
// that drops, delays, reorders and duplicates messages and partitions
// nodes. Everything runs in one goroutine on virtual ticks from one seed,
// so a seed replays a run exactly. The checker (check.go) runs after every
// step.
package locktest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/plumeria-fs/plumeria/lock"
)

// Options shape a run. Zero fields take the values of Defaults (message
// faults and Faults together: all zero means the defaults).
type Options struct {
	Clerks, Servers int
	Groups          int
	Tables          []string
	Locks           int // lock ids 0..Locks-1 in each table
	LeaseTicks      int
	MarginTicks     int
	RetryTicks      int
	IdleTicks       int
	WishRate        float64 // chance per tick that an owner wants a new lock
	GraceTicks      int     // RebuildGraceTicks of the servers
	NoRegistry      bool    // AssignGroups without the session registry (grace must cover)
	ChaosTicks      int     // ticks with faults
	CalmTicks       int     // ticks without faults; every wish must be granted by the end
	DelayMax        int     // network delay in ticks, uniform in [1, DelayMax]
	Drop, Dup       float64
	Faults          Faults
}

// Faults are per-tick probabilities of fault injection during chaos.
type Faults struct {
	ClerkCrash, ServerCrash, Partition, Move, Unmount, LongDelay float64
}

// Defaults returns a small, contended, faulty world.
func Defaults() Options {
	return Options{
		Clerks: 4, Servers: 3, Groups: 8, Tables: []string{"fs0", "fs1"}, Locks: 12,
		LeaseTicks: 40, MarginTicks: 4, RetryTicks: 4, IdleTicks: 60, WishRate: 0.25,
		ChaosTicks: 1500, CalmTicks: 600, DelayMax: 4, Drop: 0.05, Dup: 0.03,
		Faults: Faults{ClerkCrash: 0.002, ServerCrash: 0.0015, Partition: 0.01, Move: 0.004,
			Unmount: 0.001, LongDelay: 0.01},
	}
}

func (o Options) withDefaults() Options {
	d := Defaults()
	if o.Clerks == 0 {
		o.Clerks = d.Clerks
	}
	if o.Servers == 0 {
		o.Servers = d.Servers
	}
	if o.Groups == 0 {
		o.Groups = d.Groups
	}
	if o.Tables == nil {
		o.Tables = d.Tables
	}
	if o.Locks == 0 {
		o.Locks = d.Locks
	}
	if o.LeaseTicks == 0 {
		o.LeaseTicks, o.MarginTicks, o.RetryTicks, o.IdleTicks = d.LeaseTicks, d.MarginTicks, d.RetryTicks, d.IdleTicks
	}
	if o.ChaosTicks == 0 && o.CalmTicks == 0 {
		o.ChaosTicks, o.CalmTicks = d.ChaosTicks, d.CalmTicks
	}
	if o.WishRate == 0 {
		o.WishRate = d.WishRate
	}
	if o.DelayMax == 0 {
		o.DelayMax = d.DelayMax
	}
	if o.Drop == 0 && o.Dup == 0 && o.Faults == (Faults{}) {
		o.Drop, o.Dup, o.Faults = d.Drop, d.Dup, d.Faults
	}
	return o
}

// World is one simulated cluster.
type World struct {
	opts    Options
	rng     *rand.Rand
	now     int64
	steps   int64
	net     network
	coord   *coordinator
	servers []*serverNode
	nodes   []*clerkNode
	check   checker
	trace   []string // recent events, for failure reports
	quiet   bool     // no new wishes (end of calm)
	verbose bool     // trace every delivery ($PLUMERIA_LOCK_TRACE)
}

// New builds a world from seed.
func New(seed uint64, opts Options) *World {
	opts = opts.withDefaults()
	w := &World{opts: opts, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	w.net.cuts = map[[2]int]cut{}
	w.verbose = os.Getenv("PLUMERIA_LOCK_TRACE") != ""
	w.coord = newCoordinator(w)
	for i := range opts.Servers {
		w.servers = append(w.servers, &serverNode{id: i})
	}
	for i := range opts.Clerks {
		w.nodes = append(w.nodes, &clerkNode{id: fmt.Sprintf("n%d", i), idx: i})
	}
	w.check.init(w)
	for _, s := range w.servers {
		w.startServer(s)
	}
	w.coord.rebalance()
	for _, n := range w.nodes {
		w.mount(n)
	}
	return w
}

// Steps is the number of steps (deliveries and ticks) run so far.
func (w *World) Steps() int64 { return w.steps }

// Stats summarises a run.
func (w *World) Stats() string {
	var m lock.Metrics
	for _, s := range w.servers {
		if s.s != nil {
			x := s.s.Metrics()
			m.Grants += x.Grants
			m.Revokes += x.Revokes
			m.Recoveries += x.Recoveries
		}
	}
	return fmt.Sprintf("steps=%d ticks=%d sessions=%d recoveries=%d fences=%d moves=%d granted=%d downgrades=%d (live servers: grants=%d revokes=%d)",
		w.steps, w.now, w.check.sessions, w.check.recoveriesDone, w.coord.fenceCount, w.coord.moves,
		w.check.granted, w.check.downgrades, m.Grants, m.Revokes)
}

// Run runs the chaos phase, then the calm phase, checking after every
// step. It returns the first violation.
func (w *World) Run() error {
	for w.now < int64(w.opts.ChaosTicks) {
		if err := w.tick(true); err != nil {
			return err
		}
	}
	w.heal()
	end := int64(w.opts.ChaosTicks + w.opts.CalmTicks)
	for w.now < end {
		w.quiet = w.now >= end-int64(w.opts.CalmTicks)/3
		if err := w.tick(false); err != nil {
			return err
		}
	}
	if err := w.check.final(); err != nil {
		return w.report(err)
	}
	return nil
}

func (w *World) report(err error) error {
	var b strings.Builder
	for _, s := range w.servers {
		if s.s != nil {
			fmt.Fprintf(&b, "server %d owns %v:\n%s", s.id, s.owned, s.s.DebugString(nil))
		}
	}
	return fmt.Errorf("tick %d step %d: %w\nrecent events:\n%s\n%s", w.now, w.steps, err,
		strings.Join(w.trace, "\n"), b.String())
}

// tick runs one tick: faults, deliveries due, owners, then every node
// ticks. Each delivery, owner turn and node tick is a step.
func (w *World) tick(chaos bool) error {
	w.now++
	if chaos {
		w.inject()
	}
	w.restartDue()
	if err := w.coord.deliverDue(); err != nil {
		return err
	}
	for {
		d, ok := w.net.pop(w.now)
		if !ok {
			break
		}
		if err := w.deliver(d); err != nil {
			return err
		}
	}
	for _, n := range w.nodes {
		if n.c != nil {
			w.own(n)
			if err := w.step(); err != nil {
				return err
			}
		}
	}
	for _, s := range w.servers {
		if s.s != nil {
			s.s.Tick()
			w.drainServer(s)
			if err := w.step(); err != nil {
				return err
			}
		}
	}
	for _, n := range w.nodes {
		if n.c != nil {
			n.c.Tick()
			w.drainClerk(n)
			if err := w.step(); err != nil {
				return err
			}
		}
	}
	return nil
}

// step counts a step and runs the checker.
func (w *World) step() error {
	w.steps++
	for _, s := range w.servers {
		if s.s != nil && s.dirty {
			s.dirty = false
			s.s.CheckInvariants() // panics on a broken invariant
		}
	}
	if err := w.check.after(); err != nil {
		return w.report(err)
	}
	return nil
}

func (w *World) logf(format string, args ...any) {
	keep := 300
	if w.verbose {
		keep = 100000
	}
	if len(w.trace) >= keep {
		w.trace = w.trace[len(w.trace)-keep/2:]
	}
	w.trace = append(w.trace, fmt.Sprintf("%5d ", w.now)+fmt.Sprintf(format, args...))
}

func (w *World) chance(p float64) bool { return w.rng.Float64() < p }

func (w *World) between(lo, hi int) int64 { return int64(lo + w.rng.IntN(hi-lo+1)) }
