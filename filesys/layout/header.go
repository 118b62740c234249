package layout

import (
	"encoding/binary"
	"fmt"
)

// Every metadata block starts with this header, little-endian:
//
//	 0            4      5        6        8            16         24         32
//	| magic "PLMB" | kind | format | unused | version u64 | owner u64 | index u64 | realms 4 x u64 |
//
// version counts the changes made to the block: the redo log records the
// version each change produces, and replay applies a change only to a
// block whose version is older (Frangipani §4). owner and index say whose
// block it is (an inode number and a block number, or a group or slot
// number) for fsck. realms (format 3; zero before) are set in inode
// blocks only: the quota realms the inode is counted in (layout/inode.go,
// quota.go); zero in every other kind. A block of all zeros is a block
// never written: version 0, kind KindNone. The rest of the block is the
// kind's payload.
// Part of format version 1, realms of format 3: never edit; add a version
// instead.
const (
	HeaderBytes  = 64
	PayloadBytes = BlockBytes - HeaderBytes

	magic = 0x424d4c50 // "PLMB"

	versionOff = 8  // where the version lives: the redo log sets it on replay
	realmOff   = 32 // an inode's quota realms (format 3)
)

// Kind says what a metadata block holds.
type Kind uint8

const (
	KindNone    Kind = iota // never written
	KindSuper               // the superblock
	KindSlot                // a log slot header
	KindRG                  // a resource group header
	KindInode               // an inode
	KindDir                 // a block of a directory's hash table
	KindOrphan              // a block of a log slot's orphan table
	KindNameLog             // a block of a directory's name log (format 2)
	KindQuota               // a quota realm's head or ledger block (format 3)
	kindEnd
)

func (k Kind) String() string {
	switch k {
	case KindNone:
		return "none"
	case KindSuper:
		return "super"
	case KindSlot:
		return "slot"
	case KindRG:
		return "group"
	case KindInode:
		return "inode"
	case KindDir:
		return "dir"
	case KindOrphan:
		return "orphan"
	case KindNameLog:
		return "namelog"
	case KindQuota:
		return "quota"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Header is the decoded header of a metadata block.
type Header struct {
	Kind    Kind
	Version uint64
	Owner   uint64
	Index   uint64
}

// PutHeader writes h into the first HeaderBytes of b (len BlockBytes).
func PutHeader(b []byte, h Header) {
	clear(b[:HeaderBytes])
	binary.LittleEndian.PutUint32(b[0:], magic)
	b[4] = byte(h.Kind)
	b[5] = BlockFormat
	binary.LittleEndian.PutUint64(b[8:], h.Version)
	binary.LittleEndian.PutUint64(b[16:], h.Owner)
	binary.LittleEndian.PutUint64(b[24:], h.Index)
}

// DecodeHeader reads the header of block b. An all-zero header is a
// never-written block (KindNone, version 0).
func DecodeHeader(b []byte) (Header, error) {
	if len(b) != BlockBytes {
		return Header{}, fmt.Errorf("%w: block of %d bytes", ErrCorrupt, len(b))
	}
	m := binary.LittleEndian.Uint32(b[0:])
	if m == 0 {
		for _, c := range b[:HeaderBytes] {
			if c != 0 {
				return Header{}, fmt.Errorf("%w: header without magic", ErrCorrupt)
			}
		}
		return Header{}, nil
	}
	h := Header{
		Kind:    Kind(b[4]),
		Version: binary.LittleEndian.Uint64(b[8:]),
		Owner:   binary.LittleEndian.Uint64(b[16:]),
		Index:   binary.LittleEndian.Uint64(b[24:]),
	}
	switch {
	case m != magic:
		return Header{}, fmt.Errorf("%w: bad magic %#x", ErrCorrupt, m)
	case b[5] != BlockFormat:
		return Header{}, fmt.Errorf("%w: block format %d, this build reads %d", ErrCorrupt, b[5], BlockFormat)
	case h.Kind == KindNone || h.Kind >= kindEnd:
		return Header{}, fmt.Errorf("%w: unknown kind %d", ErrCorrupt, b[4])
	}
	return h, nil
}

// Version returns the version field of block b without checking it.
func Version(b []byte) uint64 { return binary.LittleEndian.Uint64(b[versionOff:]) }

// SetVersion sets the version field of block b, as replay does.
func SetVersion(b []byte, v uint64) { binary.LittleEndian.PutUint64(b[versionOff:], v) }

// VersionRange is the byte range of the version field, which a change's
// redo record leaves out (the record carries the version itself).
const (
	VersionStart = versionOff
	VersionEnd   = versionOff + 8
)
