package redo

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestAppendWaitRecover(t *testing.T) {
	ctx := context.Background()
	mem := NewMemDevice(8192 + testSize)
	opts := testOptions(8192)
	l := mustOpen(t, mem, opts)
	a := mustAppend(t, l, []Update{upd(4096, 7, 10, "hello"), upd(8192, 3, 0, "x")})
	b := mustAppend(t, l, []Update{upd(4096, 8, 12, "LL")})
	if a != 1 || b != 2 {
		t.Fatalf("LSNs %d %d, want 1 2", a, b)
	}
	if err := l.Wait(ctx, b); err != nil {
		t.Fatal(err)
	}
	if got := l.Durable(); got != b {
		t.Fatalf("Durable %d, want %d", got, b)
	}
	// A crash now: the region holds both records.
	recs := mustRecover(t, mem, opts)
	if len(recs) != 2 || recs[0].LSN != a || recs[1].LSN != b ||
		!equalUpdates(recs[0].Updates, []Update{upd(4096, 7, 10, "hello"), upd(8192, 3, 0, "x")}) ||
		!equalUpdates(recs[1].Updates, []Update{upd(4096, 8, 12, "LL")}) {
		t.Fatalf("Recover = %+v", recs)
	}
	l.Release(a)
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Closed with b unreleased: Recover still returns b.
	recs = mustRecover(t, mem, opts)
	if len(recs) != 1 || recs[0].LSN != b {
		t.Fatalf("after close with b unreleased: %+v", recs)
	}
	// Reopen: LSNs go on above everything in the region; the open marker
	// releases what was there.
	l = mustOpen(t, mem, opts)
	c := mustAppend(t, l, []Update{upd(0, 1, 0, "c")})
	if c <= b {
		t.Fatalf("LSN after reopen %d, want > %d", c, b)
	}
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	l.Release(c)
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if recs := mustRecover(t, mem, opts); len(recs) != 0 {
		t.Fatalf("clean close: Recover = %+v, want nothing", recs)
	}
	if _, err := l.Append(nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v, want ErrClosed", err)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestEmptyRegion(t *testing.T) {
	mem := NewMemDevice(testSize)
	if recs := mustRecover(t, mem, testOptions(0)); len(recs) != 0 {
		t.Fatalf("zeroed region: %+v", recs)
	}
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	mem := NewMemDevice(testSize)
	for _, o := range []Options{{Size: 32 << 10}, {Base: 512, Size: testSize}, {Size: testSize + 512}, {Size: testSize, FlushInterval: -1}} {
		if _, err := Open(ctx, mem, o); !errors.Is(err, ErrOptions) {
			t.Errorf("Open(%+v): %v, want ErrOptions", o, err)
		}
		if _, err := Recover(ctx, mem, o); !errors.Is(err, ErrOptions) {
			t.Errorf("Recover(%+v): %v, want ErrOptions", o, err)
		}
	}
	l := mustOpen(t, mem, testOptions(0))
	defer l.Close(ctx)
	for _, u := range []Update{upd(100, 1, 0, "x"), {Addr: 4096, Off: 4000, Data: make([]byte, 97)}} {
		if _, err := l.Append([]Update{u}); !errors.Is(err, ErrBadUpdate) {
			t.Errorf("Append(%+v): %v, want ErrBadUpdate", u, err)
		}
	}
	big := make([]Update, 8)
	for i := range big {
		big[i] = Update{Addr: uint64(i) * 4096, Data: make([]byte, 4096)}
	}
	if _, err := l.Append(big); !errors.Is(err, ErrTooBig) {
		t.Errorf("Append of 32 KiB: %v, want ErrTooBig", err)
	}
	if _, err := l.Append(big[:7]); err != nil {
		t.Errorf("Append of 28 KiB: %v", err)
	}
	if err := l.Wait(ctx, 99); err == nil {
		t.Errorf("Wait for an LSN never appended: nil error")
	}
}

// TestFullLogBlocks fills the log, checks that Append blocks until Release,
// and that Close wakes a blocked Append with ErrClosed.
func TestFullLogBlocks(t *testing.T) {
	ctx := context.Background()
	mem := NewMemDevice(testSize)
	var pressure atomic.Int32
	opts := testOptions(0)
	opts.OnPressure = func() { pressure.Add(1) }
	l := mustOpen(t, mem, opts)
	rec := []Update{{Addr: 4096, Data: make([]byte, 4000)}}
	var last LSN
	for {
		done := make(chan LSN)
		go func() {
			lsn, _ := l.Append(rec)
			done <- lsn
		}()
		select {
		case last = <-done:
			continue
		case <-time.After(200 * time.Millisecond):
		}
		// Blocked: the log is full. Release everything durable.
		if err := l.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if pressure.Load() == 0 {
			t.Errorf("log full and OnPressure never called")
		}
		l.Release(last)
		select {
		case lsn := <-done:
			if lsn != last+1 {
				t.Fatalf("Append after Release returned LSN %d, want %d", lsn, last+1)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Append still blocked after Release")
		}
		break
	}
	if last < 10 {
		t.Fatalf("log full after %d records of 4 KiB in 64 KiB", last)
	}
	// Fill it again, then Close while an Append is blocked.
	errc := make(chan error, 1)
	go func() {
		for {
			if _, err := l.Append(rec); err != nil {
				errc <- err
				return
			}
		}
	}()
	time.Sleep(100 * time.Millisecond)
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_ = l.Close(cctx) // its flush may not fit before ctx ends: either way
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("blocked Append after Close: %v, want ErrClosed", err)
	}
}

// TestStickyDeviceError: after a fenced write the log writes nothing more,
// and every call returns the device's error.
func TestStickyDeviceError(t *testing.T) {
	ctx := context.Background()
	dev := &fenceDevice{MemDevice: NewMemDevice(testSize), n: 3}
	l := mustOpen(t, dev, testOptions(0))
	var err error
	for i := 0; i < 10 && err == nil; i++ {
		var lsn LSN
		if lsn, err = l.Append([]Update{upd(0, uint64(i), 0, "a")}); err == nil {
			err = l.Wait(ctx, lsn)
		}
	}
	if !errors.Is(err, errFenced) {
		t.Fatalf("err %v, want fenced", err)
	}
	if _, err := l.Append(nil); !errors.Is(err, errFenced) {
		t.Errorf("Append after fence: %v", err)
	}
	if err := l.Sync(ctx); !errors.Is(err, errFenced) {
		t.Errorf("Sync after fence: %v", err)
	}
	if err := l.Close(ctx); !errors.Is(err, errFenced) {
		t.Errorf("Close after fence: %v", err)
	}
	if dev.after != 1 {
		t.Errorf("%d writes reached the device after the fence, want only the fenced one", dev.after)
	}
}

// TestFlushInterval: a record nobody waits for becomes durable anyway.
func TestFlushInterval(t *testing.T) {
	mem := NewMemDevice(testSize)
	opts := testOptions(0)
	opts.FlushInterval = 20 * time.Millisecond
	l := mustOpen(t, mem, opts)
	defer l.Close(context.Background())
	lsn := mustAppend(t, l, []Update{upd(0, 1, 0, "a")})
	deadline := time.Now().Add(5 * time.Second)
	for l.Durable() < lsn {
		if time.Now().After(deadline) {
			t.Fatal("record not durable without Wait")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s := l.Stats(); s.Waits != 0 || s.Records != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestConcurrentGroupCommit: 32 goroutines Append and Wait on a device with
// 1 ms writes; the log must batch.
func TestConcurrentGroupCommit(t *testing.T) {
	ctx := context.Background()
	const writers, each = 32, 50
	mem := NewMemDevice(1 << 20)
	opts := Options{Size: 1 << 20}
	var l *Log
	var lp atomic.Pointer[Log]
	opts.OnPressure = func() { lp.Load().Release(lp.Load().Durable()) }
	l = mustOpen(t, slowDevice{mem, time.Millisecond}, opts)
	lp.Store(l)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				lsn, err := l.Append([]Update{upd(uint64(w)*4096, uint64(i), 0, "some metadata bytes")})
				if err == nil {
					err = l.Wait(ctx, lsn)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	s := l.Stats()
	t.Logf("stats %+v, batching factor %.1f", s, s.BatchingFactor())
	if s.Records != writers*each {
		t.Errorf("%d records written, want %d", s.Records, writers*each)
	}
	if s.BatchingFactor() <= 1 {
		t.Errorf("batching factor %.2f, want > 1", s.BatchingFactor())
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	recs := mustRecover(t, mem, opts)
	for i, r := range recs {
		if i > 0 && r.LSN != recs[i-1].LSN+1 {
			t.Fatalf("gap at %d: %d after %d", i, r.LSN, recs[i-1].LSN)
		}
	}
}

func TestPlan(t *testing.T) {
	full := string(make([]byte, 4096))
	recs := []Record{
		{LSN: 1, Updates: []Update{upd(8192, 1, 0, "a"), upd(4096, 5, 3, "b")}},
		{LSN: 2, Updates: []Update{upd(8192, 2, 10, "c")}},
		{LSN: 3, Updates: []Update{upd(0, 9, 0, "z"), upd(4096, 6, 0, full)}},
		{LSN: 4, Updates: []Update{upd(4096, 7, 5, "d"), upd(8192, 3, 0, "e")}},
	}
	got := Plan(recs)
	want := []Block{
		{Addr: 0, Updates: []Update{upd(0, 9, 0, "z")}},
		{Addr: 4096, Updates: []Update{upd(4096, 6, 0, full), upd(4096, 7, 5, "d")}},
		{Addr: 8192, Updates: []Update{upd(8192, 1, 0, "a"), upd(8192, 2, 10, "c"), upd(8192, 3, 0, "e")}},
	}
	if len(got) != len(want) {
		t.Fatalf("Plan = %+v", got)
	}
	for i := range want {
		if got[i].Addr != want[i].Addr || !equalUpdates(got[i].Updates, want[i].Updates) {
			t.Errorf("block %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if len(Plan(nil)) != 0 {
		t.Errorf("Plan(nil) not empty")
	}
}
