// Package plan makes the chaos harness's fault schedule from a seed: which
// fault, on which host, when, for how long. It is pure: the same options
// and topology always give the same schedule, which is what replaying a
// seed (`make chaos SEED=N`) replays. The harness (package chaos) carries
// the faults out against real processes.
//
// The schedule keeps the cluster able to make progress: at most one fault
// at a time touches the server hosts (so a Raft majority and two replicas
// of every chunk stay reachable), at most one touches the fs nodes, and a
// majority/minority split counts as both. Every fault ends before the
// run's duration.
package plan

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind is a kind of fault.
type Kind string

const (
	KillServer  Kind = "kill-server"  // SIGKILL the coordinator+brick process of a server host; restart after Dur
	KillLock    Kind = "kill-lock"    // SIGKILL a lock server process; restart after Dur
	KillFS      Kind = "kill-fs"      // SIGKILL an fs node (its mount); remount after Dur
	PauseServer Kind = "pause-server" // SIGSTOP the coordinator+brick process for Dur (longer than the lease), then SIGCONT
	PauseLock   Kind = "pause-lock"   // the same for a lock server
	PauseFS     Kind = "pause-fs"     // the same for an fs node
	Isolate     Kind = "isolate"      // cut one host off from every other host for Dur
	Split       Kind = "split"        // cut the hosts into a majority and a minority side for Dur
	CutLocks    Kind = "cut-locks"    // an fs node cannot reach the lock servers, but reaches the bricks
	CutBricks   Kind = "cut-bricks"   // an fs node cannot reach bricks and coordinators, but reaches the lock servers
	Loss        Kind = "loss"         // drop Param percent of a host's packets
	Delay       Kind = "delay"        // slow a host's packets down (netem delay, or a rate limit)
	DiskFull    Kind = "disk-full"    // fill the file system under a brick for Dur
	Corrupt     Kind = "corrupt"      // flip bytes in Param stored blocks of a brick (instant)
)

// AllKinds lists every kind, in a fixed order.
var AllKinds = []Kind{KillServer, KillLock, KillFS, PauseServer, PauseLock, PauseFS, Isolate, Split, CutLocks, CutBricks,
	Loss, Delay, DiskFull, Corrupt}

// ParseKinds parses a comma-separated list of kinds ("all" for every
// kind, "none" for none: the workloads alone, as a control).
func ParseKinds(s string) ([]Kind, error) {
	switch s {
	case "", "all":
		return slices.Clone(AllKinds), nil
	case "none":
		return nil, nil
	}
	var out []Kind
	for _, p := range strings.Split(s, ",") {
		k := Kind(strings.TrimSpace(p))
		if !slices.Contains(AllKinds, k) {
			return nil, fmt.Errorf("unknown fault kind %q (kinds: %v)", k, AllKinds)
		}
		out = append(out, k)
	}
	return out, nil
}

// Fault is one scheduled fault.
type Fault struct {
	At, Dur  time.Duration // start, from the start of the workload, and length
	Kind     Kind
	Target   string   // the host it hits (every kind but Split)
	Minority []string // Split: the hosts on the minority side
	Param    int      // Loss: percent of packets; Corrupt: blocks
}

func (f Fault) String() string {
	s := fmt.Sprintf("%6.1fs +%4.1fs %s", f.At.Seconds(), f.Dur.Seconds(), f.Kind)
	switch f.Kind {
	case Split:
		s += " minority " + strings.Join(f.Minority, ",")
	default:
		s += " " + f.Target
	}
	switch f.Kind {
	case Loss:
		s += fmt.Sprintf(" %d%%", f.Param)
	case Corrupt:
		s += fmt.Sprintf(" %d blocks", f.Param)
	}
	return s
}

// End is when the fault is healed.
func (f Fault) End() time.Duration { return f.At + f.Dur }

// Topology names the hosts.
type Topology struct {
	Servers []string // hosts with a coordinator+brick process and a lock server
	FS      []string // hosts with one fs node each
}

// Options shape a schedule.
type Options struct {
	Seed     uint64
	Duration time.Duration // every fault ends by then
	Kinds    []Kind        // kinds to draw from
	Lease    time.Duration // pauses last longer than this
	// Gaps between fault starts are drawn from [GapMin, GapMax].
	GapMin, GapMax time.Duration
}

const warmup = 3 * time.Second

// Make returns the schedule, sorted by start.
func Make(o Options, top Topology) []Fault {
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x5ca1ab1e))
	if o.GapMax < o.GapMin {
		o.GapMax = o.GapMin
	}
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	var out []Fault
	if len(o.Kinds) == 0 || len(top.Servers) == 0 || len(top.FS) == 0 {
		return nil
	}
	for t := warmup; ; {
		t += between(o.GapMin, o.GapMax)
		if t >= o.Duration {
			return out
		}
		for try := 0; try < 8; try++ {
			f := draw(rng, between, o, top, t)
			if f.End() > o.Duration || !fits(out, f, top) {
				continue
			}
			out = append(out, f)
			break
		}
	}
}

// draw picks one fault starting at t.
func draw(rng *rand.Rand, between func(lo, hi time.Duration) time.Duration, o Options, top Topology, t time.Duration) Fault {
	k := o.Kinds[rng.IntN(len(o.Kinds))]
	server := top.Servers[rng.IntN(len(top.Servers))]
	fs := top.FS[rng.IntN(len(top.FS))]
	all := append(slices.Clone(top.Servers), top.FS...)
	host := all[rng.IntN(len(all))]
	f := Fault{At: t, Kind: k}
	switch k {
	case KillServer, KillLock:
		f.Target, f.Dur = server, between(time.Second, 8*time.Second)
	case KillFS:
		f.Target, f.Dur = fs, between(0, 4*time.Second)
	case PauseServer, PauseLock:
		f.Target, f.Dur = server, o.Lease+between(time.Second, 5*time.Second)
	case PauseFS:
		f.Target, f.Dur = fs, o.Lease+between(time.Second, 5*time.Second)
	case Isolate:
		f.Target, f.Dur = host, between(3*time.Second, 20*time.Second)
	case Split:
		// A minority: one server host and some fs nodes.
		f.Minority = []string{server}
		for _, h := range top.FS {
			if rng.IntN(2) == 0 {
				f.Minority = append(f.Minority, h)
			}
		}
		f.Dur = between(3*time.Second, 20*time.Second)
	case CutLocks, CutBricks:
		f.Target, f.Dur = fs, between(3*time.Second, 20*time.Second)
	case Loss:
		f.Target, f.Dur, f.Param = host, between(5*time.Second, 20*time.Second), 10+rng.IntN(31)
	case Delay:
		f.Target, f.Dur = host, between(5*time.Second, 20*time.Second)
	case DiskFull:
		f.Target, f.Dur = server, between(5*time.Second, 15*time.Second)
	case Corrupt:
		f.Target, f.Param = server, 1+rng.IntN(4)
	}
	return f
}

// touches reports which slots f uses: the server hosts, the fs nodes.
func touches(f Fault, top Topology) (servers, fs bool) {
	if f.Kind == Split {
		return true, true
	}
	return slices.Contains(top.Servers, f.Target), slices.Contains(top.FS, f.Target)
}

// settle is the time after a fault is healed before another may use its
// slot: restarts and remounts take a moment.
const settle = 2 * time.Second

// fits reports whether f can run alongside the faults of out still
// active at its start.
func fits(out []Fault, f Fault, top Topology) bool {
	s, fs := touches(f, top)
	for _, g := range out {
		if g.End()+settle <= f.At {
			continue
		}
		gs, gfs := touches(g, top)
		if (s && gs) || (fs && gfs) {
			return false
		}
	}
	return true
}
