package check

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Summary adds up runs: faults injected by kind, operations checked by
// checker, anomalies found. The harness prints its Table at the end.
type Summary struct {
	Runs      int
	Seeds     []uint64
	Faults    map[string]int // fault kind → times injected
	Ops       map[string]int // checker → operations checked
	Anomalies []RunAnomaly
	Notes     []string // e.g. a nemesis skipped because the kernel lacks it
}

// RunAnomaly is an anomaly with the run that found it.
type RunAnomaly struct {
	Run  string // e.g. "chaos seed=42"
	Seed uint64
	Anomaly
}

// Fault counts one injected fault of kind.
func (s *Summary) Fault(kind string) {
	if s.Faults == nil {
		s.Faults = map[string]int{}
	}
	s.Faults[kind]++
}

// Checked counts n operations checked by checker.
func (s *Summary) Checked(checker string, n int) {
	if s.Ops == nil {
		s.Ops = map[string]int{}
	}
	s.Ops[checker] += n
}

// Note records a line for the table's foot, once.
func (s *Summary) Note(line string) {
	if !slices.Contains(s.Notes, line) {
		s.Notes = append(s.Notes, line)
	}
}

// Add merges o into s.
func (s *Summary) Add(o Summary) {
	s.Runs += o.Runs
	s.Seeds = append(s.Seeds, o.Seeds...)
	for k, v := range o.Faults {
		for range v {
			s.Fault(k)
		}
	}
	for k, v := range o.Ops {
		s.Checked(k, v)
	}
	s.Anomalies = append(s.Anomalies, o.Anomalies...)
	for _, n := range o.Notes {
		s.Note(n)
	}
}

// Failed reports whether an anomaly that is not a known gap was found.
func (s *Summary) Failed() bool {
	for _, a := range s.Anomalies {
		if !a.Known {
			return true
		}
	}
	return false
}

// Table renders the summary for people.
func (s *Summary) Table() string {
	var b strings.Builder
	seeds := make([]string, len(s.Seeds))
	for i, x := range s.Seeds {
		seeds[i] = fmt.Sprint(x)
	}
	fmt.Fprintf(&b, "chaos summary: %d runs, seeds %s\n", s.Runs, strings.Join(seeds, " "))
	type row struct {
		label string
		n     int
	}
	var rows []row
	section := func(title string, m map[string]int) {
		total := 0
		for _, v := range m {
			total += v
		}
		rows = append(rows, row{title, total})
		for _, k := range slices.Sorted(maps.Keys(m)) {
			rows = append(rows, row{"  " + k, m[k]})
		}
	}
	section("faults injected", s.Faults)
	section("operations checked", s.Ops)
	byKind := map[string]int{}
	for _, a := range s.Anomalies {
		k := a.Kind
		if a.Known {
			k += " (known gap)"
		}
		byKind[k]++
	}
	section("anomalies", byKind)
	width := 0
	for _, r := range rows {
		width = max(width, len(r.label))
	}
	for _, r := range rows {
		fmt.Fprintf(&b, "%-*s %8d\n", width, r.label, r.n)
	}
	for _, a := range s.Anomalies {
		fmt.Fprintf(&b, "  seed %d %s: %s\n", a.Seed, a.Run, firstLine(a.Anomaly.String()))
	}
	for _, n := range s.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return b.String()
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
