package ec

import (
	"errors"
	"testing"
)

func TestParseProfile(t *testing.T) {
	valid := []struct {
		in, out string
		p       Profile
	}{
		{"4+2", "4+2", Profile{4, 2}},
		{"8+3", "8+3", Profile{8, 3}},
		{"2+1", "2+1", Profile{2, 1}},
		{"4+0", "4+0", Profile{4, 0}},
		{"32+16", "32+16", Profile{32, 16}},
		{"copies=3", "copies=3", Profile{1, 2}},
		{"copies=1", "copies=1", Profile{1, 0}},
		{"copies=17", "copies=17", Profile{1, 16}},
		{"1+2", "copies=3", Profile{1, 2}},
	}
	for _, tc := range valid {
		p, err := ParseProfile(tc.in)
		if err != nil || p != tc.p {
			t.Errorf("ParseProfile(%q) = %v, %v; want %v", tc.in, p, err, tc.p)
			continue
		}
		if p.String() != tc.out {
			t.Errorf("%v.String() = %q, want %q", p, p.String(), tc.out)
		}
		if again, err := ParseProfile(p.String()); err != nil || again != p {
			t.Errorf("ParseProfile(%q) = %v, %v; want %v", p.String(), again, err, p)
		}
	}
	invalid := []string{
		"", "4", "4+", "+2", "4+2+1", " 4+2", "4+2 ", "04+2", "4+02", "-1+2", "4+-1",
		"0+2", "33+1", "4+17", "32+17", "copies=", "copies=0", "copies=18", "copies=03",
		"copies=+3", "copies=3+1", "4-2", "ec=4+2", "4+2x", "99999+1", "1e3+1",
	}
	for _, s := range invalid {
		if p, err := ParseProfile(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseProfile(%q) = %v, %v; want ErrInvalid", s, p, err)
		}
	}
}

func TestProfileValidate(t *testing.T) {
	for _, tc := range []struct {
		p  Profile
		ok bool
	}{
		{Profile{1, 0}, true}, {Profile{1, 16}, true}, {Profile{32, 16}, true},
		{Profile{0, 2}, false}, {Profile{-1, 2}, false}, {Profile{33, 0}, false},
		{Profile{4, -1}, false}, {Profile{4, 17}, false},
	} {
		if err := tc.p.Validate(); (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("%d+%d: Validate() = %v, want ok=%v", tc.p.K, tc.p.M, err, tc.ok)
		}
	}
}
