package ec

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/plumeria-fs/plumeria/internal/limits"
)

// Ref is what a home replica stores at a block's key instead of its data
// once the block's chunk is coded: the stripe that holds the block. The
// block's shard and offset follow from its address and the geometry.
type Ref struct {
	SG        uint16 // stripe group of the volume holding the stripe
	StripeSeq uint64 // the stripe's seq (gen of its shard keys), unique per PG
	Len       uint16 // blocks stored explicitly per shard (Geometry.ShardLen)
}

// Ref payload, format version 1. Integers are little-endian, like the
// store's records.
//
//	 0     1      3             11     13
//	+-----+------+-------------+------+
//	| ver |  sg  |  stripeSeq  | len  |
//	|  1  |  2   |      8      |  2   |
//	+-----+------+-------------+------+
//
//	ver  RefVersion
//	len  1..ShardLenMax: a referenced block is below its chunk's live end n,
//	     so its offset is below ShardLen(n) and len ≥ 1
//
// These constants are part of the format: never edit them; add a version.
const (
	RefVersion = 1
	RefBytes   = 13
	// ShardLenMax bounds Ref.Len: the blocks of a chunk of
	// limits.ChunkBytesMax, all in one shard under a mirror profile.
	ShardLenMax = 4096
)

// Compile-time relations: a shard of the largest chunk fits ShardLenMax,
// and ShardLenMax fits len's u16 field.
const (
	_ = uint64(ShardLenMax - limits.ChunkBytesMax/limits.BlockBytes)
	_ = uint64(1<<16 - 1 - ShardLenMax)
)

// ErrBadRef is returned by DecodeRef for bytes that are not a valid ref.
var ErrBadRef = errors.New("ec: bad ref")

// Validate returns an error wrapping ErrBadRef unless 1 ≤ Len ≤ ShardLenMax.
func (r Ref) Validate() error {
	if r.Len < 1 || r.Len > ShardLenMax {
		return fmt.Errorf("ref len %d, want 1..%d: %w", r.Len, ShardLenMax, ErrBadRef)
	}
	return nil
}

// EncodeRef returns the RefBytes-long payload of r. It panics if r is not
// valid: refs are made by the primary's own code, never from input.
func EncodeRef(r Ref) []byte {
	if err := r.Validate(); err != nil {
		panic("ec: encode " + err.Error())
	}
	b := make([]byte, RefBytes)
	b[0] = RefVersion
	binary.LittleEndian.PutUint16(b[1:3], r.SG)
	binary.LittleEndian.PutUint64(b[3:11], r.StripeSeq)
	binary.LittleEndian.PutUint16(b[11:13], r.Len)
	return b
}

// DecodeRef parses a ref payload. It returns an error wrapping ErrBadRef,
// never panics, for a payload of the wrong size or version or with a len
// out of bounds. Every payload it accepts re-encodes to the same bytes.
func DecodeRef(b []byte) (Ref, error) {
	if len(b) != RefBytes {
		return Ref{}, fmt.Errorf("ref of %d bytes, want %d: %w", len(b), RefBytes, ErrBadRef)
	}
	if b[0] != RefVersion {
		return Ref{}, fmt.Errorf("ref version %d, want %d: %w", b[0], RefVersion, ErrBadRef)
	}
	r := Ref{
		SG:        binary.LittleEndian.Uint16(b[1:3]),
		StripeSeq: binary.LittleEndian.Uint64(b[3:11]),
		Len:       binary.LittleEndian.Uint16(b[11:13]),
	}
	if err := r.Validate(); err != nil {
		return Ref{}, err
	}
	return r, nil
}
