package layout

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

func TestNameLog(t *testing.T) {
	var payloads [][]byte
	var want []NameRecord
	nlog := uint64(0)
	for i := 0; i < 200; i++ {
		r := NameRecord{Time: Time{Sec: int64(1700000000 + i), Nsec: uint32(i)}, Op: uint8(1 + i%2), Type: 8, DirGen: 3,
			Ino: uint64(100 + i), Gen: uint64(i), Name: fmt.Sprintf("file-%d-%s", i, bytes.Repeat([]byte("x"), i%50))}
		blk, off, end := NameLogPlace(nlog, r.Bytes())
		for uint64(len(payloads)) <= blk {
			payloads = append(payloads, make([]byte, PayloadBytes))
		}
		if err := PutNameRecord(payloads[blk][off:], &r); err != nil {
			t.Fatal(err)
		}
		nlog = end
		want = append(want, r)
	}
	var got []NameRecord
	for i, p := range payloads {
		limit := PayloadBytes
		if uint64(i) == nlog/PayloadBytes {
			limit = int(nlog % PayloadBytes)
		}
		rs, err := DecodeNameRecords(p, limit)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rs...)
	}
	if len(payloads) < 3 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%d blocks; got %d records, want %d", len(payloads), len(got), len(want))
	}
	bad := bytes.Clone(payloads[0])
	bad[12] = 7
	if _, err := DecodeNameRecords(bad, PayloadBytes); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("bad op: %v", err)
	}
	if err := PutNameRecord(make([]byte, 100), &NameRecord{Op: NameAdded, Name: ""}); err == nil {
		t.Fatal("empty name")
	}
}

func FuzzNameRecords(f *testing.F) {
	p := make([]byte, PayloadBytes)
	r := NameRecord{Op: NameAdded, Type: 4, Ino: 5, Name: "abc"}
	PutNameRecord(p, &r)
	f.Add(p[:200], 200)
	f.Fuzz(func(t *testing.T, p []byte, limit int) {
		if limit < 0 || limit > len(p) {
			return
		}
		rs, err := DecodeNameRecords(p, limit)
		if err != nil {
			return
		}
		q := make([]byte, limit)
		off := 0
		for _, r := range rs {
			if err := PutNameRecord(q[off:], &r); err != nil {
				t.Fatalf("decoded record does not encode: %v", err)
			}
			off += r.Bytes()
		}
		if !bytes.Equal(q, p[:limit]) {
			t.Fatalf("re-encoding differs")
		}
	})
}
