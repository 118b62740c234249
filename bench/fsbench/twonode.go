package fsbench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Two-node workloads: RunTwo measures what sharing costs when two nodes
// work on the same files. dirA and dirB are one directory seen through two
// mounts of one volume (two fs nodes); each side is driven by its own
// goroutine. Results, in order:
//
//   - ping-pong: one file written alternately through A and B, PingPongOps
//     operations in all. One operation on a side opens the file, reads back
//     and checks the 4 KiB the other side wrote last, writes 4 KiB stamped
//     with the operation's number at page (i mod 256) of a 1 MiB file, and
//     closes it; every operation takes the file's lock away from the other
//     node (pingpong_ops ops/s; pingpong_handoff_ms and
//     pingpong_handoff_p90_ms ms, the median and 90th percentile latency of
//     one operation);
//   - list while create: one goroutine creates Files small files through B
//     in one directory while another lists that directory through A, over
//     and over, until the creator is done (listcreate_create files/s on B;
//     listcreate_list listings/s on A). Every listing must hold each file
//     whose create had returned before the listing began, exactly once, and
//     no name that was never created; a final listing through A must hold
//     exactly the Files names.
//
// Every mismatch fails the run with what differed.

// TwoConfig sizes the two-node workloads; a zero count skips its workload.
type TwoConfig struct {
	PingPongOps int // writes (each with the read-back before it), alternating A, B, A, ...
	Files       int // files created through B while A lists their directory

	// VisibleWait bounds the wait for the work directory, made through A,
	// to appear through B (0: 30 s).
	VisibleWait time.Duration

	// Log receives progress lines (nil: none).
	Log io.Writer
}

// DefaultTwoConfig returns the standard sizes of the two-node workloads.
func DefaultTwoConfig() TwoConfig { return TwoConfig{PingPongOps: 2000, Files: 2000} }

// pingPongSpan is the size of the ping-pong file: operation i writes page
// i mod (pingPongSpan/PageSize).
const pingPongSpan = 1 << 20

// RunTwo runs the two-node workloads in a fresh subdirectory made through
// dirA and found through dirB (the same directory seen through two mounts),
// removed afterwards. On error it returns the results so far.
func RunTwo(ctx context.Context, dirA, dirB string, cfg TwoConfig) ([]Result, error) {
	if cfg.PingPongOps < 0 || cfg.Files < 0 || cfg.VisibleWait < 0 {
		return nil, errors.New("fsbench: negative count in two-node config")
	}
	if cfg.VisibleWait == 0 {
		cfg.VisibleWait = 30 * time.Second
	}
	for _, d := range []string{dirA, dirB} {
		st, err := os.Stat(d)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("%s: not a directory", d)
		}
	}
	r := &twoRunner{runner: runner{ctx: ctx, dir: dirA, cfg: Config{Log: cfg.Log}}, cfg: cfg, dirB: dirB}
	steps := []struct {
		skip bool
		run  func(workA, workB string) error
		name string
	}{
		{cfg.PingPongOps == 0, r.pingPong, "pingpong"},
		{cfg.Files == 0, r.listWhileCreate, "listcreate"},
	}
	for _, s := range steps {
		if s.skip {
			continue
		}
		if err := ctx.Err(); err != nil {
			return r.out, err
		}
		workA, err := os.MkdirTemp(dirA, "fsbench-two-"+s.name+"-")
		if err != nil {
			return r.out, fmt.Errorf("%s: %w", s.name, err)
		}
		workB := filepath.Join(dirB, filepath.Base(workA))
		err = r.waitVisible(workB)
		if err == nil {
			err = s.run(workA, workB)
		}
		if rerr := os.RemoveAll(workA); rerr != nil && err == nil {
			err = fmt.Errorf("%s: clean up: %w", s.name, rerr)
		}
		if err != nil {
			return r.out, err
		}
	}
	return r.out, nil
}

type twoRunner struct {
	runner
	cfg  TwoConfig
	dirB string
}

// waitVisible waits until path, made through the other mount, is a
// directory here, for at most cfg.VisibleWait.
func (r *twoRunner) waitVisible(path string) error {
	deadline := time.Now().Add(r.cfg.VisibleWait)
	for {
		st, err := os.Stat(path)
		if err == nil && st.IsDir() {
			return nil
		}
		if err == nil {
			err = errors.New("not a directory")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s, made through %s, not seen through %s after %v: %w", filepath.Base(path), r.dir, r.dirB, r.cfg.VisibleWait, err)
		}
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// pingPongPage sets page to what operation i writes: every 8-byte word
// holds i, the word's index and a constant, so that a page of another
// operation, a stale page or a torn one compares unequal.
func pingPongPage(page []byte, i int) {
	for w := 0; w < len(page); w += 8 {
		binary.LittleEndian.PutUint64(page[w:], uint64(i)<<20^uint64(w)<<4^0x9e3779b97f4a7c15)
	}
}

func pingPongOffset(i int) int64 { return int64(i) * PageSize % pingPongSpan }

// pingPong: cfg.PingPongOps operations on one file, alternately through A
// (even i) and B (odd i), each side in its own goroutine handing the turn
// to the other.
func (r *twoRunner) pingPong(workA, workB string) error {
	n := r.cfg.PingPongOps
	name := "pingpong.dat"
	if err := writeNew(filepath.Join(workA, name), nil, 0o644); err != nil {
		return fmt.Errorf("pingpong: %w", err)
	}
	r.logf("pingpong: %d alternating 4 KiB writes, each checked through the other mount", n)
	paths := [2]string{filepath.Join(workA, name), filepath.Join(workB, name)}
	sides := [2]string{"A", "B"}
	lat := make([]time.Duration, n)
	var end time.Time // operation n-1 done
	turn := [2]chan int{make(chan int, 1), make(chan int, 1)}
	errc := make(chan error, 2)
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	var wg sync.WaitGroup
	for s := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := make([]byte, PageSize)
			got := make([]byte, PageSize)
			for {
				var i int
				select {
				case <-ctx.Done():
					return
				case i = <-turn[s]:
				}
				if i == n {
					// Untimed: the last write, checked through the other side.
					if err := pingPongOp(paths[s], -1, i-1, want, got); err != nil {
						errc <- fmt.Errorf("pingpong: last check through %s: %w", sides[s], err)
						return
					}
					errc <- nil
					return
				}
				if err := ctx.Err(); err != nil {
					errc <- err
					return
				}
				start := time.Now()
				if err := pingPongOp(paths[s], i, i-1, want, got); err != nil {
					errc <- fmt.Errorf("pingpong: operation %d through %s: %w", i, sides[s], err)
					return
				}
				lat[i] = time.Since(start)
				if i == n-1 {
					end = time.Now()
				}
				turn[1-s] <- i + 1
			}
		}()
	}
	start := time.Now()
	turn[0] <- 0
	var err error
	select {
	case err = <-errc:
	case <-r.ctx.Done():
		err = r.ctx.Err()
	}
	cancel() // the side without the turn waits for it
	wg.Wait()
	if err != nil {
		return err
	}
	r.add("pingpong_ops", rate(float64(n), end.Sub(start)), "ops/s")
	slices.Sort(lat)
	r.add("pingpong_handoff_ms", ms(lat[(n-1)/2]), "ms")
	r.add("pingpong_handoff_p90_ms", ms(lat[(n-1)*9/10]), "ms")
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pingPongOp opens path, checks operation prev's page (if prev >= 0),
// writes operation i's page (if i >= 0), and closes the file.
func pingPongOp(path string, i, prev int, want, got []byte) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if prev >= 0 {
		off := pingPongOffset(prev)
		if _, err := f.ReadAt(got, off); err != nil {
			f.Close()
			return fmt.Errorf("read back operation %d's page at offset %d: %w", prev, off, err)
		}
		pingPongPage(want, prev)
		if !bytes.Equal(got, want) {
			f.Close()
			return fmt.Errorf("incoherent: page at offset %d is not what operation %d wrote through the other mount (%s)",
				off, prev, describePage(got, prev))
		}
	}
	if i >= 0 {
		pingPongPage(want, i)
		if _, err := f.WriteAt(want, pingPongOffset(i)); err != nil {
			f.Close()
			return fmt.Errorf("write: %w", err)
		}
	}
	return f.Close()
}

// describePage says which operation's words a mismatching page holds.
func describePage(got []byte, want int) string {
	first, bad := -1, 0
	var want0 [PageSize]byte
	pingPongPage(want0[:], want)
	for w := 0; w < len(got); w += 8 {
		if !bytes.Equal(got[w:w+8], want0[w:w+8]) {
			if first < 0 {
				first = w
			}
			bad++
		}
	}
	v := binary.LittleEndian.Uint64(got[first:]) ^ uint64(first)<<4 ^ 0x9e3779b97f4a7c15
	return fmt.Sprintf("%d of %d words differ, the first at byte %d holds operation %d's stamp", bad, len(got)/8, first, v>>20)
}

// listWhileCreate: cfg.Files files created through B, one after the other,
// while A lists the directory over and over until they are all created.
func (r *twoRunner) listWhileCreate(workA, workB string) error {
	n := r.cfg.Files
	r.logf("listcreate: create %d files through %s while listing them through %s", n, r.dirB, r.dir)
	fileName := func(i int) string { return fmt.Sprintf("c%07d", i) }
	var created atomic.Int64 // creates that have returned; n+1 once the creator stopped
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error // the first failure; the other side then stops
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	var createTime, listTime time.Duration
	listings := 0
	var wg sync.WaitGroup
	wg.Add(2)
	start := time.Now()
	go func() { // B: the creator
		defer wg.Done()
		defer created.Store(int64(n) + 1)
		for i := range n {
			if i%ctxEvery == 0 && ctx.Err() != nil {
				fail(ctx.Err())
				return
			}
			name := fileName(i)
			if err := writeNew(filepath.Join(workB, name), []byte(name+"\n"), 0o644); err != nil {
				fail(fmt.Errorf("listcreate_create: %w", err))
				return
			}
			created.Store(int64(i) + 1)
		}
		createTime = time.Since(start)
	}()
	go func() { // A: the lister, at least once
		defer wg.Done()
		for {
			if ctx.Err() != nil {
				fail(ctx.Err())
				return
			}
			before := created.Load()
			if before > int64(n) && listings > 0 {
				break
			}
			names, err := readDirNames(workA)
			if err != nil {
				fail(fmt.Errorf("listcreate_list: %w", err))
				return
			}
			if err := checkListing(names, min(int(before), n), n, fileName); err != nil {
				fail(fmt.Errorf("listcreate_list: listing %d through %s: %w", listings+1, r.dir, err))
				return
			}
			listings++
		}
		listTime = time.Since(start)
	}()
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	r.add("listcreate_create", rate(float64(n), createTime), "files/s")
	r.add("listcreate_list", rate(float64(listings), listTime), "listings/s")
	names, err := readDirNames(workA)
	if err != nil {
		return fmt.Errorf("listcreate: final listing: %w", err)
	}
	if err := checkListing(names, n, n, fileName); err != nil {
		return fmt.Errorf("listcreate: final listing through %s: %w", r.dir, err)
	}
	if len(names) != n {
		return fmt.Errorf("listcreate: final listing through %s: %d names, want %d", r.dir, len(names), n)
	}
	return nil
}

func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	return names, err
}

// checkListing checks a listing taken when the first done of n files
// (named by name) had been created: each of those appears exactly once,
// and nothing else appears but other files of the n, at most once.
func checkListing(names []string, done, n int, name func(int) string) error {
	seen := make([]bool, n)
	for _, s := range names {
		i, err := strconv.Atoi(strings.TrimPrefix(s, "c"))
		if err != nil || i < 0 || i >= n || s != name(i) {
			return fmt.Errorf("unexpected name %q", s)
		}
		if seen[i] {
			return fmt.Errorf("%s listed twice", s)
		}
		seen[i] = true
	}
	for i := range done {
		if !seen[i] {
			return fmt.Errorf("%s missing (created before the listing began; %d names listed)", name(i), len(names))
		}
	}
	return nil
}
