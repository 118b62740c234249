package volume

import (
	"strings"
	"testing"
)

func TestDiffInventories(t *testing.T) {
	inv := map[string]map[blockKey]held{
		"a": {{1, 1}: {5<<32 | 1, false}, {2, 1}: {5<<32 | 2, false}, {3, 1}: {7, false}, {5, 1}: {8, true}},
		"b": {{1, 1}: {5<<32 | 1, false}, {2, 1}: {5<<32 | 3, false}, {5, 1}: {8, true}},
		"c": {{1, 1}: {5<<32 | 1, false}, {2, 1}: {5<<32 | 2, false}, {3, 1}: {7, false}, {4, 2}: {9, false}, {5, 1}: {8, true}},
	}
	d := diffInventories(3, []string{"a", "b", "c"}, inv)
	if len(d) != 3 {
		t.Fatalf("got %d diffs, want 3 (refs at equal seqs agree): %v", len(d), d)
	}
	if d[0].Block != 2 || d[0].Seqs["b"] != 5<<32|3 || d[1].Block != 3 || d[1].Seqs["b"] != 0 || d[2].Block != 4 || d[2].Seqs["a"] != 0 {
		t.Fatalf("diffs: %v", d)
	}
	if s := d[1].String(); !strings.Contains(s, "b=absent") || !strings.Contains(s, "a=seq 0.7") {
		t.Fatalf("diff text: %s", s)
	}
	if d := diffInventories(0, []string{"a", "a2"}, map[string]map[blockKey]held{"a": inv["a"], "a2": inv["a"]}); len(d) != 0 {
		t.Fatalf("equal inventories differ: %v", d)
	}
	// A ref on one member and a put on another at the same seq differ.
	mixed := map[string]map[blockKey]held{"a": {{5, 1}: {8, true}}, "b": {{5, 1}: {8, false}}}
	d = diffInventories(0, []string{"a", "b"}, mixed)
	if len(d) != 1 || !d[0].Refs["a"] || d[0].Refs["b"] {
		t.Fatalf("ref against put at one seq: %v", d)
	}
	if s := d[0].String(); !strings.Contains(s, "a=seq 0.8 ref") || !strings.Contains(s, "b=seq 0.8 ") && !strings.HasSuffix(s, "b=seq 0.8") {
		t.Fatalf("diff text: %s", s)
	}
}
