package layout

import (
	"errors"
	"testing"
)

func TestQuotaBlocksRoundTrip(t *testing.T) {
	b := make([]byte, BlockBytes)
	h := &QuotaHead{LimitBytes: 64 << 20, LimitInodes: 1000, Flags: QuotaCounting}
	h.AddSlot(3)
	h.AddSlot(255)
	EncodeQuotaHead(b, 77, 5, h)
	got, err := DecodeQuotaHead(b, 77)
	if err != nil || *got != *h || Version(b) != 5 {
		t.Fatalf("head: %+v %v", got, err)
	}
	if s := got.SlotList(); len(s) != 2 || s[0] != 3 || s[1] != 255 {
		t.Fatalf("slots %v", s)
	}
	if _, err := DecodeQuotaHead(b, 78); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("head of another realm: %v", err)
	}
	l := &QuotaLedger{UsedBytes: -5, UsedInodes: 7, AllowBytes: 1 << 40, AllowInodes: 9}
	EncodeQuotaLedger(b, 77, 4, 9, l)
	gl, err := DecodeQuotaLedger(b, 77, 4)
	if err != nil || *gl != *l {
		t.Fatalf("ledger: %+v %v", gl, err)
	}
	if _, err := DecodeQuotaLedger(b, 77, 5); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ledger of another slot: %v", err)
	}
	if gl, err := DecodeQuotaLedger(make([]byte, BlockBytes), 77, 4); err != nil || *gl != (QuotaLedger{}) {
		t.Fatalf("a never-written ledger: %+v %v", gl, err)
	}
	// An inode's realm survives its block.
	in := &Inode{Mode: 0o100644, Nlink: 1, Realms: [RealmsMax]uint64{77, 5, 1}}
	if err := EncodeInode(b, 9, 1, in); err != nil {
		t.Fatal(err)
	}
	if got, _, err := DecodeInode(b, 9); err != nil || got.Realms != in.Realms {
		t.Fatalf("inode realms: %+v %v", got, err)
	}
	c := append([]byte(nil), b...)
	c[realmOff+3] = 0xff // a realm no inode number can be
	if _, _, err := DecodeInode(c, 9); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("inode with realm out of range: %v", err)
	}
	c = append([]byte(nil), b...)
	c[realmOff+8] = 0 // a hole in the chain
	c[realmOff+16] = 0
	c[realmOff+24] = 3
	if _, _, err := DecodeInode(c, 9); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("inode with a hole in its realms: %v", err)
	}
}

// TestFormat2Upgrades: a format-2 volume (no quotas, zero realms) is
// refused as old and upgraded to format 3 by rewriting its number.
func TestFormat2Upgrades(t *testing.T) {
	b := EncodeSuper(Super{Created: 7, HandleKey: [32]byte{1: 1}})
	b[HeaderBytes] = 2
	if _, err := DecodeSuper(b); !errors.Is(err, ErrOldFormat) {
		t.Fatalf("format 2: %v", err)
	}
	up, err := UpgradeSuper(b, [32]byte{})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := DecodeSuper(up); err != nil || s.Created != 7 || up[HeaderBytes] != FormatVersion || FormatVersion != 3 {
		t.Fatalf("upgraded: %+v %v (format %d)", s, err, up[HeaderBytes])
	}
}
