package redo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// TestCrashProperty runs, for many seeds, several lives of a log on a small
// region that wraps many times: random appends, waits, syncs and releases,
// ended by a crash at a random write that tears it at a 512-byte boundary
// (or, in some seeds, keeps a random subset of its sectors). After each
// crash Recover must return exactly a prefix of the unreleased records that
// holds every record whose Wait (or Sync) returned nil, byte for byte. The
// last life ends with a clean Close, after which Recover finds nothing.
// Reproduce one seed with -run 'TestCrashProperty/seed=N$'; run more seeds
// with PLUMERIA_REDO_SEEDS=n.
func TestCrashProperty(t *testing.T) {
	seeds := 200
	if testing.Short() {
		seeds = 30
	}
	if n, err := strconv.Atoi(os.Getenv("PLUMERIA_REDO_SEEDS")); err == nil {
		seeds = n // a longer soak: PLUMERIA_REDO_SEEDS=5000
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { crashSeed(t, seed) })
	}
}

// model is what the test knows the log was told.
type model struct {
	recs     map[LSN][]Update
	appended LSN // highest LSN Append returned in this life, or where it started
	acked    LSN // highest LSN known durable by a Wait or Sync
	released atomic.Uint64
}

func (m *model) release(lsn LSN) {
	for {
		old := m.released.Load()
		if uint64(lsn) <= old || m.released.CompareAndSwap(old, uint64(lsn)) {
			return
		}
	}
}

func crashSeed(t *testing.T, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	base := uint64(rng.IntN(4)) * 4096
	mem := NewMemDevice(base + testSize + 4096)
	dev := &crashDevice{mem: mem, rng: rand.New(rand.NewPCG(seed, 1)), subset: rng.IntN(4) == 0}
	m := &model{recs: make(map[LSN][]Update)}
	const lives = 4
	for life := range lives {
		opts := testOptions(base)
		recs, err := Recover(ctx, mem, opts)
		if err != nil {
			t.Fatalf("life %d: Recover: %v", life, err)
		}
		if err := m.check(recs); err != nil {
			t.Fatalf("life %d: %v", life, err)
		}
		// The owner replays what Recover returned, so all of it is installed.
		if len(recs) > 0 {
			m.release(recs[len(recs)-1].LSN)
		}
		last := life == lives-1
		if last {
			dev.reset(1 << 30)
		} else {
			dev.reset(rng.IntN(60)) // a life writes some 10-60 batches
		}
		var lp atomic.Pointer[Log]
		opts.OnPressure = func() {
			l := lp.Load()
			d := l.Durable()
			m.release(d)
			l.Release(d)
		}
		l, err := Open(ctx, dev, opts)
		if err != nil {
			if !errors.Is(err, errCrashed) {
				t.Fatalf("life %d: Open: %v", life, err)
			}
			continue
		}
		lp.Store(l)
		// LSNs go on above everything in the region; Open released it all.
		floor := l.Durable()
		if rel := LSN(m.released.Load()); floor < rel || floor < m.acked {
			t.Fatalf("life %d: Open starts after LSN %d; %d released, %d acknowledged", life, floor, rel, m.acked)
		}
		m.released.Store(uint64(floor))
		m.appended = floor
		crashed := m.run(t, l, rng, 100+rng.IntN(500))
		if last {
			if crashed {
				t.Fatalf("life %d: crashed without a crash", life)
			}
			m.release(m.appended)
			l.Release(m.appended)
			if err := l.Close(ctx); err != nil {
				t.Fatalf("clean Close: %v", err)
			}
			if recs := mustRecover(t, mem, opts); len(recs) != 0 {
				t.Fatalf("Recover after clean Close: %d records from LSN %d", len(recs), recs[0].LSN)
			}
			break
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = l.Close(cctx) // a crashed log returns the crash; a live one closes
		cancel()
	}
}

// run applies n random operations to l and reports whether the device
// crashed under it.
func (m *model) run(t *testing.T, l *Log, rng *rand.Rand, n int) (crashed bool) {
	ctx := context.Background()
	lifeFirst := m.appended + 1
	for range n {
		var err error
		switch r := rng.IntN(100); {
		case r < 60:
			ups := randomUpdates(rng)
			var lsn LSN
			lsn, err = l.Append(ups)
			if errors.Is(err, ErrTooBig) {
				if uint64(batchBytes(recordBytes(ups))) <= testSize/2 {
					t.Fatalf("ErrTooBig for %d bytes", recordBytes(ups))
				}
				continue
			}
			if err != nil {
				break
			}
			if lsn != m.appended+1 {
				t.Fatalf("Append returned LSN %d after %d", lsn, m.appended)
			}
			m.appended = lsn
			m.recs[lsn] = ups
		case r < 80:
			if m.appended < lifeFirst {
				continue
			}
			lsn := lifeFirst + LSN(rng.Uint64N(uint64(m.appended-lifeFirst+1)))
			if err = l.Wait(ctx, lsn); err == nil {
				m.acked = max(m.acked, lsn)
			}
		case r < 85:
			upto := m.appended
			if err = l.Sync(ctx); err == nil {
				m.acked = max(m.acked, upto)
			}
		default:
			d := l.Durable()
			if rel := LSN(m.released.Load()); d > rel {
				lsn := rel + 1 + LSN(rng.Uint64N(uint64(d-rel)))
				m.release(lsn)
				l.Release(lsn)
			}
		}
		if err != nil {
			if !errors.Is(err, errCrashed) {
				t.Fatalf("unexpected error: %v", err)
			}
			return true
		}
	}
	return false
}

// check verifies that recs is a run of consecutive appended records, byte
// for byte, that holds every acknowledged record not released.
func (m *model) check(recs []Record) error {
	for i, r := range recs {
		if i > 0 && r.LSN != recs[i-1].LSN+1 {
			return fmt.Errorf("recovered LSN %d after %d", r.LSN, recs[i-1].LSN)
		}
		want, ok := m.recs[r.LSN]
		if !ok || r.LSN > m.appended {
			return fmt.Errorf("recovered LSN %d never appended (last %d)", r.LSN, m.appended)
		}
		if !equalUpdates(r.Updates, want) {
			return fmt.Errorf("recovered LSN %d differs from what was appended", r.LSN)
		}
	}
	released := LSN(m.released.Load())
	if m.acked > released {
		if len(recs) == 0 {
			return fmt.Errorf("nothing recovered; records (%d,%d] were acknowledged and not released", released, m.acked)
		}
		if first, last := recs[0].LSN, recs[len(recs)-1].LSN; first > released+1 || last < m.acked {
			return fmt.Errorf("recovered [%d,%d]; records (%d,%d] were acknowledged and not released", first, last, released, m.acked)
		}
	}
	return nil
}
