package locktest

import (
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

var (
	seedFlag = flag.Uint64("lock.seed", 0, "run only this simulation seed (replays a failure)")
	soakFlag = flag.Duration("lock.soak", 0, "run random seeds for this long (also $PLUMERIA_LOCK_SOAK)")
)

// seeds is how many seeds a normal test run covers (half under -race, 8
// with -short).
const seeds = 40

// variants are the configurations seeds cycle through.
var variants = []Options{
	{}, // defaults: registry, no grace
	// Grace only, no registry: lock safety holds, recovery order may not for
	// dead clerks the new owner of a group never heard of.
	{GraceTicks: 45, NoRegistry: true},
	{Clerks: 6, Servers: 2, Groups: 3, Locks: 6, DelayMax: 8},
	{Clerks: 3, Servers: 4, Groups: 16, Locks: 24, LeaseTicks: 24, MarginTicks: 3, RetryTicks: 3, IdleTicks: 20},
	// Sparse holdings: a clerk cut off from one server often holds nothing
	// there, so it outlives that server's view of its lease.
	{Servers: 4, Groups: 12, Locks: 8, IdleTicks: 12, WishRate: 0.04,
		Faults: Faults{Partition: 0.03, ClerkCrash: 0.001, ServerCrash: 0.0005, Move: 0.002, LongDelay: 0.005}},
}

func optionsFor(seed uint64) Options { return variants[seed%uint64(len(variants))] }

// runSeed runs one world and fails the test with the way to replay it.
func runSeed(t *testing.T, seed uint64) *World {
	t.Helper()
	w := New(seed, optionsFor(seed))
	if err := w.Run(); err != nil {
		t.Fatalf("seed %d: %v\nreplay: go test ./lock/locktest -run TestSim -lock.seed=%d", seed, err, seed)
	}
	return w
}

// TestSim runs the simulator on many seeds, in parallel, checking safety
// after every step and recovery and liveness at the end of each run.
// -lock.seed=N replays one seed (PLUMERIA_LOCK_TRACE=1 traces every message).
func TestSim(t *testing.T) {
	if *seedFlag != 0 {
		w := runSeed(t, *seedFlag)
		t.Logf("seed %d: %s", *seedFlag, w.Stats())
		return
	}
	n := uint64(seeds)
	switch {
	case testing.Short():
		n = 8
	case raceEnabled:
		n = seeds / 2
	}
	var steps atomic.Int64
	t.Run("seeds", func(t *testing.T) {
		for seed := uint64(1); seed <= n; seed++ {
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				t.Parallel()
				steps.Add(runSeed(t, seed).Steps())
			})
		}
	})
	t.Logf("%d seeds, %d steps", n, steps.Load())
}

// TestSimSoak runs random seeds for -lock.soak or $PLUMERIA_LOCK_SOAK (a
// duration such as 10m), starting from a seed taken from the clock.
func TestSimSoak(t *testing.T) {
	d := *soakFlag
	if v := os.Getenv("PLUMERIA_LOCK_SOAK"); d == 0 && v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	if d == 0 {
		t.Skip("set -lock.soak or PLUMERIA_LOCK_SOAK")
	}
	begin := time.Now()
	start := uint64(begin.UnixNano())
	var runs, steps int64
	for seed := start; time.Since(begin) < d; seed++ {
		steps += runSeed(t, seed).Steps()
		runs++
	}
	t.Logf("soak: %d runs from seed %d, %d steps", runs, start, steps)
}
