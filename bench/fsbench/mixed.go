package fsbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// mixedReadPercent is the share of reads among the operations of
// rand_mixed; the rest are writes.
const mixedReadPercent = 70

// RandQDMax bounds Config.RandQD (goroutines with an operation in flight).
const RandQDMax = 1024

// randMixed: RandOps 4 KiB operations at random pages of t, the random I/O
// file or section, mixedReadPercent of them reads and the rest writes, with
// RandQD of them in flight at once, then one sync, timed together
// (rand_mixed_qdN IOPS); bounded by RandTime. t holds p, except the pages
// of written, which hold p.version(1).
//
// Each of the RandQD goroutines owns the pages whose index is its number
// modulo RandQD and knows which version of each it wrote last, so that
// every read is checked against the version last written and no other
// goroutine can write a page while its owner reads it.
func (r *runner) randMixed(t target, p pattern, written []int64) error {
	cfg := r.cfg
	name := fmt.Sprintf("rand_mixed_qd%d", cfg.RandQD)
	pages := cfg.RandSize / PageSize
	r.logf("%s: %d random 4 KiB reads and writes (%d%% reads), %d in flight, then fsync (at most %v)",
		name, cfg.RandOps, mixedReadPercent, cfg.RandQD, cfg.RandTime)
	lanes := make([]*mixedLane, cfg.RandQD)
	for i := range lanes {
		lanes[i] = newMixedLane(int64(i), int64(len(lanes)), pages, rand.New(rand.NewPCG(cfg.Seed, 5<<32|uint64(i))))
	}
	for _, pg := range written {
		lanes[pg%int64(len(lanes))].versions[pg] = 1
	}
	r.drop(t) // the pages rand_write_4k checked, clean since its sync

	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	var claimed atomic.Int64 // operations begun, by all lanes
	claim := func() bool { return claimed.Add(1) <= int64(cfg.RandOps) }
	errs := make([]error, len(lanes))
	var wg sync.WaitGroup
	start := time.Now()
	for i, l := range lanes {
		wg.Go(func() {
			errs[i] = l.run(ctx, t, p, claim, func(n int) bool {
				return n%ctxEvery == 0 && cfg.RandTime > 0 && time.Since(start) >= cfg.RandTime
			})
			if errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	for _, err := range errs { // a lane's own error, not the cancel it caused
		if err != nil && !errors.Is(err, ctx.Err()) {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if err := r.ctx.Err(); err != nil {
		return err
	}
	if err := t.dev.Sync(r.ctx); err != nil {
		return fmt.Errorf("%s: %s: %w", name, t.name, err)
	}
	el := time.Since(start)
	var reads, writes int
	for _, l := range lanes {
		reads, writes = reads+l.reads, writes+l.writes
	}
	r.add(name, rate(float64(reads+writes), el), "IOPS")
	r.logf("%s: %d reads, %d writes", name, reads, writes)

	// Check (untimed), from disk, a sample of the pages written, from
	// every lane.
	r.drop(t)
	var sample []int64
	for _, l := range lanes {
		sample = append(sample, l.wrote[:min(len(l.wrote), 256/len(lanes)+1)]...)
	}
	return checkPages(r.ctx, t, p, sample, func(pg int64) uint64 {
		return uint64(lanes[pg%int64(len(lanes))].versions[pg])
	}, name+": check")
}

// mixedLane is one goroutine of rand_mixed: it owns the pages whose index
// is lane modulo lanes.
type mixedLane struct {
	lane, lanes int64
	own         int64 // pages owned
	rng         *rand.Rand
	readPercent int

	versions      map[int64]uint32 // by page; absent: 0, the fill
	wrote         []int64          // pages written, in order, repeats included
	reads, writes int
}

func newMixedLane(lane, lanes, pages int64, rng *rand.Rand) *mixedLane {
	return &mixedLane{
		lane: lane, lanes: lanes, own: (pages - lane + lanes - 1) / lanes,
		rng: rng, readPercent: mixedReadPercent, versions: map[int64]uint32{},
	}
}

// run does operations on l's pages of t, whose content is p.version of
// each page's version, for as long as claim grants one and expired (given
// the number done) is false, checking every page it reads; it stops at the
// first error, or when ctx is done (with ctx.Err()).
func (l *mixedLane) run(ctx context.Context, t target, p pattern, claim func() bool, expired func(int) bool) error {
	buf, want := make([]byte, PageSize), make([]byte, PageSize)
	for n := 0; ; n++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if expired(n) || !claim() {
			return nil
		}
		pg := l.lane + l.lanes*l.rng.Int64N(l.own)
		off := pg * PageSize
		v := l.versions[pg]
		if l.rng.IntN(100) < l.readPercent {
			if err := t.dev.ReadAt(ctx, buf, uint64(off)); err != nil {
				return fmt.Errorf("%s at offset %d: %w", t.name, off, err)
			}
			if p.version(uint64(v)).fill(want, off); !bytes.Equal(buf, want) {
				return fmt.Errorf("%s: the page at offset %d is not version %d, the last written", t.name, off, v)
			}
			l.reads++
			continue
		}
		p.version(uint64(v)+1).fill(buf, off)
		if err := t.dev.WriteAt(ctx, buf, uint64(off)); err != nil {
			return fmt.Errorf("%s at offset %d: %w", t.name, off, err)
		}
		l.versions[pg] = v + 1
		l.wrote = append(l.wrote, pg)
		l.writes++
	}
}
