package check

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// The set workload: elements are files in one directory. Each element is
// worked on by one worker at a time, from any mount: created under one
// name, perhaps renamed once, perhaps unlinked. After every fault has
// healed, each mount lists the directory and Set checks every listing:
// each element shows under a name its history allows, never under two
// names, and every listing is the same (coherence, §9.2).
//
// An element's state is one of: absent, at its first name, at its second.
// Its history is replayed over the set of states it may be in: an OK
// operation leaves the states it leads to from the possible ones, an
// Unknown one adds them to what was possible.

type elemState uint8

const (
	absent elemState = 1 << iota
	atFirst
	atSecond
)

func (s elemState) String() string {
	var parts []string
	if s&absent != 0 {
		parts = append(parts, "absent")
	}
	if s&atFirst != 0 {
		parts = append(parts, "at its first name")
	}
	if s&atSecond != 0 {
		parts = append(parts, "at its second name")
	}
	return strings.Join(parts, " or ")
}

type element struct {
	first, second string
	ops           []Op
}

// SetResult is what Set found.
type SetResult struct {
	Ops       int // operations replayed
	Elements  int
	Anomalies []Anomaly
}

// Set checks the final listings (mount name → entry names) against the
// history of the set workload. Each op's Key names its element; Create
// has To, Rename has From and To, Unlink has To.
func Set(history []Op, listings map[string][]string) SetResult {
	var res SetResult
	elems := map[string]*element{}
	owner := map[string]string{} // entry name → element
	for _, op := range history {
		if op.Kind != Create && op.Kind != Rename && op.Kind != Unlink {
			continue
		}
		e := elems[op.Key]
		if e == nil {
			e = &element{}
			elems[op.Key] = e
		}
		switch op.Kind {
		case Create:
			e.first = op.To
		case Rename:
			e.second = op.To
		}
		owner[op.To] = op.Key
		e.ops = append(e.ops, op)
	}
	nodes := slices.Sorted(maps.Keys(listings))
	if len(nodes) == 0 {
		return res
	}
	res.Anomalies = append(res.Anomalies, sameListings(nodes, listings)...)
	for _, e := range elems {
		sort.SliceStable(e.ops, func(i, j int) bool { return e.ops[i].Start < e.ops[j].Start })
		res.Elements++
		res.Ops += len(e.ops)
	}
	var checked [][]string
	for _, node := range nodes {
		listing := slices.Sorted(slices.Values(listings[node]))
		if slices.ContainsFunc(checked, func(l []string) bool { return slices.Equal(l, listing) }) {
			continue
		}
		checked = append(checked, listing)
		res.Anomalies = append(res.Anomalies, checkListing(node, listing, elems, owner)...)
	}
	return res
}

// checkListing checks one node's listing against every element.
func checkListing(node string, listing []string, elems map[string]*element, owner map[string]string) []Anomaly {
	var out []Anomaly
	seen := map[string][]string{} // element → names present
	for _, name := range listing {
		key, ok := owner[name]
		if !ok {
			out = append(out, Anomaly{Kind: "unexpected entry", Key: name,
				Detail: fmt.Sprintf("%s lists %s, which no operation created", node, name)})
			continue
		}
		seen[key] = append(seen[key], name)
	}
	for _, key := range slices.Sorted(maps.Keys(elems)) {
		if a, ok := checkElement(key, elems[key], seen[key], node); ok {
			out = append(out, a)
		}
	}
	return out
}

func sameListings(nodes []string, listings map[string][]string) []Anomaly {
	var out []Anomaly
	want := slices.Sorted(slices.Values(listings[nodes[0]]))
	for _, n := range nodes[1:] {
		got := slices.Sorted(slices.Values(listings[n]))
		if !slices.Equal(got, want) {
			out = append(out, Anomaly{Kind: "listings differ", Key: n,
				Detail: fmt.Sprintf("%s and %s list the directory differently: only on %s %v, only on %s %v",
					nodes[0], n, nodes[0], minus(want, got), n, minus(got, want))})
		}
	}
	return out
}

func minus(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

// checkElement replays e's history and compares with the names present.
func checkElement(key string, e *element, present []string, node string) (Anomaly, bool) {
	possible := absent
	for i, op := range e.ops {
		from, to := transition(e, op)
		next := elemState(0)
		for s := absent; s <= atSecond; s <<= 1 {
			if possible&s != 0 && s == from {
				next |= to
			}
		}
		switch op.Outcome {
		case OK:
			if next == 0 {
				return Anomaly{Kind: "impossible success", Key: key,
					Detail:  fmt.Sprintf("operation %d succeeded although the element was %s", i, possible),
					History: e.ops[:i+1]}, true
			}
			possible = next
		case Unknown:
			possible |= next
		}
	}
	var got elemState
	switch {
	case len(present) == 0:
		got = absent
	case len(present) > 1:
		return Anomaly{Kind: "duplicate", Key: key,
			Detail:  fmt.Sprintf("%s lists the element under %d names %v; its history allows it %s", node, len(present), present, possible),
			History: e.ops}, true
	case present[0] == e.first:
		got = atFirst
	default:
		got = atSecond
	}
	if possible&got != 0 {
		return Anomaly{}, false
	}
	kind := "wrong state"
	switch {
	case got == absent && lastOK(e.ops, Create, Rename):
		kind = "lost create"
	case got == absent:
		kind = "lost entry"
	case possible == absent:
		kind = "unlinked entry reappeared"
	case got == atFirst && possible&atSecond != 0:
		kind = "rename undone"
	}
	return Anomaly{Kind: kind, Key: key,
		Detail:  fmt.Sprintf("%s shows the element %s (%v); its history allows only %s", node, got, present, possible),
		History: e.ops}, true
}

// transition gives the state op needs and the one it leads to.
func transition(e *element, op Op) (from, to elemState) {
	switch op.Kind {
	case Create:
		return absent, atFirst
	case Rename:
		return atFirst, atSecond
	default: // Unlink
		if op.To == e.second && e.second != e.first {
			return atSecond, absent
		}
		return atFirst, absent
	}
}

// lastOK reports whether the last OK operation of ops is one of kinds.
func lastOK(ops []Op, kinds ...Kind) bool {
	for i := len(ops) - 1; i >= 0; i-- {
		if ops[i].Outcome == OK {
			return slices.Contains(kinds, ops[i].Kind)
		}
	}
	return false
}
