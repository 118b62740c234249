package layout

import (
	"bytes"
	"errors"
	"testing"
)

func TestHistoryRoundTrip(t *testing.T) {
	for _, v := range []*FileVersion{
		{Ino: 7, Gen: 3, FVer: 1, Mode: 0o100644, Uid: 1000, Gid: 100, Size: 5, Closed: Time{Sec: 1700000000, Nsec: 5},
			Mtime: Time{Sec: 1699999999}, Ctime: Time{Sec: 1700000000, Nsec: 4}, Node: "n1", Inline: true, Data: []byte("hello")},
		{Ino: 1 << 23, Gen: 1, FVer: 1<<32 - 2, Mode: 0o100600, Size: FileBytesMax, Node: string(bytes.Repeat([]byte("x"), HistoryNodeMax))},
		{Ino: 9, FVer: 2, Inline: true, Data: bytes.Repeat([]byte{0xab}, InlineBytes), Size: InlineBytes},
	} {
		b, err := EncodeHistory(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeHistory(b, v.Ino)
		if err != nil {
			t.Fatal(err)
		}
		if got.Data == nil && v.Data != nil || got.Node != v.Node || got.FVer != v.FVer || got.Size != v.Size ||
			got.Closed != v.Closed || got.Mtime != v.Mtime || got.Ctime != v.Ctime || got.Gen != v.Gen ||
			got.Mode != v.Mode || got.Uid != v.Uid || got.Gid != v.Gid || got.Inline != v.Inline || !bytes.Equal(got.Data, v.Data) {
			t.Fatalf("round trip: got %+v, want %+v", got, v)
		}
		if _, err := DecodeHistory(b, v.Ino+1); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("record of another inode: %v", err)
		}
		for _, i := range []int{0, 5, 30, 90, 200, BlockBytes - 1} {
			c := bytes.Clone(b)
			c[i] ^= 0x10
			if _, err := DecodeHistory(c, v.Ino); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("byte %d flipped: %v", i, err)
			}
		}
	}
	if _, err := DecodeHistory(make([]byte, BlockBytes), 1); !errors.Is(err, ErrNoHistory) {
		t.Fatalf("zeros: %v", err)
	}
	for _, v := range []*FileVersion{
		{Ino: 1, FVer: 1, Node: string(make([]byte, HistoryNodeMax+1))},
		{Ino: 1, FVer: 1, Data: []byte("x")},                        // data of a file not inline
		{Ino: 1, FVer: 1, Inline: true, Size: 2, Data: []byte("x")}, // size differs
	} {
		if _, err := EncodeHistory(v); err == nil {
			t.Fatalf("encoded %+v", v)
		}
	}
}

func TestSuperUpgrade(t *testing.T) {
	key := [32]byte{7: 1}
	b := EncodeSuper(Super{Created: 42, HandleKey: [32]byte{3: 9}})
	if _, err := UpgradeSuper(b, key); err == nil {
		t.Fatal("upgraded a current superblock")
	}
	// A format-2 superblock written before handle keys gets one.
	nokey := EncodeSuper(Super{Created: 42})
	up, err := UpgradeSuper(nokey, key)
	if s, derr := DecodeSuper(up); err != nil || derr != nil || s.HandleKey != key || s.Created != 42 {
		t.Fatalf("key added: %+v %v %v", s, err, derr)
	}
	old := bytes.Clone(b)
	old[HeaderBytes] = 1 // format 1
	if _, err := DecodeSuper(old); !errors.Is(err, ErrOldFormat) {
		t.Fatalf("format 1: %v", err)
	}
	up, err = UpgradeSuper(old, key)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := DecodeSuper(up); err != nil || s.Created != 42 || s.HandleKey != ([32]byte{3: 9}) {
		t.Fatalf("upgraded: %+v %v", s, err)
	}
	bad := bytes.Clone(b)
	bad[HeaderBytes] = 9
	if _, err := DecodeSuper(bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("format 9: %v", err)
	}
}

func FuzzHistory(f *testing.F) {
	for _, v := range []*FileVersion{{Ino: 3, FVer: 1, Node: "a"}, {Ino: 3, FVer: 2, Inline: true, Size: 3, Data: []byte("abc")}} {
		b, _ := EncodeHistory(v)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) != BlockBytes {
			b = append(b, make([]byte, max(0, BlockBytes-len(b)))...)[:BlockBytes]
		}
		v, err := DecodeHistory(b, 3)
		if err != nil {
			return
		}
		out, err := EncodeHistory(v)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", v, err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("re-encoding differs")
		}
	})
}
