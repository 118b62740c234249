package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/volume"
)

// extent is one write of the workload and what became of it. Extents of one
// workload never overlap, so each has one expected content.
type extent struct {
	off  uint64
	data []byte // what was written; after a decommit, zeros

	start, end time.Time
	err        error // nil: acknowledged
	done       bool
}

func (e *extent) String() string {
	return fmt.Sprintf("[%d, %d) (%d bytes)", e.off, e.off+uint64(len(e.data)), len(e.data))
}

const (
	slotBytes     = 2 << 20 // extents sit in distinct 2 MiB slots
	extentMaxBase = 1 << 50 // offsets spread over [0, 2^50)
)

// slots hands out distinct slots of the address space across a test, so
// extents made at different times never overlap.
type slots struct {
	rng  *rand.Rand
	used map[uint64]bool
}

func newSlots(rng *rand.Rand) *slots { return &slots{rng: rng, used: map[uint64]bool{}} }

func (s *slots) next() uint64 {
	for {
		n := s.rng.Uint64N(extentMaxBase / slotBytes)
		if !s.used[n] {
			s.used[n] = true
			return n * slotBytes
		}
	}
}

// scattered returns extents of random data totalling about total bytes:
// 4 KiB to 1 MiB each at random offsets below 2^50, a third of them with
// an unaligned offset and length.
func (s *slots) scattered(total int64) []*extent {
	var out []*extent
	for sum := int64(0); sum < total; {
		base := s.next()
		var off uint64
		var n int
		switch s.rng.IntN(3) {
		case 0: // unaligned offset and length
			off = base + s.rng.Uint64N(1<<20)
			n = 4096 + s.rng.IntN(1<<20-4096+1)
		case 1: // block aligned
			off = base + s.rng.Uint64N(256)*4096
			n = (1 + s.rng.IntN(256)) * 4096
		default: // chunk aligned, whole chunks
			off = base + s.rng.Uint64N(16)*64<<10
			n = (1 + s.rng.IntN(16)) * 64 << 10
		}
		n = int(min(int64(n), total-sum, 1<<20))
		n = max(n, 4096)
		data := make([]byte, n)
		fill(s.rng, data)
		out = append(out, &extent{off: off, data: data})
		sum += int64(n)
	}
	return out
}

// fill writes random bytes into p.
func fill(rng *rand.Rand, p []byte) {
	for i := 0; i+8 <= len(p); i += 8 {
		v := rng.Uint64()
		for j := range 8 {
			p[i+j] = byte(v >> (8 * j))
		}
	}
	for i := len(p) &^ 7; i < len(p); i++ {
		p[i] = byte(rng.Uint32())
	}
}

// writer runs extents through a Volume from several goroutines and keeps
// count of acknowledged bytes.
type writer struct {
	v       *volume.Volume
	workers int
	acked   atomic.Int64
	mu      sync.Mutex
}

// writeAll writes every extent once, from w.workers goroutines, recording
// for each its start, end and result. It returns when all are done.
func (w *writer) writeAll(ctx context.Context, exts []*extent) { w.writeUntil(ctx, exts, nil) }

// writeUntil is writeAll, but starts no new write once stop is closed;
// extents not started stay !done.
func (w *writer) writeUntil(ctx context.Context, exts []*extent, stop <-chan struct{}) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range w.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := int(next.Add(1) - 1)
				if i >= len(exts) {
					return
				}
				w.writeOne(ctx, exts[i])
			}
		}()
	}
	wg.Wait()
}

func (w *writer) writeOne(ctx context.Context, e *extent) {
	start := time.Now()
	err := w.v.WriteAt(ctx, e.data, e.off)
	end := time.Now()
	w.mu.Lock()
	e.start, e.end, e.err, e.done = start, end, err, true
	w.mu.Unlock()
	if err == nil {
		w.acked.Add(int64(len(e.data)))
	}
}

// results summarises a finished workload.
type results struct {
	acked, failed []*extent
	errs          map[string]int
}

func summarise(exts []*extent) results {
	r := results{errs: map[string]int{}}
	for _, e := range exts {
		switch {
		case !e.done:
		case e.err == nil:
			r.acked = append(r.acked, e)
		default:
			r.failed = append(r.failed, e)
			msg := e.err.Error()
			if len(msg) > 200 {
				msg = msg[:200] + "..."
			}
			r.errs[msg]++
		}
	}
	return r
}

func (r results) String() string {
	s := fmt.Sprintf("%d writes acknowledged, %d failed", len(r.acked), len(r.failed))
	var msgs []string
	for m, n := range r.errs {
		msgs = append(msgs, fmt.Sprintf("  %d× %s", n, m))
	}
	sort.Strings(msgs)
	if len(msgs) > 0 {
		s += ":\n" + strings.Join(msgs, "\n")
	}
	return s
}

// verify reads every extent back through v. Acknowledged extents must
// read back exactly. Extents whose write failed may hold old bytes (zeros)
// or new ones, byte by byte, and nothing else.
func verify(t *testing.T, ctx context.Context, v *volume.Volume, exts []*extent) {
	t.Helper()
	verifyAt(t, ctx, v, "", exts)
}

// verifyAt is verify as of a snapshot ("" = the live volume).
func verifyAt(t *testing.T, ctx context.Context, v *volume.Volume, snap string, exts []*extent) {
	t.Helper()
	verifyWith(t, ctx, v, snap, exts, nil)
}

// verifyWith is verifyAt that adds diag's explanation of the first few
// mismatches (diag may be nil).
func verifyWith(t *testing.T, ctx context.Context, v *volume.Volume, snap string, exts []*extent, diag diagFunc) {
	t.Helper()
	var diags atomic.Int64
	const readers = 4
	var (
		mu       sync.Mutex
		problems []string
		wg       sync.WaitGroup
		next     atomic.Int64
		bytesOK  atomic.Int64
		checked  atomic.Int64
	)
	report := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	where := ""
	if snap != "" {
		where = " in snapshot " + snap
	}
	start := time.Now()
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(exts) {
					return
				}
				e := exts[i]
				if !e.done {
					continue
				}
				got := make([]byte, len(e.data))
				if err := v.ReadSnapshotAt(ctx, snap, got, e.off); err != nil {
					report("read %v%s: %v", e, where, err)
					continue
				}
				if e.err == nil {
					if d := firstDiff(got, e.data); d >= 0 {
						extra := ""
						if diag != nil && diags.Add(1) <= 3 {
							extra = "\n    " + diag(e, d)
						}
						report("acknowledged write %v reads back different bytes%s: %s%s", e, where, describeDiff(got, e.data, d), extra)
						continue
					}
				} else {
					for j := range got {
						if got[j] != 0 && got[j] != e.data[j] {
							report("failed write %v%s: byte %d (offset %d) is %#x, neither old (0) nor new (%#x)",
								e, where, j, e.off+uint64(j), got[j], e.data[j])
							break
						}
					}
				}
				bytesOK.Add(int64(len(got)))
				checked.Add(1)
			}
		}()
	}
	wg.Wait()
	t.Logf("verified %d extents (%d MiB)%s in %v", checked.Load(), bytesOK.Load()>>20, where, time.Since(start).Round(time.Millisecond))
	sort.Strings(problems)
	for i, p := range problems {
		if i == 20 {
			t.Errorf("... and %d more problems", len(problems)-20)
			break
		}
		t.Error(p)
	}
}

func firstDiff(got, want []byte) int {
	if bytes.Equal(got, want) {
		return -1
	}
	for i := range got {
		if got[i] != want[i] {
			return i
		}
	}
	return len(got)
}

// describeDiff explains how got differs from want from index d on.
func describeDiff(got, want []byte, d int) string {
	end := d
	for end < len(got) && got[end] != want[end] {
		end++
	}
	zeros := bytes.Count(got[d:end], []byte{0}) == end-d
	what := "other bytes"
	if zeros {
		what = "zeros"
	}
	return fmt.Sprintf("first difference at byte %d (block %d of the extent): %d bytes of %s where the write put data; got %x.., want %x..",
		d, d/4096, end-d, what, got[d:min(d+8, end)], want[d:min(d+8, end)])
}

// zeroExtent makes e expect zeros (after a decommit of exactly its range).
func zeroExtent(e *extent) { e.data = make([]byte, len(e.data)) }

// expectNow copies the current expectation of acknowledged extents, for
// a snapshot taken now; zeros lists extents not written yet.
func expectNow(exts, zeros []*extent) []*extent {
	var out []*extent
	for _, e := range exts {
		if e.done && e.err == nil {
			out = append(out, &extent{off: e.off, data: bytes.Clone(e.data), done: true})
		}
	}
	for _, e := range zeros {
		out = append(out, &extent{off: e.off, data: make([]byte, len(e.data)), done: true})
	}
	return out
}

// chunksOf counts the distinct 64 KiB chunks the extents touch.
func chunksOf(exts []*extent, chunk uint64) int64 {
	seen := map[uint64]bool{}
	for _, e := range exts {
		for c := e.off / chunk; c <= (e.off+uint64(len(e.data))-1)/chunk; c++ {
			seen[c] = true
		}
	}
	return int64(len(seen))
}

// isFenced reports whether err is the volume client's fencing error.
func isFenced(err error) bool { return errors.Is(err, volume.ErrFenced) }
