package plan

import (
	"slices"
	"testing"
	"time"
)

var top = Topology{Servers: []string{"s1", "s2", "s3"}, FS: []string{"f1", "f2", "f3"}}

func opts(seed uint64) Options {
	return Options{Seed: seed, Duration: 5 * time.Minute, Kinds: AllKinds, Lease: 15 * time.Second,
		GapMin: 2 * time.Second, GapMax: 10 * time.Second}
}

func TestSameSeedSameSchedule(t *testing.T) {
	a, b := Make(opts(42), top), Make(opts(42), top)
	if len(a) == 0 || !slices.EqualFunc(a, b, func(x, y Fault) bool { return x.String() == y.String() }) {
		t.Fatalf("seed 42 gave two schedules:\n%v\n%v", a, b)
	}
	if c := Make(opts(43), top); slices.EqualFunc(a, c, func(x, y Fault) bool { return x.String() == y.String() }) {
		t.Fatalf("seeds 42 and 43 gave the same schedule")
	}
}

func TestScheduleRules(t *testing.T) {
	kinds := map[Kind]int{}
	for seed := uint64(0); seed < 200; seed++ {
		o := opts(seed)
		fs := Make(o, top)
		for i, f := range fs {
			kinds[f.Kind]++
			if f.At < warmup || f.End() > o.Duration {
				t.Fatalf("seed %d: %v outside [%v, %v]", seed, f, warmup, o.Duration)
			}
			if (f.Kind == PauseFS || f.Kind == PauseServer || f.Kind == PauseLock) && f.Dur <= o.Lease {
				t.Fatalf("seed %d: %v not longer than the lease", seed, f)
			}
			if i > 0 && fs[i-1].At > f.At {
				t.Fatalf("seed %d: not sorted: %v after %v", seed, f, fs[i-1])
			}
			s, n := touches(f, top)
			for _, g := range fs[:i] {
				gs, gn := touches(g, top)
				if g.End()+settle > f.At && ((s && gs) || (n && gn)) {
					t.Fatalf("seed %d: %v overlaps %v", seed, f, g)
				}
			}
			if f.Kind == Split && (len(f.Minority) == 0 || !slices.Contains(top.Servers, f.Minority[0])) {
				t.Fatalf("seed %d: split without a server on the minority side: %v", seed, f)
			}
		}
	}
	for _, k := range AllKinds {
		if kinds[k] == 0 {
			t.Errorf("kind %s never drawn in 200 seeds", k)
		}
	}
}

func TestParseKinds(t *testing.T) {
	if k, err := ParseKinds("kill-fs, split"); err != nil || !slices.Equal(k, []Kind{KillFS, Split}) {
		t.Fatalf("ParseKinds = %v, %v", k, err)
	}
	if k, err := ParseKinds("none"); err != nil || len(k) != 0 || len(Make(Options{Seed: 1, Duration: time.Hour, Kinds: k}, top)) != 0 {
		t.Fatalf("none = %v, %v", k, err)
	}
	if _, err := ParseKinds("kill-everything"); err == nil {
		t.Fatalf("unknown kind accepted")
	}
}
