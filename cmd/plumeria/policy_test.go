package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/plumeria-fs/plumeria/filesys"
)

// TestPolicyShowJSON pins policy show --json's keys and how compliance
// is decided from the layout attribute.
func TestPolicyShowJSON(t *testing.T) {
	dirBytes := int64(8192)
	for _, c := range []struct {
		name, policy string
		info         filesys.LayoutInfo
		wantPolicy   string
		compliant    bool
		note         bool
	}{
		{"file in ec", "ec=4+2 domain=host", filesys.LayoutInfo{Home: "copies=2", Files: 1, TotalBytes: 8192,
			Layouts: map[string]int64{"ec=4+2": 8192}}, "ec=4+2", true, false},
		{"file half moved", "ec=4+2", filesys.LayoutInfo{Home: "copies=2", Files: 1, TotalBytes: 8192,
			Layouts: map[string]int64{"ec=4+2": 4096, "home": 4096}}, "ec=4+2", false, false},
		{"no policy", "", filesys.LayoutInfo{Home: "copies=2", Files: 1, TotalBytes: 4096,
			Layouts: map[string]int64{"home": 4096}}, "home", true, false},
		{"policy equal to the home", "copies=2", filesys.LayoutInfo{Home: "copies=2", Files: 1, TotalBytes: 4096,
			Layouts: map[string]int64{"ec=4+2": 4096}}, "home", false, true},
		{"directory", "ec=4+2", filesys.LayoutInfo{Home: "copies=3 domain=rack", Policy: "ec=4+2", Files: 3, InlineFiles: 1, TotalBytes: 8192,
			CompliantBytes: &dirBytes, Layouts: map[string]int64{"ec=4+2": 4096, "copies=2": 4096}}, "ec=4+2", true, false},
		{"empty", "ec=4+2", filesys.LayoutInfo{Home: "copies=2"}, "ec=4+2", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := availabilityOf("/mnt/d/f", c.policy, "/mnt/d", c.info)
			if err != nil {
				t.Fatal(err)
			}
			if s.Policy != c.wantPolicy || s.Compliant != c.compliant || (s.Note != "") != c.note {
				t.Fatalf("%+v", s)
			}
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"path", "policy", "from", "home", "files", "inline_files", "total_bytes", "compliant_bytes", "layouts", "compliant"} {
				if _, ok := m[k]; !ok {
					t.Errorf("no %q in %s", k, b)
				}
			}
			if _, ok := m["layouts"].(map[string]any); !ok {
				t.Errorf("layouts is not an object: %s", b)
			}
			if m["compliant"] != c.compliant {
				t.Errorf("compliant %v in %s", m["compliant"], b)
			}
		})
	}
	if _, err := availabilityOf("/mnt/d", "ec=99+1", "/mnt/d", filesys.LayoutInfo{Home: "copies=2"}); err == nil ||
		!strings.Contains(err.Error(), "does not parse") {
		t.Fatalf("a bad policy: %v", err)
	}
	names := []string{}
	for _, c := range policyCmd().Commands() {
		names = append(names, c.Name())
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"apply", "set", "show"}) {
		t.Fatalf("subcommands %v", names)
	}
}
