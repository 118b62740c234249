package layout

import (
	"encoding/binary"
	"fmt"
)

// Superblock payload (block 0), after the header, little-endian:
//
//	 0          4             8            12        16          24           40
//	| format u32 | blockBytes u32 | slots u32 | rgs u32 | created u64 | uuid 16 B |
//
// The geometry is fixed by the format version; the superblock repeats the
// parts a reader checks, so a volume of another geometry is refused.
// Part of format version 1.
type Super struct {
	UUID    [16]byte
	Created int64 // unix nanoseconds
}

const superFieldsBytes = 40

// EncodeSuper returns the superblock block.
func EncodeSuper(s Super) []byte {
	b := make([]byte, BlockBytes)
	PutHeader(b, Header{Kind: KindSuper, Version: 1})
	p := b[HeaderBytes:]
	binary.LittleEndian.PutUint32(p[0:], FormatVersion)
	binary.LittleEndian.PutUint32(p[4:], BlockBytes)
	binary.LittleEndian.PutUint32(p[8:], SlotsMax)
	binary.LittleEndian.PutUint32(p[12:], RGsMax)
	binary.LittleEndian.PutUint64(p[16:], uint64(s.Created))
	copy(p[24:40], s.UUID[:])
	return b
}

// ErrNoFS reports a volume without a Plumeria file system.
var ErrNoFS = fmt.Errorf("layout: no file system on this volume (run plumeria format)")

// DecodeSuper reads block 0. ErrNoFS if it was never written.
func DecodeSuper(b []byte) (Super, error) {
	h, err := DecodeHeader(b)
	switch {
	case err != nil:
		return Super{}, err
	case h.Kind == KindNone:
		return Super{}, ErrNoFS
	case h.Kind != KindSuper:
		return Super{}, fmt.Errorf("%w: block 0 is a %v block, not a superblock", ErrCorrupt, h.Kind)
	}
	p := b[HeaderBytes:]
	if f := binary.LittleEndian.Uint32(p[0:]); f != FormatVersion ||
		binary.LittleEndian.Uint32(p[4:]) != BlockBytes ||
		binary.LittleEndian.Uint32(p[8:]) != SlotsMax ||
		binary.LittleEndian.Uint32(p[12:]) != RGsMax {
		return Super{}, fmt.Errorf("%w: superblock geometry (format %d) differs from this build's (format %d)", ErrCorrupt, f, FormatVersion)
	}
	var s Super
	s.Created = int64(binary.LittleEndian.Uint64(p[16:]))
	copy(s.UUID[:], p[24:40])
	return s, nil
}
