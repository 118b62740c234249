// Package check holds the chaos harness's pure parts: the operation
// history the workloads record, the models the history is checked
// against, and the summary table. It does no I/O and reads no clock: the
// harness (package chaos) runs real processes and hands the results here,
// so every checker is tested on hand-written histories.
//
// Checkers and the guarantees of DESIGN.md §9 they defend:
//
//   - Register: linearizability of whole-file writes (temp file + rename,
//     then fsync of the directory) and reads, per key, with porcupine (§9.2
//     coherence, §9.3 atomic rename).
//   - Set: creates, renames and unlinks across nodes; after healing no
//     acknowledged create is lost, no acknowledged unlink comes back, no
//     element shows under two names (§9.1, §9.3).
//   - Durable: bytes acknowledged by fsync survive the crash of the node
//     that wrote them, and nothing the writer did not write shows (§9.1, §4
//     ordered data).
//   - Tree: after a crash the recovered tree is the model's tree after some
//     prefix of the operations that includes every operation acknowledged
//     before the last fsync (§9.1, §9.3).
package check

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Outcome is what the caller learnt about an operation.
type Outcome uint8

const (
	// OK: the call returned success.
	OK Outcome = iota
	// Failed: the call returned an error that proves it took no effect.
	Failed
	// Unknown: it timed out, failed in a way that may have taken effect, or
	// overlapped a crash or remount of its node. It may take effect at any
	// time after its start, or never.
	Unknown
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Failed:
		return "failed"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("outcome(%d)", o)
}

// Kind names an operation of a workload.
type Kind string

const (
	Write  Kind = "write"  // register: whole value
	Read   Kind = "read"   // register
	Create Kind = "create" // set
	Rename Kind = "rename" // set
	Unlink Kind = "unlink" // set
)

// Op is one operation as the harness saw it. Start and End are monotonic
// offsets from the start of the run; End is meaningless unless Outcome is
// OK or Failed.
type Op struct {
	Client  int    // worker, one operation at a time
	Node    string // fs node whose mount served it
	Inc     int    // the node's incarnation (mount) when the operation started
	Kind    Kind
	Key     string // register key, or set element
	Value   string // written value, or the value read
	From    string // rename: source name (set)
	To      string // rename: target name; create: the name (set)
	Start   time.Duration
	End     time.Duration
	Outcome Outcome
	Err     string // the error, if any
}

// NotSynced downgrades to Unknown every OK operation that was not made
// durable before its node crashed: §9.1 keeps what returned before an
// fsync; what a node did after its last fsync may be lost when it is
// killed (or fenced, or loses its lease). crashed says whether an
// incarnation ended so; syncedFrom gives the latest start of an fsync of
// that incarnation that returned OK (the redo log is one per node, so an
// fsync covers every change that returned before it started).
func NotSynced(history []Op, crashed func(node string, inc int) bool, syncedFrom func(node string, inc int) (time.Duration, bool)) []Op {
	out := make([]Op, len(history))
	for i, op := range history {
		out[i] = op
		if op.Outcome != OK || !crashed(op.Node, op.Inc) {
			continue
		}
		if at, ok := syncedFrom(op.Node, op.Inc); ok && at >= op.End {
			continue
		}
		out[i].Outcome = Unknown
		out[i].Err = "not fsync'd before its node crashed"
	}
	return out
}

// Pending is the End of an operation whose return was never seen.
const Pending = time.Duration(math.MaxInt64)

func (o Op) String() string {
	var b strings.Builder
	end := "∞"
	if o.Outcome != Unknown {
		end = fmtDur(o.End)
	}
	fmt.Fprintf(&b, "[%s .. %s] %s#%d/c%d %s", fmtDur(o.Start), end, o.Node, o.Inc, o.Client, o.Kind)
	switch o.Kind {
	case Write:
		fmt.Fprintf(&b, "(%s, %q)", o.Key, o.Value)
	case Read:
		fmt.Fprintf(&b, "(%s)", o.Key)
		if o.Outcome == OK {
			fmt.Fprintf(&b, " -> %q", o.Value)
		}
	case Create, Unlink:
		fmt.Fprintf(&b, "(%s)", o.To)
	case Rename:
		fmt.Fprintf(&b, "(%s -> %s)", o.From, o.To)
	}
	fmt.Fprintf(&b, " %s", o.Outcome)
	if o.Err != "" {
		fmt.Fprintf(&b, ": %s", o.Err)
	}
	return b.String()
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.3fs", d.Seconds())
}

// Anomaly is one violation a checker found, with the shortest history
// it could find that shows it.
type Anomaly struct {
	Kind    string // e.g. "linearizability", "lost create"
	Key     string // key, element or path concerned
	Detail  string // one paragraph: what was expected and what was seen
	History []Op   // the operations that show it (may be empty)
	Known   bool   // a known gap (docs/status.md): reported, not failed
}

func (a Anomaly) String() string {
	var b strings.Builder
	known := ""
	if a.Known {
		known = " (known gap)"
	}
	fmt.Fprintf(&b, "%s%s on %s: %s", a.Kind, known, a.Key, a.Detail)
	for _, op := range a.History {
		fmt.Fprintf(&b, "\n    %s", op)
	}
	return b.String()
}
