package layout

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func sampleInode() *Inode {
	return &Inode{Mode: 0o100644, Nlink: 2, Uid: 1000, Gid: 100, Flags: FlagInline, Size: 5, HWM: 0, Gen: 3, Parent: 1,
		Atime: Time{1, 2}, Mtime: Time{3, 4}, Ctime: Time{5, 6}, Inline: []byte("hello"),
		Xattrs: []Xattr{{Name: "user.a", Value: []byte("1")}, {Name: "user.empty", Value: []byte{}}}}
}

func TestInodeRoundTrip(t *testing.T) {
	b := make([]byte, BlockBytes)
	in := sampleInode()
	if err := EncodeInode(b, 7, 9, in); err != nil {
		t.Fatal(err)
	}
	got, v, err := DecodeInode(b, 7)
	if err != nil || v != 9 || !reflect.DeepEqual(got, in) {
		t.Fatalf("got %+v v%d %v, want %+v", got, v, err, in)
	}
	if _, _, err := DecodeInode(b, 8); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("inode 7's block read as inode 8: %v", err)
	}
	free, v, err := DecodeInode(make([]byte, BlockBytes), 8)
	if err != nil || v != 0 || !free.Free() {
		t.Fatalf("zero block: %+v %d %v", free, v, err)
	}
	in.Inline = make([]byte, InlineBytes)
	if err := EncodeInode(b, 7, 1, in); err == nil {
		t.Fatal("oversized inode encoded")
	}
}

func TestRGBitmap(t *testing.T) {
	r, err := DecodeRG(make([]byte, BlockBytes), 0)
	if err != nil || !r.IsSet(0) || r.Used != 1 {
		t.Fatalf("group 0 must reserve inode 0: %+v %v", r.Used, err)
	}
	if i := r.FindFree(0); i != 1 {
		t.Fatalf("FindFree = %d", i)
	}
	for i := 1; i < InodesPerRG; i++ {
		r.Set(i)
	}
	if i := r.FindFree(5); i != -1 {
		t.Fatalf("full group found %d", i)
	}
	r.Clear(3)
	if i := r.FindFree(100); i != 3 {
		t.Fatalf("FindFree wrapped to %d", i)
	}
	b := make([]byte, BlockBytes)
	r.Encode(b, 0, 4)
	r2, err := DecodeRG(b, 0)
	if err != nil || r2.Used != r.Used || r2.Bitmap != r.Bitmap {
		t.Fatalf("round trip: %v", err)
	}
	b[HeaderBytes+rgBitmapOff] ^= 0x10
	if _, err := DecodeRG(b, 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("count mismatch not caught: %v", err)
	}
}

func TestSuperAndSlot(t *testing.T) {
	if _, err := DecodeSuper(make([]byte, BlockBytes)); !errors.Is(err, ErrNoFS) {
		t.Fatalf("empty volume: %v", err)
	}
	s := Super{UUID: [16]byte{1, 2, 3}, Created: 42}
	got, err := DecodeSuper(EncodeSuper(s))
	if err != nil || got != s {
		t.Fatalf("super: %+v %v", got, err)
	}
	sl := Slot{Used: true, Session: 9, UUID: s.UUID, Name: "node-a"}
	gs, v, err := DecodeSlot(EncodeSlot(3, sl, 5))
	if err != nil || gs != sl || v != 5 {
		t.Fatalf("slot: %+v %d %v", gs, v, err)
	}
}

func FuzzDecodeBlocks(f *testing.F) {
	b := make([]byte, BlockBytes)
	_ = EncodeInode(b, 7, 1, sampleInode())
	f.Add(b, uint64(7))
	f.Add(EncodeSuper(Super{Created: 1}), uint64(0))
	f.Add(EncodeSlot(1, Slot{Used: true, Name: "x"}, 1), uint64(1))
	r := &RG{}
	r.Set(0)
	rb := make([]byte, BlockBytes)
	r.Encode(rb, 0, 1)
	f.Add(rb, uint64(0))
	ob := make([]byte, BlockBytes)
	_, off := OrphanPos(3, 5)
	PutOrphan(ob, 3, 0, off, 42, 7)
	f.Add(ob, uint64(3))
	f.Fuzz(func(t *testing.T, data []byte, ino uint64) {
		blk := make([]byte, BlockBytes)
		copy(blk, data)
		if in, v, err := DecodeInode(blk, ino); err == nil && !in.Free() {
			out := make([]byte, BlockBytes)
			if err := EncodeInode(out, ino, v, in); err != nil {
				t.Fatalf("decoded inode does not encode: %v", err)
			}
			in2, _, err := DecodeInode(out, ino)
			if err != nil || !reflect.DeepEqual(in, in2) {
				t.Fatalf("inode round trip: %v", err)
			}
		}
		_, _ = DecodeSuper(blk)
		_, _, _ = DecodeSlot(blk)
		if es, err := DecodeOrphans(blk, int(ino%SlotsMax), int(ino%OrphanBlocks)); err == nil {
			for _, e := range es {
				if !ValidIno(e.Ino) || e.N >= OrphansMax {
					t.Fatalf("orphan entry %+v decoded", e)
				}
			}
		}
		if g, err := DecodeRG(blk, int(ino%RGsMax)); err == nil {
			out := make([]byte, BlockBytes)
			g.Encode(out, int(ino%RGsMax), 1)
			g2, err := DecodeRG(out, int(ino%RGsMax))
			if err != nil || g2.Used != g.Used || !bytes.Equal(g2.Bitmap[:], g.Bitmap[:]) {
				t.Fatalf("group round trip: %v", err)
			}
		}
	})
}

func TestOrphanTable(t *testing.T) {
	buf := make([]byte, OrphanBlocks*BlockBytes)
	if es, err := DecodeOrphanTable(buf, 9); err != nil || len(es) != 0 {
		t.Fatalf("never-written table: %v %v", es, err)
	}
	want := []Orphan{{N: 0, Ino: 5, Gen: 1}, {N: OrphansPerBlock + 1, Ino: 77, Gen: 3}, {N: OrphansMax - 1, Ino: InodesMax - 1, Gen: 9}}
	for _, o := range want {
		addr, off := OrphanPos(9, o.N)
		k := int(addr-OrphanAddr(9, 0)) / BlockBytes
		PutOrphan(buf[k*BlockBytes:(k+1)*BlockBytes], 9, k, off, o.Ino, o.Gen)
	}
	got, err := DecodeOrphanTable(buf, 9)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("table: got %+v %v, want %+v", got, err, want)
	}
	addr, off := OrphanPos(9, OrphansPerBlock+1)
	k := int(addr-OrphanAddr(9, 0)) / BlockBytes
	PutOrphan(buf[k*BlockBytes:(k+1)*BlockBytes], 9, k, off, 0, 0)
	if got, _ := DecodeOrphanTable(buf, 9); len(got) != 2 {
		t.Fatalf("cleared entry still listed: %+v", got)
	}
	if _, err := DecodeOrphanTable(buf, 10); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("slot 9's table read as slot 10's: %v", err)
	}
	if OrphanAddr(SlotsMax-1, OrphanBlocks-1) >= LogBase || OrphanAddr(0, 0) < SlotBase+SlotsMax*BlockBytes {
		t.Fatal("orphan tables overlap the slot headers or the logs")
	}
	s := Slot{Used: true, Recovered: true, Session: 4, Name: "n"}
	got2, _, err := DecodeSlot(EncodeSlot(1, s, 2))
	if err != nil || got2 != s {
		t.Fatalf("recovered slot: %+v %v", got2, err)
	}
}
