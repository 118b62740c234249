package layout

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// Log slot header payload (slot i at SlotAddr(i)), little-endian:
//
//	 0         1              2        8             16          32            34
//	| used u8 | recovered u8 | unused | session u64 | uuid 16 B | nameLen u16 | name |
//
// A slot is used by the lock session of the fs node whose clerk id is
// name, in the file system with this uuid (a slot of an earlier format of
// the volume reads as free). A node mounting again gets a new session and
// a free slot; its old slot is replayed and freed by recovery. A used slot
// marked recovered had its log replayed but still lists orphans in its
// orphan table (orphan.go): a mounted node frees them, then the slot.
// Slots are claimed and freed under the slot table lock; a node's log lock
// covers its log region. Written in place, never logged.
// Part of format version 1.
type Slot struct {
	Used      bool
	Recovered bool // the log was replayed; only the orphan table is left
	Session   uint64
	UUID      [16]byte
	Name      string
}

const slotNameMax = PayloadBytes - 34

// EncodeSlot returns slot i's header block.
func EncodeSlot(i int, s Slot, version uint64) []byte {
	b := make([]byte, BlockBytes)
	PutHeader(b, Header{Kind: KindSlot, Version: version, Index: uint64(i)})
	p := b[HeaderBytes:]
	if s.Used {
		p[0] = 1
	}
	if s.Recovered {
		p[1] = 1
	}
	binary.LittleEndian.PutUint64(p[8:], s.Session)
	copy(p[16:32], s.UUID[:])
	binary.LittleEndian.PutUint16(p[32:], uint16(len(s.Name)))
	copy(p[34:], s.Name)
	return b
}

// DecodeSlot reads a slot header block; a never-written block is a free slot.
func DecodeSlot(b []byte) (Slot, uint64, error) {
	h, err := DecodeHeader(b)
	switch {
	case err != nil:
		return Slot{}, 0, err
	case h.Kind == KindNone:
		return Slot{}, 0, nil
	case h.Kind != KindSlot:
		return Slot{}, 0, fmt.Errorf("%w: a %v block where a slot header belongs", ErrCorrupt, h.Kind)
	}
	p := b[HeaderBytes:]
	n := int(binary.LittleEndian.Uint16(p[32:]))
	if n > slotNameMax || p[0] > 1 || p[1] > 1 || !utf8.Valid(p[34:34+n]) {
		return Slot{}, 0, fmt.Errorf("%w: slot header", ErrCorrupt)
	}
	s := Slot{Used: p[0] == 1, Recovered: p[1] == 1, Session: binary.LittleEndian.Uint64(p[8:]), Name: string(p[34 : 34+n])}
	copy(s.UUID[:], p[16:32])
	return s, h.Version, nil
}
