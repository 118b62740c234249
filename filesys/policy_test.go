package filesys

import (
	"errors"
	"strings"
	"testing"
)

func TestParsePolicy(t *testing.T) {
	for in, want := range map[string]string{
		"copies=3 domain=rack":       "copies=3 domain=rack",
		"ec=4+2 domain=host":         "ec=4+2",
		"ec=8+3 class=ssd":           "ec=8+3 class=ssd",
		"  class=ssd   ec=8+3 ":      "ec=8+3 class=ssd",
		"ec=1+2":                     "copies=3",
		"copies=1":                   "copies=1",
		"copies=17 domain=site":      "copies=17 domain=site",
		"ec=32+16":                   "ec=32+16",
		"ec=4+0 class=a.b-c_d":       "ec=4+0 class=a.b-c_d",
		"domain=rack copies=2":       "copies=2 domain=rack",
		"ec=04+02":                   "ec=4+2",
		"copies=2 class=" + "s" + "": "copies=2 class=s",
	} {
		p, err := ParsePolicy(in)
		if err != nil || p.String() != want {
			t.Fatalf("%q: %q %v, want %q", in, p.String(), err, want)
		}
		if again, err := ParsePolicy(p.String()); err != nil || again != p {
			t.Fatalf("%q does not read back: %+v %v", p.String(), again, err)
		}
	}
	p, _ := ParsePolicy("copies=3")
	if p != (Policy{Copies: 3, K: 1, M: 2}) {
		t.Fatalf("copies=3 is %+v", p)
	}
	q, _ := ParsePolicy("ec=4+2 domain=host")
	if q != (Policy{K: 4, M: 2}) {
		t.Fatalf("ec=4+2 domain=host is %+v", q)
	}
	for bad, why := range map[string]string{
		"":                         "empty",
		"copies":                   "KEY=VALUE",
		"copies=":                  "KEY=VALUE",
		"copies=0":                 "at least 1",
		"copies=18":                "copies=18",
		"copies=-1":                "not a number",
		"copies=+3":                "not a number",
		"copies=1000":              "not a number",
		"ec=4":                     "K+M",
		"ec=0+2":                   "k=0",
		"ec=33+1":                  "k=33",
		"ec=4+17":                  "m=17",
		"ec=4+2 copies=3":          "not both",
		"domain=rack":              "give copies=N or ec=K+M",
		"ec=4+2 domain=room":       "host, rack or site",
		"ec=4+2 class=-ssd":        "not allowed",
		"ec=4+2 class=s/d":         "not allowed",
		"ec=4+2 class=" + long(33): "at most 32",
		"ec=4+2 ec=4+2":            "twice",
		"ec=4+2 speed=fast":        "unknown key",
		"ec=4+2,domain=rack":       "",
		"home":                     "KEY=VALUE",
	} {
		_, err := ParsePolicy(bad)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: %v, want ErrInvalid saying %q", bad, err, why)
		}
	}
	if _, err := ParsePolicy("ec=33+15"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("k=33: %v", err)
	}
	if _, err := ParsePolicy("ec=32+17"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("k+m=49: %v", err)
	}
	if _, err := ParsePolicy(strings.Repeat(" ", 300) + "copies=2"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("long text: %v", err)
	}
}

func long(n int) string { return strings.Repeat("x", n) }

func TestPolicyStricter(t *testing.T) {
	mk := func(s string) Policy {
		p, err := ParsePolicy(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct{ a, b string }{
		{"ec=8+3", "ec=4+2"},             // more failures survived
		{"ec=4+2 domain=rack", "ec=4+2"}, // wider domain
		{"ec=4+2", "copies=3"},           // same tolerance, less overhead
		{"ec=4+1", "copies=2"},
		{"ec=4+2", "ec=4+2 class=ssd"}, // a tie broken by text, the same every pass
	} {
		a, b := mk(c.a), mk(c.b)
		if !a.stricter(b) || b.stricter(a) {
			t.Errorf("%s should be stricter than %s", a, b)
		}
	}
	if (Policy{}).stricter(mk("copies=1")) || !mk("copies=1").stricter(Policy{}) {
		t.Error("the home ranks below every policy")
	}
}

func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{"copies=3 domain=rack", "ec=4+2 domain=host", "ec=8+3 class=ssd", "ec=1+0", "copies=17",
		"ec=32+16 domain=site class=Z", "", "ec=+", "copies=3 copies=3", "class=ssd", "ec=4+2\tdomain=rack", "ec=007+001"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePolicy(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%q: error %v not ErrInvalid", s, err)
			}
			return
		}
		if err := p.validate(); err != nil || p.IsHome() {
			t.Fatalf("%q accepted as %+v: %v", s, p, err)
		}
		if p != p.normalise() {
			t.Fatalf("%q: %+v not normalised", s, p)
		}
		again, err := ParsePolicy(p.String())
		if err != nil || again != p {
			t.Fatalf("%q → %q → %+v %v", s, p.String(), again, err)
		}
	})
}
