package coord

import (
	"errors"
	"strings"
	"testing"
)

func members(spec string) []CoordinatorStatus {
	// "c1:L c2:up c3:down c4:up-nonvoter": name, then leader, up or down.
	var out []CoordinatorStatus
	for _, f := range strings.Fields(spec) {
		name, state, _ := strings.Cut(f, ":")
		c := CoordinatorStatus{Name: name, Voter: !strings.HasSuffix(state, "-nonvoter")}
		state = strings.TrimSuffix(state, "-nonvoter")
		c.Leader = state == "L"
		c.Up = state == "L" || state == "up"
		out = append(out, c)
	}
	return out
}

func TestCheckRemove(t *testing.T) {
	for _, tc := range []struct {
		members, name string
		refused       bool     // wraps ErrRemoveRefused
		errs          []string // substrings of the error; none: allowed
	}{
		{members: "c1:L c2:up c3:up", name: "c3"},
		{members: "c1:L c2:up c3:up", name: "c1"},                 // the leader may leave; Raft elects another
		{members: "c1:L c2:up c3:down", name: "c3"},               // a dead member goes
		{members: "c1:L c2:up", name: "c2"},                       // 2 → 1, the one left is up
		{members: "c1:L c2:up c3:up c4:down c5:down", name: "c5"}, // 4 stay, 3 up
		{members: "c1:L c2:up c3:up-nonvoter", name: "c3"},        // a non-voter changes no majority
		{members: "c1:L c2:down c3:up-nonvoter", name: "c3", refused: true, errs: []string{"c3", "only 1 are up", "majority (2)"}},
		{members: "c1:L", name: "c1", refused: true, errs: []string{"last member"}},
		{members: "c1:L c2:up c3:down", name: "c2", refused: true, errs: []string{"c2", "2 voters that would stay (c1, c3)", "only 1 are up (c1)", "majority (2)"}},
		{members: "c1:L c2:up c3:down c4:down c5:up", name: "c5", refused: true, errs: []string{"majority (3)"}},
		{members: "c1:L c2:up-nonvoter", name: "c1", refused: true, errs: []string{"only voter"}},
		{members: "c1:L c2:up", name: "c9", errs: []string{`no coordinator "c9"`, "c1, c2"}},
	} {
		err := checkRemove(members(tc.members), tc.name)
		if len(tc.errs) == 0 {
			if err != nil {
				t.Errorf("remove %s from [%s]: %v, want allowed", tc.name, tc.members, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("remove %s from [%s] allowed, want refused", tc.name, tc.members)
			continue
		}
		if errors.Is(err, ErrRemoveRefused) != tc.refused {
			t.Errorf("remove %s from [%s]: errors.Is(ErrRemoveRefused) = %v", tc.name, tc.members, !tc.refused)
		}
		for _, w := range tc.errs {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("remove %s from [%s]: %q does not mention %q", tc.name, tc.members, err, w)
			}
		}
	}
}
