package check

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// The register workload: each key is a small file that writers replace
// whole (write a temp file, rename it over the key, fsync the directory:
// rename is the atomic operation DESIGN.md §4 promises; an O_TRUNC write is
// not atomic) and readers read whole, from several mounts at once. Every
// key starts with the value init.
//
// A read that returned is checked; a read that failed tells nothing and is
// dropped. A write that returned is checked; a write that failed before
// its rename is dropped (Failed); any other write is Unknown and may take
// effect at any time after its start or never (porcupine: return at
// infinity).

type regInput struct {
	write bool
	value string
}

func registerModel(init string) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return init },
		Step: func(state, input, output any) (bool, any) {
			in := input.(regInput)
			if in.write {
				return true, in.value
			}
			return output.(string) == state.(string), state
		},
		DescribeOperation: func(input, output any) string {
			in := input.(regInput)
			if in.write {
				return fmt.Sprintf("write(%q)", in.value)
			}
			return fmt.Sprintf("read() -> %q", output.(string))
		},
		DescribeState: func(state any) string { return fmt.Sprintf("%q", state.(string)) },
	}
}

// RegisterResult is what Register found.
type RegisterResult struct {
	Ops       int      // operations checked
	Keys      int      // keys checked
	Unchecked []string // keys whose check timed out (neither proved nor refuted)
	Anomalies []Anomaly
}

// registerOps returns the operations of history that take part in the
// check, per key, sorted by start.
func registerOps(history []Op) map[string][]Op {
	byKey := map[string][]Op{}
	for _, op := range history {
		switch {
		case op.Kind == Read && op.Outcome == OK:
		case op.Kind == Write && op.Outcome != Failed:
		default:
			continue
		}
		byKey[op.Key] = append(byKey[op.Key], op)
	}
	for _, ops := range byKey {
		sort.SliceStable(ops, func(i, j int) bool { return ops[i].Start < ops[j].Start })
	}
	return byKey
}

func toPorcupine(ops []Op) []porcupine.Operation {
	out := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		end := int64(op.End)
		if op.Outcome == Unknown {
			end = int64(Pending)
		}
		var in regInput
		var o any = ""
		if op.Kind == Write {
			in = regInput{write: true, value: op.Value}
		} else {
			o = op.Value
		}
		out = append(out, porcupine.Operation{ClientId: op.Client, Input: in, Call: int64(op.Start), Output: o, Return: end})
	}
	return out
}

// Register checks the register history for linearizability, key by key,
// giving porcupine at most timeout per key. Each anomaly carries the
// shortest history the shrinker found that is still not linearizable.
func Register(history []Op, init string, timeout time.Duration) RegisterResult {
	var res RegisterResult
	byKey := registerOps(history)
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	model := registerModel(init)
	for _, key := range keys {
		ops := byKey[key]
		res.Keys++
		res.Ops += len(ops)
		if a, ok := neverWritten(key, ops, init); ok {
			res.Anomalies = append(res.Anomalies, a)
			continue
		}
		switch porcupine.CheckOperationsTimeout(model, toPorcupine(ops), timeout) {
		case porcupine.Ok:
		case porcupine.Unknown:
			res.Unchecked = append(res.Unchecked, key)
		case porcupine.Illegal:
			short := shrinkRegister(ops, init, timeout)
			res.Anomalies = append(res.Anomalies, Anomaly{Kind: "linearizability", Key: key,
				Detail: fmt.Sprintf("the %d operations on %s are not linearizable as a register (initial value %q); "+
					"a shortest non-linearizable sub-history (%d operations):", len(ops), key, init, len(short)),
				History: short})
		}
	}
	return res
}

// neverWritten finds a read that returned a value no write gave: that
// read alone is the anomaly (a torn or foreign value).
func neverWritten(key string, ops []Op, init string) (Anomaly, bool) {
	written := map[string]bool{init: true}
	for _, op := range ops {
		if op.Kind == Write {
			written[op.Value] = true
		}
	}
	for _, op := range ops {
		if op.Kind == Read && !written[op.Value] {
			return Anomaly{Kind: "read of a value never written", Key: key,
				Detail: fmt.Sprintf("read returned %q (%d bytes), which no write of %s wrote; the read and the writes concurrent with it:",
					clip(op.Value, 64), len(op.Value), key),
				History: append(ConcurrentWrites(ops, op), op)}, true
		}
	}
	return Anomaly{}, false
}

// ConcurrentWrites returns the writes of ops whose interval overlaps op's.
func ConcurrentWrites(ops []Op, op Op) []Op {
	end := op.End
	if op.Outcome == Unknown {
		end = Pending
	}
	var out []Op
	for _, o := range ops {
		oend := o.End
		if o.Outcome == Unknown {
			oend = Pending
		}
		if o.Kind == Write && o.Start <= end && op.Start <= oend {
			out = append(out, o)
		}
	}
	return out
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// shrinkRegister returns a short sub-history of ops that is still not
// linearizable and still well formed: every read's value is init or
// written by a write that is kept. First the shortest failing prefix (by
// start, with the writes its reads need), then greedy removal of single
// operations, within a budget of porcupine calls.
func shrinkRegister(ops []Op, init string, timeout time.Duration) []Op {
	model := registerModel(init)
	budget := 2000
	illegal := func(h []Op) bool {
		if budget <= 0 {
			return false
		}
		budget--
		return porcupine.CheckOperationsTimeout(model, toPorcupine(h), timeout) == porcupine.Illegal
	}
	cur := ops
	for n := 4; n < len(ops); n *= 2 {
		if p := withWriters(ops, ops[:n], init); illegal(p) {
			cur = p
			break
		}
	}
	for changed := true; changed && budget > 0; {
		changed = false
		for i := len(cur) - 1; i >= 0; i-- {
			if cur[i].Kind == Write && readBy(cur, cur[i].Value, i) {
				continue
			}
			next := slices.Delete(slices.Clone(cur), i, i+1)
			if illegal(next) {
				cur, changed = next, true
			}
		}
	}
	return cur
}

// withWriters returns part plus the writes in all that the reads of part
// need, sorted by start.
func withWriters(all, part []Op, init string) []Op {
	have := map[string]bool{init: true}
	need := map[string]bool{}
	for _, op := range part {
		if op.Kind == Write {
			have[op.Value] = true
		} else if !have[op.Value] {
			need[op.Value] = true
		}
	}
	out := slices.Clone(part)
	for _, op := range all[len(part):] {
		if op.Kind == Write && need[op.Value] && !have[op.Value] {
			out = append(out, op)
			have[op.Value] = true
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// readBy reports whether an operation of h other than h[skip] reads v.
func readBy(h []Op, v string, skip int) bool {
	for i, op := range h {
		if i != skip && op.Kind == Read && op.Value == v {
			return true
		}
	}
	return false
}

// VisualizeRegister writes porcupine's HTML view of key's history.
func VisualizeRegister(history []Op, init, key string, timeout time.Duration, w io.Writer) error {
	ops := registerOps(history)[key]
	model := registerModel(init)
	_, info := porcupine.CheckOperationsVerbose(model, toPorcupine(ops), timeout)
	return porcupine.Visualize(model, info, w)
}
