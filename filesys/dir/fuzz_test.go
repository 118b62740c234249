package dir

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

const fuzzInlineMax = 3500

func FuzzDecodeRoot(f *testing.F) {
	f.Add(New(fuzzInlineMax).Encode())
	b := newMem()
	d := New(fuzzInlineMax)
	for i := 0; i < 40; i++ {
		if err := d.Insert(b, Entry{Name: nameOf(i), Ino: uint64(i), Type: 4}); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(d.Encode()) // inline
	for i := 40; i < 3000; i++ {
		if err := d.Insert(b, Entry{Name: nameOf(i), Ino: uint64(i)}); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(d.Encode()) // hashed
	f.Add([]byte{formatVersion, kindHashed})
	f.Add([]byte{formatVersion, kindInline, 1, 0})
	f.Fuzz(func(t *testing.T, enc []byte) {
		d, err := Decode(enc, fuzzInlineMax)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Decode error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if got := d.Encode(); !bytes.Equal(got, enc) {
			t.Fatalf("Encode(Decode(%x)) = %x", enc, got)
		}
		// The blocks are all zeros: whatever the root says, nothing panics.
		exercise(t, d, newMem(), 10)
	})
}

// FuzzDecodeBlock decodes a bucket block and its overflow block from the
// fuzzer's bytes, then runs every operation of a directory over them.
func FuzzDecodeBlock(f *testing.F) {
	_, b := hashedDir(f, 600)
	f.Add(append(slices.Clone(b.m[0]), b.m[OverflowBase]...))
	f.Add(slices.Clone(b.m[1]))
	f.Add(make([]byte, BlockBytes))
	f.Add([]byte{formatVersion, kindBucket, 1, 0, 19, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		p := make([]byte, BlockBytes)
		copy(p, data)
		hd, err := parseBlock(p)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("parseBlock error %v does not wrap ErrCorrupt", err)
			}
		} else if checkTail(p, hd) == nil {
			var recs []rec
			for off := blockHeaderBytes; off < blockHeaderBytes+hd.used; off += recSizeAt(p, off) {
				recs = append(recs, recAt(p, off))
			}
			if got := encodeBlock(make([]byte, BlockBytes), hd, recs); !bytes.Equal(got, p) {
				t.Fatalf("re-encoded block differs")
			}
		}
		b := newMem()
		b.m[0] = p
		d := New(fuzzInlineMax)
		d.hashed = true
		if len(data) > BlockBytes {
			q := make([]byte, BlockBytes)
			copy(q, data[BlockBytes:])
			b.m[OverflowBase] = q
			d.overflows = 1
		}
		d.count, d.bytes = uint64(hd.count), uint64(hd.used)
		exercise(t, d, b, 10)
	})
}
