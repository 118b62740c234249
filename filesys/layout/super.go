package layout

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Superblock payload (block 0), after the header, little-endian:
//
//	 0          4             8            12        16          24           40
//	| format u32 | blockBytes u32 | slots u32 | rgs u32 | created u64 | uuid 16 B |
//
// The geometry is fixed by the format version; the superblock repeats the
// parts a reader checks, so a volume of another geometry is refused.
// Part of format version 1; version 2 changes only the number.
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

// ErrOldFormat reports a file system of an earlier format version that
// this build can upgrade (UpgradeSuper).
var ErrOldFormat = fmt.Errorf("layout: file system of an older format")

// UpgradeSuper returns block 0 of a file system of an older format
// version rewritten as this build's (the format number is the only
// difference: see FormatVersion), or an error if b is not such a block.
func UpgradeSuper(b []byte) ([]byte, error) {
	if _, err := DecodeSuper(b); !errors.Is(err, ErrOldFormat) {
		if err == nil {
			return nil, fmt.Errorf("layout: superblock already has format %d", FormatVersion)
		}
		return nil, err
	}
	out := slices.Clone(b)
	binary.LittleEndian.PutUint32(out[HeaderBytes:], FormatVersion)
	if _, err := DecodeSuper(out); err != nil {
		return nil, err
	}
	return out, nil
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
	if f := binary.LittleEndian.Uint32(p[0:]); f < FormatVersion && f >= 1 &&
		binary.LittleEndian.Uint32(p[4:]) == BlockBytes {
		return Super{}, fmt.Errorf("%w: the file system has format %d, this build uses %d (file versions): run plumeria fsck --upgrade (it checks the volume, then rewrites the superblock; nothing else changes)", ErrOldFormat, f, FormatVersion)
	}
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
