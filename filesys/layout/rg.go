package layout

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// Resource group header payload (group g at RGAddr(g)), little-endian:
//
//	 0          4        8
//	| used u32 | unused | inode bitmap, InodesPerRG bits (2 KiB) |
//
// Bit i (byte i/8, bit i%8) is set when inode g*InodesPerRG+i is allocated;
// used counts the set bits. Inode 0 is always marked used. A never-written
// group is all free. One lock per group: the node holding it allocates
// and frees the group's inodes (GFS resource groups). Logged like every
// metadata block. Part of format version 1.
const (
	rgBitmapOff   = 8
	rgBitmapBytes = InodesPerRG / 8
)

// RG is a decoded resource group header.
type RG struct {
	Used   uint32
	Bitmap [rgBitmapBytes]byte
}

// DecodeRG reads a resource group header's payload. A never-written
// block is an empty group.
func DecodeRG(b []byte, g int) (*RG, error) {
	h, err := DecodeHeader(b)
	switch {
	case err != nil:
		return nil, err
	case h.Kind == KindNone:
		r := &RG{}
		if g == 0 {
			r.Set(0)
		}
		return r, nil
	case h.Kind != KindRG || h.Index != uint64(g):
		return nil, fmt.Errorf("%w: a %v block (index %d) where group %d belongs", ErrCorrupt, h.Kind, h.Index, g)
	}
	p := b[HeaderBytes:]
	r := &RG{Used: binary.LittleEndian.Uint32(p[0:])}
	copy(r.Bitmap[:], p[rgBitmapOff:])
	n := 0
	for _, c := range r.Bitmap {
		n += bits.OnesCount8(c)
	}
	if uint32(n) != r.Used || (g == 0 && !r.IsSet(0)) {
		return nil, fmt.Errorf("%w: group %d counts %d inodes, bitmap has %d", ErrCorrupt, g, r.Used, n)
	}
	return r, nil
}

// Encode writes r into block b (whose header the caller keeps).
func (r *RG) Encode(b []byte, g int, version uint64) {
	PutHeader(b, Header{Kind: KindRG, Version: version, Index: uint64(g)})
	p := b[HeaderBytes:]
	clear(p)
	binary.LittleEndian.PutUint32(p[0:], r.Used)
	copy(p[rgBitmapOff:], r.Bitmap[:])
}

// IsSet reports whether inode slot i of the group is allocated.
func (r *RG) IsSet(i int) bool { return r.Bitmap[i/8]&(1<<(i%8)) != 0 }

// Set marks slot i allocated.
func (r *RG) Set(i int) {
	if !r.IsSet(i) {
		r.Bitmap[i/8] |= 1 << (i % 8)
		r.Used++
	}
}

// Clear marks slot i free.
func (r *RG) Clear(i int) {
	if r.IsSet(i) {
		r.Bitmap[i/8] &^= 1 << (i % 8)
		r.Used--
	}
}

// FindFree returns a free slot at or after from (wrapping), or -1.
func (r *RG) FindFree(from int) int {
	for k := 0; k < InodesPerRG; k++ {
		i := (from + k) % InodesPerRG
		if i%8 == 0 && r.Bitmap[i/8] == 0xff {
			k += 7 // a full byte
			continue
		}
		if !r.IsSet(i) {
			return i
		}
	}
	return -1
}
