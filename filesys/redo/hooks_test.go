package redo

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWriteHooks: BeforeWrite and AfterWrite come in pairs around every
// write of the writer goroutine; AfterWrite reports each batch's records
// (contiguous LSNs, together Stats.Records) before their Wait returns.
func TestWriteHooks(t *testing.T) {
	ctx := context.Background()
	mem := NewMemDevice(1 << 20)
	var mu sync.Mutex
	var (
		inWrite  bool
		unpaired int
		written  []Written
	)
	opts := Options{Size: 1 << 20, FlushInterval: time.Millisecond,
		BeforeWrite: func() error {
			mu.Lock()
			defer mu.Unlock()
			if inWrite {
				unpaired++
			}
			inWrite = true
			return nil
		},
		AfterWrite: func(w Written) {
			mu.Lock()
			defer mu.Unlock()
			if !inWrite {
				unpaired++
			}
			inWrite = false
			written = append(written, w)
		}}
	l := mustOpen(t, slowDevice{mem, time.Millisecond}, opts)
	reported := func(lsn LSN) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, w := range written {
			if w.Records > 0 && w.First <= lsn && lsn <= w.Last {
				return true
			}
		}
		return false
	}
	const writers, each = 8, 20
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				lsn, err := l.Append([]Update{upd(uint64(w)*4096, uint64(i), 0, "hooked")})
				if err == nil {
					err = l.Wait(ctx, lsn)
				}
				if err != nil {
					t.Error(err)
					return
				}
				if !reported(lsn) {
					t.Errorf("Wait for LSN %d returned before AfterWrite reported it", lsn)
				}
			}
		})
	}
	wg.Wait()
	l.Release(l.Durable())
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s := l.Stats()
	mu.Lock()
	defer mu.Unlock()
	if unpaired != 0 || inWrite {
		t.Errorf("%d unpaired hook calls (in write at the end: %v)", unpaired, inWrite)
	}
	var records, batches, markers, bytes int
	next := LSN(1)
	for _, w := range written {
		bytes += w.Bytes
		if w.Records == 0 {
			markers++
			if w.Last != w.First-1 {
				t.Errorf("marker %+v: Last should be First-1", w)
			}
			continue
		}
		batches++
		records += w.Records
		if w.First != next || w.Last != w.First+LSN(w.Records)-1 {
			t.Errorf("batch %+v: want LSNs from %d, %d of them", w, next, w.Records)
		}
		next = w.Last + 1
	}
	// Stats also count the open marker, which Open writes without hooks.
	if uint64(records) != s.Records || uint64(batches) != s.Batches || uint64(markers) != s.Markers-1 ||
		uint64(bytes) != s.Bytes-sectorBytes {
		t.Errorf("hooks saw %d records, %d batches, %d markers, %d bytes; stats %+v", records, batches, markers, bytes, s)
	}
	if records != writers*each {
		t.Errorf("%d records reported, want %d", records, writers*each)
	}
}

// TestBeforeWriteFails: an error from BeforeWrite fails the log before
// anything of the batch reaches the device.
func TestBeforeWriteFails(t *testing.T) {
	dev := &countingDevice{Device: NewMemDevice(1 << 20)}
	boom := errors.New("data write failed")
	l, err := Open(context.Background(), dev, Options{Size: 1 << 20, FlushInterval: time.Millisecond,
		BeforeWrite: func() error { return boom }})
	if err != nil {
		t.Fatal(err)
	}
	opened := dev.n.Load() // Open writes what it found released
	lsn, err := l.Append([]Update{{Addr: 4096, Version: 1, Data: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Wait(context.Background(), lsn); !errors.Is(err, boom) {
		t.Fatalf("Wait after a failed BeforeWrite: %v", err)
	}
	if n := dev.n.Load() - opened; n != 0 {
		t.Fatalf("%d device writes after a failed BeforeWrite", n)
	}
}

type countingDevice struct {
	Device
	n atomic.Int64
}

func (d *countingDevice) WriteAt(ctx context.Context, p []byte, off uint64) error {
	d.n.Add(1)
	return d.Device.WriteAt(ctx, p, off)
}
