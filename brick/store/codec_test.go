package store

import (
	"bytes"
	"errors"
	"testing"

	"github.com/plumeria-fs/plumeria/internal/limits"
)

// seedRecords returns one encoded record of every kind.
func seedRecords() [][]byte {
	k := Key{Vol: 3, Block: 1 << 40, Gen: 7}
	put := appendRecord(nil, header{kind: kindPut, vol: k.Vol, block: k.Block, gen: k.Gen, seq: 9}, blockData(k, 9))
	tomb := appendRecord(nil, header{kind: kindTombstone, vol: 1, block: 2, gen: 3, seq: 4}, nil)
	ref := appendRecord(nil, header{kind: kindRef, vol: k.Vol, block: k.Block, gen: k.Gen + 1, seq: 10}, refPayload(k, 10))
	return [][]byte{
		ref,
		appendRecord(nil, header{kind: kindMove, vol: 12, block: 8192}, ref),
		put,
		tomb,
		appendRecord(nil, header{kind: kindRemove, vol: 1, block: 2, gen: 3, seq: 5}, nil),
		appendRecord(nil, header{kind: kindCommit, vol: 2, block: uint64(len(put) + len(tomb))}, nil),
		appendRecord(nil, header{kind: kindMove, vol: 12, block: 4096}, put),
		appendRecord(nil, header{kind: kindMove, vol: 12, block: 0}, tomb),
	}
}

func TestRecordRoundTrip(t *testing.T) {
	for _, rec := range seedRecords() {
		h, n, err := decodeRecord(rec)
		if err != nil || n != len(rec) {
			t.Fatalf("decode kind %d: n %d of %d, %v", rec[5], n, len(rec), err)
		}
		if again := appendRecord(nil, h, rec[headerBytes:]); !bytes.Equal(again, rec) {
			t.Fatalf("kind %d does not re-encode to the same bytes", h.kind)
		}
		bad := bytes.Clone(rec)
		bad[len(bad)-1] ^= 1
		if _, _, err := decodeRecord(bad); !errors.Is(err, errDataCRC) {
			t.Fatalf("kind %d with a flipped last byte: %v", h.kind, err)
		}
	}
}

// FuzzRecord: decodeRecord never panics on any bytes, and whatever it
// accepts re-encodes to exactly the same bytes.
func FuzzRecord(f *testing.F) {
	for _, rec := range seedRecords() {
		f.Add(rec)
		if len(rec) < putRecordBytes {
			f.Add(rec[:len(rec)/2])
		}
	}
	f.Add([]byte("PLSR"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := decodeRecord(b)
		if err != nil {
			if errors.Is(err, errDataCRC) && (n < headerBytes || n > len(b)) {
				t.Fatalf("data crc error with bad length %d of %d", n, len(b))
			}
			return
		}
		if n != headerBytes+int(h.dlen) || n > len(b) {
			t.Fatalf("n %d for dlen %d of %d bytes", n, h.dlen, len(b))
		}
		if again := appendRecord(nil, h, b[headerBytes:n]); !bytes.Equal(again, b[:n]) {
			t.Fatalf("accepted record does not re-encode: %x", b[:n])
		}
		if h.kind == kindMove {
			decodeMove(h, b[:n]) // must not panic either way
		}
	})
}

// FuzzScanSegment: scanning arbitrary bytes never panics, reports only
// records inside the input, and ends within it.
func FuzzScanSegment(f *testing.F) {
	// Small seeds (no put data) keep the fuzzer fast; one seed has it all.
	var small, all []byte
	for _, rec := range seedRecords() {
		all = append(all, rec...)
		if len(rec) < putRecordBytes {
			small = append(small, rec...)
		}
	}
	f.Add(small)
	f.Add(small[:len(small)-3])
	f.Add(append(bytes.Repeat([]byte{0}, 100), small...))
	f.Add(all)
	f.Fuzz(func(t *testing.T, b []byte) {
		const base = 1000
		res, err := scanSegment(b, base, func(recs []scanned) error {
			for _, r := range recs {
				if r.off < base || r.off+int64(len(r.rec)) > base+int64(len(b)) || len(r.rec) != headerBytes+int(r.h.dlen) {
					t.Fatalf("record at %d len %d outside input of %d", r.off, len(r.rec), len(b))
				}
				if r.h.kind == kindMove {
					decodeMove(r.h, r.rec)
				}
			}
			return nil
		})
		if err != nil || res.end < base || res.end > base+int64(len(b)) {
			t.Fatalf("scan: end %d err %v", res.end, err)
		}
	})
}

// FuzzIndexValue: index decoders never panic, and what they accept
// re-encodes to the same bytes.
func FuzzIndexValue(f *testing.F) {
	f.Add(appendEntry(nil, entry{seg: 3, off: 99, len: putRecordBytes, seq: 1 << 60}))
	f.Add(appendEntry(nil, entry{seg: 1, off: 0, len: headerBytes, seq: 2, tomb: true}))
	f.Add(appendEntry(nil, entry{seg: 4, off: 52, len: refRecordBytes, seq: 5, ref: true}))
	f.Add(appendWatermark(nil, watermark{seg: 7, off: limits.SegmentBytesMax}))
	f.Add(entryKey(Key{Vol: 1, Block: 2, Gen: 3}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if e, err := decodeEntry(b); err == nil && !bytes.Equal(appendEntry(nil, e), b) {
			t.Fatalf("entry %x does not re-encode", b)
		}
		if w, err := decodeWatermark(b); err == nil && !bytes.Equal(appendWatermark(nil, w), b) {
			t.Fatalf("watermark %x does not re-encode", b)
		}
		if k, err := decodeEntryKey(b); err == nil && !bytes.Equal(entryKey(k), b) {
			t.Fatalf("key %x does not re-encode", b)
		}
	})
}

func TestIndexKeyOrder(t *testing.T) {
	keys := []Key{{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 1 << 8, 0}, {1, 0, 0}, {1 << 56, 0, 0}}
	for i := 1; i < len(keys); i++ {
		if bytes.Compare(entryKey(keys[i-1]), entryKey(keys[i])) >= 0 {
			t.Fatalf("%v does not sort before %v", keys[i-1], keys[i])
		}
	}
}
