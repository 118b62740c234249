package ec

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

// TestRefGolden pins format version 1: never edit the expected bytes.
func TestRefGolden(t *testing.T) {
	r := Ref{SG: 0x0102, StripeSeq: 0x030405060708090a, Len: 0x0040}
	const want = "01" + "0201" + "0a09080706050403" + "4000"
	if got := hex.EncodeToString(EncodeRef(r)); got != want {
		t.Fatalf("EncodeRef = %s, want %s", got, want)
	}
	b, _ := hex.DecodeString(want)
	if got, err := DecodeRef(b); err != nil || got != r {
		t.Fatalf("DecodeRef = %+v, %v; want %+v", got, err, r)
	}
}

func TestRefRoundTrip(t *testing.T) {
	for _, r := range []Ref{
		{Len: 1},
		{SG: 1, StripeSeq: 1<<63 | 7, Len: 64},
		{SG: 0xffff, StripeSeq: ^uint64(0), Len: ShardLenMax},
	} {
		b := EncodeRef(r)
		if len(b) != RefBytes {
			t.Fatalf("%+v: %d bytes", r, len(b))
		}
		if got, err := DecodeRef(b); err != nil || got != r {
			t.Fatalf("DecodeRef(EncodeRef(%+v)) = %+v, %v", r, got, err)
		}
	}
}

func TestDecodeRefErrors(t *testing.T) {
	good := EncodeRef(Ref{SG: 3, StripeSeq: 9, Len: 5})
	with := func(i int, v byte) []byte {
		b := bytes.Clone(good)
		b[i] = v
		return b
	}
	for name, b := range map[string][]byte{
		"nil":       nil,
		"short":     good[:RefBytes-1],
		"long":      append(bytes.Clone(good), 0),
		"version 0": with(0, 0),
		"version 2": with(0, 2),
		"len 0":     append(bytes.Clone(good[:11]), 0, 0),
		"len max+1": append(bytes.Clone(good[:11]), byte((ShardLenMax+1)&0xff), byte((ShardLenMax+1)>>8)),
		"len 65535": append(bytes.Clone(good[:11]), 0xff, 0xff),
	} {
		if r, err := DecodeRef(b); !errors.Is(err, ErrBadRef) {
			t.Errorf("%s: DecodeRef = %+v, %v; want ErrBadRef", name, r, err)
		}
	}
}

func TestEncodeRefPanicsOnInvalid(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("EncodeRef of len 0 did not panic")
		}
	}()
	EncodeRef(Ref{SG: 1, StripeSeq: 2})
}

// FuzzDecodeRef: DecodeRef never panics, and whatever it accepts
// re-encodes to the same bytes.
func FuzzDecodeRef(f *testing.F) {
	f.Add(EncodeRef(Ref{SG: 1, StripeSeq: 2, Len: 3}))
	f.Add(EncodeRef(Ref{SG: 0xffff, StripeSeq: ^uint64(0), Len: ShardLenMax}))
	f.Add([]byte{})
	f.Add([]byte{RefVersion})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRef(b)
		if err != nil {
			if !errors.Is(err, ErrBadRef) {
				t.Fatalf("DecodeRef(%x): error %v is not ErrBadRef", b, err)
			}
			return
		}
		if again := EncodeRef(r); !bytes.Equal(again, b) {
			t.Fatalf("DecodeRef(%x) = %+v re-encodes to %x", b, r, again)
		}
	})
}
