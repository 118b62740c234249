package layout

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Superblock payload (block 0), after the header, little-endian:
//
//	 0          4             8            12        16          24           40              72
//	| format u32 | blockBytes u32 | slots u32 | rgs u32 | created u64 | uuid 16 B | handleKey 32 B |
//
// The geometry is fixed by the format version; the superblock repeats the
// parts a reader checks, so a volume of another geometry is refused.
// Part of format version 1; versions 2 and 3 change only the number.
//
// handleKey (added within format 2: the bytes were zero, and a build
// that does not know them ignores them) is the secret under which NFS
// gateways MAC their file handles, random at format; all zero on a file
// system formatted before it existed, which fsck --upgrade fills in
// (UpgradeSuper). Only cluster members read block 0.
type Super struct {
	UUID      [16]byte
	Created   int64 // unix nanoseconds
	HandleKey [32]byte
}

const superFieldsBytes = 72

// HasHandleKey reports whether s has a handle key (formatted or upgraded
// by a build that writes one).
func (s Super) HasHandleKey() bool { return s.HandleKey != [32]byte{} }

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
	copy(p[40:72], s.HandleKey[:])
	return b
}

// ErrOldFormat reports a file system of an earlier format version that
// this build can upgrade (UpgradeSuper).
var ErrOldFormat = fmt.Errorf("layout: file system of an older format")

// UpgradeSuper returns block 0 of a file system of an older format
// version, or of this one without a handle key, rewritten as this
// build's (the format number and the handle key, drawn from key, are
// the only differences: see FormatVersion), or an error if b is not
// such a block.
func UpgradeSuper(b []byte, key [32]byte) ([]byte, error) {
	if s, err := DecodeSuper(b); !errors.Is(err, ErrOldFormat) {
		if err == nil && s.HasHandleKey() {
			return nil, fmt.Errorf("layout: superblock already has format %d", FormatVersion)
		}
		if err != nil {
			return nil, err
		}
	}
	out := slices.Clone(b)
	binary.LittleEndian.PutUint32(out[HeaderBytes:], FormatVersion)
	if [32]byte(out[HeaderBytes+40:HeaderBytes+72]) == ([32]byte{}) {
		copy(out[HeaderBytes+40:], key[:])
	}
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
		return Super{}, fmt.Errorf("%w: the file system has format %d, this build uses %d (file versions, directory quotas): run plumeria fsck --upgrade (it checks the volume, then rewrites the superblock; nothing else changes)", ErrOldFormat, f, FormatVersion)
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
	copy(s.HandleKey[:], p[40:72])
	return s, nil
}
