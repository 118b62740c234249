package prom

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestShared(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "x_total", Help: "x"}
	a := Shared(reg, prometheus.NewCounter(opts))
	b := Shared(reg, prometheus.NewCounter(opts))
	a.Inc()
	b.Inc()
	if a != b || testutil.ToFloat64(a) != 2 {
		t.Fatalf("a second registration did not share the first counter: %v", testutil.ToFloat64(a))
	}
	defer func() {
		if recover() == nil {
			t.Error("a clashing collector of the same name did not panic")
		}
	}()
	Shared(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "x_total", Help: "other"}))
}

func TestReplace(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.GaugeOpts{Name: "g", Help: "g"}
	old, cur := prometheus.NewGauge(opts), prometheus.NewGauge(opts)
	old.Set(1)
	cur.Set(2)
	if err := Replace(reg, old); err != nil {
		t.Fatal(err)
	}
	if err := Replace(reg, cur); err != nil {
		t.Fatal(err)
	}
	if got, err := testutil.GatherAndCount(reg, "g"); err != nil || got != 1 {
		t.Fatalf("%d series, %v", got, err)
	}
	if testutil.ToFloat64(cur) != 2 || !reg.Unregister(cur) {
		t.Error("the newer collector is not the one registered")
	}
}
