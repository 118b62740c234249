package redo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

const testSize = 64 << 10

func testOptions(base uint64) Options {
	return Options{Base: base, Size: testSize, FlushInterval: time.Millisecond}
}

// slowDevice adds a fixed latency to every write, like a replicated volume.
type slowDevice struct {
	Device
	delay time.Duration
}

func (d slowDevice) WriteAt(ctx context.Context, p []byte, off uint64) error {
	time.Sleep(d.delay)
	return d.Device.WriteAt(ctx, p, off)
}

var errCrashed = errors.New("test: device crashed")

// crashDevice persists writes whole until its budget runs out; the write
// that finds it empty persists some of its sectors (a prefix, cut at a
// 512-byte boundary, or in some runs an arbitrary subset) and fails, and so
// does every write after it, persisting nothing. The log sees an error, so
// no Wait acknowledges what did not persist: that models the node dying.
type crashDevice struct {
	mem *MemDevice

	mu         sync.Mutex
	writesLeft int
	subset     bool
	rng        *rand.Rand
	crashed    bool
	writes     int
}

func (d *crashDevice) ReadAt(ctx context.Context, p []byte, off uint64) error {
	return d.mem.ReadAt(ctx, p, off)
}

func (d *crashDevice) WriteAt(ctx context.Context, p []byte, off uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writes++
	if d.crashed {
		return errCrashed
	}
	if d.writesLeft > 0 {
		d.writesLeft--
		return d.mem.WriteAt(ctx, p, off)
	}
	d.crashed = true
	n := len(p) / sectorBytes
	if len(p)%sectorBytes != 0 || off%sectorBytes != 0 {
		panic(fmt.Sprintf("unaligned write [%d,+%d)", off, len(p)))
	}
	if d.subset {
		for s := 0; s < n; s++ {
			if d.rng.IntN(2) == 0 {
				_ = d.mem.WriteAt(ctx, p[s*sectorBytes:(s+1)*sectorBytes], off+uint64(s*sectorBytes))
			}
		}
	} else {
		k := d.rng.IntN(n + 1)
		_ = d.mem.WriteAt(ctx, p[:k*sectorBytes], off)
	}
	return errCrashed
}

// reset arms the device for a new life: writesLeft whole writes, then a crash.
func (d *crashDevice) reset(writesLeft int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.crashed, d.writesLeft = false, writesLeft
}

// fenceDevice fails every write from the nth on with errFenced and counts
// writes that reach it afterwards.
type fenceDevice struct {
	*MemDevice
	mu    sync.Mutex
	n     int
	after int
}

var errFenced = errors.New("volume: write fenced by newer epoch")

func (d *fenceDevice) WriteAt(ctx context.Context, p []byte, off uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n <= 0 {
		d.after++
		return errFenced
	}
	d.n--
	return d.MemDevice.WriteAt(ctx, p, off)
}

// randomUpdates makes a record of random shape: mostly small, sometimes up
// to several KiB, rarely too big for a 64 KiB log.
func randomUpdates(rng *rand.Rand) []Update {
	var n, dataMax int
	switch r := rng.IntN(100); {
	case r < 70:
		n, dataMax = 1, 200
	case r < 95:
		n, dataMax = 1+rng.IntN(4), 1024
	default:
		n, dataMax = 1+rng.IntN(10), metaBlockBytes
	}
	ups := make([]Update, n)
	for i := range ups {
		dlen := rng.IntN(dataMax + 1)
		off := rng.IntN(metaBlockBytes - dlen + 1)
		data := make([]byte, dlen)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		ups[i] = Update{Addr: uint64(rng.IntN(64)) * metaBlockBytes, Version: rng.Uint64(), Off: uint16(off), Data: data}
	}
	return ups
}

func equalUpdates(a, b []Update) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Addr != b[i].Addr || a[i].Version != b[i].Version || a[i].Off != b[i].Off || !bytes.Equal(a[i].Data, b[i].Data) {
			return false
		}
	}
	return true
}

func mustRecover(t testing.TB, dev Device, opts Options) []Record {
	t.Helper()
	recs, err := Recover(context.Background(), dev, opts)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	return recs
}

func mustOpen(t testing.TB, dev Device, opts Options) *Log {
	t.Helper()
	l, err := Open(context.Background(), dev, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

func mustAppend(t testing.TB, l *Log, ups []Update) LSN {
	t.Helper()
	lsn, err := l.Append(ups)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return lsn
}

func upd(addr uint64, version uint64, off uint16, data string) Update {
	return Update{Addr: addr, Version: version, Off: off, Data: []byte(data)}
}
