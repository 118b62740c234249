package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/internal/testseed"
)

// waitZeroed waits until s has zeroed at least n bytes ahead.
func waitZeroed(t *testing.T, s *Store, n int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for s.Stats().ZeroedBytes < n {
		if time.Now().After(deadline) {
			t.Fatalf("zeroed %d bytes, want at least %d", s.Stats().ZeroedBytes, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestZeroAhead: small commits make the zeroer write zeros about
// zeroLeadBytes past the records and no further; large ones do not wake
// it, nor small ones within zeroBulkQuiet of a large one; the zeroed tail is free space to a reopen, and what was written
// reads back before and after.
func TestZeroAhead(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{})
	if s.head.alloc == 0 {
		t.Skip("the file system under the test cannot preallocate")
	}
	for b := range uint64(4) {
		mustApply(t, s, putOp(Key{Vol: 1, Block: 100 + b, Gen: 1}, 1))
	}
	waitZeroed(t, s, zeroLeadBytes)
	size := s.head.size.Load()
	var done, claimed int64
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s.zero.mu.Lock()
		done, claimed = s.zero.done, s.zero.claimed
		s.zero.mu.Unlock()
		if done > size+zeroLeadBytes-zeroStepBytes || time.Now().After(deadline) {
			break
		}
	}
	if claimed != size || done <= size+zeroLeadBytes-zeroStepBytes || done > size+zeroLeadBytes+zeroStepBytes {
		t.Fatalf("records end at %d; zeroer claimed %d, done %d: want %d ahead, give or take a step", size, claimed, done, zeroLeadBytes)
	}
	time.Sleep(50 * time.Millisecond)
	if z := s.Stats().ZeroedBytes; z > s.head.size.Load()+zeroLeadBytes+zeroStepBytes {
		t.Fatalf("zeroed %d bytes after four small commits (records end at %d), more than the lead", z, s.head.size.Load())
	}

	// A bulk writer is left alone: 32 blocks a batch is 128 KiB.
	bulk := openT(t, t.TempDir(), Options{})
	for i := range uint64(8) {
		var ops []Op
		for b := range uint64(32) {
			ops = append(ops, putOp(Key{Vol: 1, Block: i*32 + b, Gen: 1}, 1))
		}
		mustApply(t, bulk, ops...)
	}
	// Nor do small commits right after it (the file systems' log
	// records between a bulk writer's chunks).
	for b := range uint64(4) {
		mustApply(t, bulk, putOp(Key{Vol: 2, Block: b, Gen: 1}, 1))
	}
	time.Sleep(50 * time.Millisecond)
	if z := bulk.Stats().ZeroedBytes; z != 0 {
		t.Fatalf("bulk commits and small ones right after had %d bytes zeroed ahead", z)
	}

	// More small commits land in the zeroed space; all of it reads back,
	// and again after a reopen.
	for b := range uint64(40) {
		mustApply(t, s, putOp(Key{Vol: 1, Block: 200 + b, Gen: 1}, 2))
	}
	check := func(s *Store) {
		t.Helper()
		for b := range uint64(4) {
			checkPut(t, s, Key{Vol: 1, Block: 100 + b, Gen: 1}, 1)
		}
		for b := range uint64(40) {
			checkPut(t, s, Key{Vol: 1, Block: 200 + b, Gen: 1}, 2)
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openT(t, dir, Options{})
	check(s2)
	mustApply(t, s2, putOp(Key{Vol: 1, Block: 300, Gen: 1}, 3))
	checkPut(t, s2, Key{Vol: 1, Block: 300, Gen: 1}, 3)
}

// TestZeroNeverOverRecords: with every zero write slowed down, writers of
// small and large batches race the zeroer across many segment rolls; every
// record reads back, before and after a reopen (zeros written over
// records would fail their checksums).
func TestZeroNeverOverRecords(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 7))
	dir := t.TempDir()
	opts := Options{SegmentBytes: 1 << 20}
	s := openT(t, dir, opts)
	if s.head.alloc == 0 {
		t.Skip("the file system under the test cannot preallocate")
	}
	s.zero.onWrite = func() { time.Sleep(2 * time.Millisecond) }
	s.zero.quiet = 0 // zeroing between the large batches too
	const writers, batches = 4, 120
	sizes := make([][]int, writers)
	for w := range sizes {
		for range batches {
			n := 1
			if rng.IntN(8) == 0 {
				n = 1 + rng.IntN(40) // up to 160 KiB: past zeroSmallBytes
			}
			sizes[w] = append(sizes[w], n)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			block := uint64(w) << 20
			for _, n := range sizes[w] {
				var ops []Op
				for range n {
					ops = append(ops, putOp(Key{Vol: 1, Block: block, Gen: 1}, 1))
					block++
				}
				if err := s.Apply(context.Background(), ops); err != nil {
					errs <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if s.Stats().ZeroedBytes == 0 {
		t.Fatal("the zeroer never ran")
	}
	if s.Stats().Segments < 4 {
		t.Fatalf("%d segments: the test wants rolls", s.Stats().Segments)
	}
	check := func(s *Store) {
		t.Helper()
		for w := range writers {
			block := uint64(w) << 20
			for _, n := range sizes[w] {
				for range n {
					checkPut(t, s, Key{Vol: 1, Block: block, Gen: 1}, 1)
					block++
				}
			}
		}
	}
	check(s)
	// Zeros never extend a sealed segment past its records.
	s.mu.RLock()
	for id, seg := range s.mu.segs {
		if id == s.headID.Load() {
			continue
		}
		fi, err := os.Stat(filepath.Join(dir, segName(id)))
		if err != nil || fi.Size() != seg.size.Load() {
			t.Errorf("sealed segment %d: file of %v bytes (%v), records %d", id, fi.Size(), err, seg.size.Load())
		}
	}
	s.mu.RUnlock()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check(openT(t, dir, opts))
}

// TestZeroRetiredBeforeSeal: a segment rolled while the zeroer writes
// ahead in it is sealed only after that write, so the zeros cannot extend
// the sealed file past its records.
func TestZeroRetiredBeforeSeal(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{SegmentBytes: 1 << 20})
	if s.head.alloc == 0 {
		t.Skip("the file system under the test cannot preallocate")
	}
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	t.Cleanup(letGo) // before the store's Close, which waits for the zeroer
	s.zero.quiet = 0
	s.zero.onWrite = func() {
		started <- struct{}{}
		<-release
	}
	batch := func(first uint64, n int) []Op {
		var ops []Op
		for i := range uint64(n) {
			ops = append(ops, putOp(Key{Vol: 1, Block: first + i, Gen: 1}, 1))
		}
		return ops
	}
	mustApply(t, s, batch(0, 200)...) // 840 KB: does not wake the zeroer
	mustApply(t, s, batch(1000, 1)...)
	<-started // zeroing the rest of the segment, held
	first := s.head
	rolled := make(chan error, 1)
	go func() { rolled <- s.Apply(context.Background(), batch(2000, 100)) }() // does not fit: a roll
	select {
	case err := <-rolled:
		t.Fatalf("the roll did not wait for the zero write in the segment it sealed: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	letGo()
	if err := <-rolled; err != nil {
		t.Fatal(err)
	}
	s.zero.onWrite = nil
	if s.head == first {
		t.Fatal("no roll")
	}
	fi, err := os.Stat(filepath.Join(dir, segName(first.id)))
	if err != nil || fi.Size() != first.size.Load() {
		t.Fatalf("sealed segment: file of %v bytes (%v), records %d", fi.Size(), err, first.size.Load())
	}
	for _, b := range []uint64{0, 199, 1000, 2000, 2099} {
		checkPut(t, s, Key{Vol: 1, Block: b, Gen: 1}, 1)
	}
}
