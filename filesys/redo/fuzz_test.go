package redo

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"
)

// seedBatches returns encoded batches of assorted shapes for region offset off.
func seedBatches(off uint64) [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	var out [][]byte
	for i, n := range []int{0, 1, 2, 5, 20} {
		var payload []byte
		for range n {
			payload = appendRecord(payload, randomUpdates(rng))
		}
		h := header{pos: uint64(i)*testSize + off, firstLSN: LSN(10 * (i + 1)), count: uint32(n)}
		h.tailLSN, h.tailPos = h.firstLSN, h.pos
		if uint64(batchBytes(len(payload))) <= testSize/2 {
			out = append(out, encodeBatch(h, payload))
		}
	}
	return out
}

// FuzzDecodeBatch decodes a batch placed at any sector of a region, wrapping
// at its end; a batch that decodes must encode back to itself.
func FuzzDecodeBatch(f *testing.F) {
	for _, b := range seedBatches(0) {
		f.Add(b, uint16(0))
	}
	for _, b := range seedBatches(120 * sectorBytes) {
		f.Add(b, uint16(120)) // wraps
	}
	f.Fuzz(func(t *testing.T, data []byte, sector uint16) {
		region := make([]byte, testSize)
		off := uint64(sector%(testSize/sectorBytes)) * sectorBytes
		for i := range min(len(data), testSize) {
			region[(off+uint64(i))%testSize] = data[i]
		}
		h, err := decodeHeader(region[off:off+sectorBytes], testSize, off)
		if err != nil {
			return
		}
		recs, err := decodeBatch(region, h)
		if err != nil {
			return
		}
		var payload []byte
		for _, r := range recs {
			payload = appendRecord(payload, r.Updates)
		}
		enc := encodeBatch(h, payload)
		h2, err := decodeHeader(enc, testSize, off)
		if err != nil || h2 != h {
			t.Fatalf("re-encoded header %+v, %v; want %+v", h2, err, h)
		}
		copy(region[off:], enc[:min(len(enc), int(testSize-off))])
		copy(region, enc[min(len(enc), int(testSize-off)):])
		recs2, err := decodeBatch(region, h2)
		if err != nil || len(recs2) != len(recs) {
			t.Fatalf("re-encoded batch: %d records, %v; want %d", len(recs2), err, len(recs))
		}
		for i := range recs {
			if recs[i].LSN != recs2[i].LSN || !equalUpdates(recs[i].Updates, recs2[i].Updates) {
				t.Fatalf("record %d differs after re-encoding", i)
			}
		}
	})
}

// FuzzDecodeRecords: records that decode encode back to the same bytes.
func FuzzDecodeRecords(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := range 4 {
		var payload []byte
		for range n {
			payload = appendRecord(payload, randomUpdates(rng))
		}
		f.Add(payload, uint32(n))
	}
	f.Fuzz(func(t *testing.T, payload []byte, count uint32) {
		recs, err := decodeRecords(payload, count, 1)
		if err != nil {
			return
		}
		var enc []byte
		for _, r := range recs {
			for _, u := range r.Updates {
				if err := checkUpdate(u); err != nil {
					t.Fatalf("decoded a bad update: %v", err)
				}
			}
			enc = appendRecord(enc, r.Updates)
		}
		if !bytes.Equal(enc, payload) {
			t.Fatalf("re-encoding differs")
		}
	})
}

// seedRegions returns log regions left by real use: wrapped, torn, closed.
func seedRegions(tb testing.TB) [][]byte {
	ctx := context.Background()
	var out [][]byte
	for seed := range uint64(3) {
		rng := rand.New(rand.NewPCG(seed, 9))
		mem := NewMemDevice(testSize)
		dev := &crashDevice{mem: mem, rng: rand.New(rand.NewPCG(seed, 1)), writesLeft: 150 + 100*int(seed)}
		opts := testOptions(0)
		l, err := Open(ctx, dev, opts)
		if err != nil {
			tb.Fatal(err)
		}
		for i := 0; ; i++ {
			lsn, err := l.Append(randomUpdates(rng))
			if errors.Is(err, ErrTooBig) {
				continue
			}
			if err == nil {
				err = l.Wait(ctx, lsn)
			}
			if err != nil {
				break
			}
			if i%3 == 0 {
				l.Release(lsn - 1)
			}
		}
		_ = l.Close(ctx)
		out = append(out, mem.Bytes())
	}
	mem := NewMemDevice(testSize)
	l := mustOpen(tb, mem, testOptions(0))
	l.Release(mustAppend(tb, l, []Update{upd(0, 1, 0, "x")}))
	if err := l.Close(ctx); err != nil {
		tb.Fatal(err)
	}
	return append(out, mem.Bytes())
}

// FuzzRecover runs Recover over a region made of one of a few real log
// regions (or zeros) with patch written over it at sector at; then Open, a
// few records and a clean Close, after which Recover must find nothing.
// The input stays small: the Go fuzzer stalls minimizing 64 KiB inputs.
func FuzzRecover(f *testing.F) {
	bases := append(seedRegions(f), make([]byte, testSize))
	for i := range bases {
		f.Add(uint8(i), uint16(0), []byte{})
	}
	for i, b := range seedBatches(120 * sectorBytes) {
		f.Add(uint8(len(bases)-1), uint16(120), b[:min(len(b), 2*sectorBytes)])
		f.Add(uint8(i), uint16(7), b[:min(len(b), 700)])
	}
	f.Fuzz(func(t *testing.T, which uint8, at uint16, patch []byte) {
		if len(patch) > 2*sectorBytes {
			return // longer inputs add little and take the minimizer long
		}
		region := append([]byte(nil), bases[int(which)%len(bases)]...)
		off := int(at%(testSize/sectorBytes)) * sectorBytes
		for i := range min(len(patch), testSize) {
			region[(off+i)%testSize] = patch[i]
		}
		ctx := context.Background()
		mem := NewMemDevice(testSize)
		mem.SetBytes(region)
		opts := testOptions(0)
		recs, err := Recover(ctx, mem, opts)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Recover: %v", err)
		}
		for i := 1; i < len(recs); i++ {
			if recs[i].LSN != recs[i-1].LSN+1 {
				t.Fatalf("recovered LSN %d after %d", recs[i].LSN, recs[i-1].LSN)
			}
		}
		l, err := Open(ctx, mem, opts)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: %v", err)
			}
			return
		}
		var lsn LSN
		for i := range 3 {
			lsn = mustAppend(t, l, []Update{upd(4096, uint64(i), 0, "abc")})
		}
		if len(recs) > 0 && lsn <= recs[len(recs)-1].LSN {
			t.Fatalf("LSN %d after recovering up to %d", lsn, recs[len(recs)-1].LSN)
		}
		if err := l.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if got := mustRecover(t, mem, opts); len(got) != 3 || got[2].LSN != lsn {
			t.Fatalf("Recover after Sync: %d records", len(got))
		}
		l.Release(lsn)
		if err := l.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if got := mustRecover(t, mem, opts); len(got) != 0 {
			t.Fatalf("Recover after clean Close: %d records", len(got))
		}
	})
}

// TestFuzzSeedsDecode keeps the seeds meaningful: each decodes.
func TestFuzzSeedsDecode(t *testing.T) {
	for _, off := range []uint64{0, 120 * sectorBytes} {
		for i, b := range seedBatches(off) {
			region := make([]byte, testSize)
			for j := range b {
				region[(off+uint64(j))%testSize] = b[j]
			}
			h, err := decodeHeader(region[off:off+sectorBytes], testSize, off)
			if err != nil {
				t.Fatalf("seed %d at %d: %v", i, off, err)
			}
			if _, err := decodeBatch(region, h); err != nil {
				t.Fatalf("seed %d at %d: %v", i, off, err)
			}
		}
	}
	regions := seedRegions(t)
	nonEmpty := 0
	for _, r := range regions {
		mem := NewMemDevice(testSize)
		mem.SetBytes(r)
		if len(mustRecover(t, mem, testOptions(0))) > 0 {
			nonEmpty++
		}
	}
	if nonEmpty == 0 {
		t.Fatalf("no seed region holds records")
	}
}
