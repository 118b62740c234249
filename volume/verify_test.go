package volume

import (
	"strings"
	"testing"
)

func TestDiffInventories(t *testing.T) {
	inv := map[string]map[blockKey]uint64{
		"a": {{1, 1}: 5<<32 | 1, {2, 1}: 5<<32 | 2, {3, 1}: 7},
		"b": {{1, 1}: 5<<32 | 1, {2, 1}: 5<<32 | 3},
		"c": {{1, 1}: 5<<32 | 1, {2, 1}: 5<<32 | 2, {3, 1}: 7, {4, 2}: 9},
	}
	d := diffInventories(3, []string{"a", "b", "c"}, inv)
	if len(d) != 3 {
		t.Fatalf("got %d diffs, want 3: %v", len(d), d)
	}
	if d[0].Block != 2 || d[0].Seqs["b"] != 5<<32|3 || d[1].Block != 3 || d[1].Seqs["b"] != 0 || d[2].Block != 4 || d[2].Seqs["a"] != 0 {
		t.Fatalf("diffs: %v", d)
	}
	if s := d[1].String(); !strings.Contains(s, "b=absent") || !strings.Contains(s, "a=seq 0.7") {
		t.Fatalf("diff text: %s", s)
	}
	if d := diffInventories(0, []string{"a", "a2"}, map[string]map[blockKey]uint64{"a": inv["a"], "a2": inv["a"]}); len(d) != 0 {
		t.Fatalf("equal inventories differ: %v", d)
	}
}
