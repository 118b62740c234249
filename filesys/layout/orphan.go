package layout

import (
	"encoding/binary"
	"fmt"
)

// Orphan tables: log slot i owns OrphanBlocks metadata blocks at
// OrphanAddr(i, k), listing the inodes its node unlinked while they were
// still open or known to its kernel (an orphan: no name, not yet freed).
// The entry is added in the same logged transaction as the unlink that
// made the orphan and cleared in the one that frees it, so after a crash
// the replayed table names exactly the orphans the dead node left, and
// whoever recovers it frees them (filesys/orphans.go). Blocks are logged
// and versioned like all metadata, covered by the slot's orphan lock.
//
// Block payload: OrphansPerBlock entries of 16 bytes, little-endian:
//
//	 0          8
//	| ino u64 | gen u64 |
//
// ino 0 is an empty entry; gen is the inode's generation when it was
// orphaned (an inode freed and reused since is a different file). Header
// kind KindOrphan, owner 0, index i*OrphanBlocks+k. A never-written block
// is an empty one.
// Added to format version 1 in an address range it left unused (older
// builds never read it).
const (
	OrphanBase      = 2 << 20
	OrphanBlocks    = 64
	OrphansPerBlock = PayloadBytes / orphanEntryBytes
	OrphansMax      = OrphanBlocks * OrphansPerBlock // per slot

	orphanEntryBytes = 16
)

// The orphan tables end before the logs begin.
const _ = uint64(LogBase - OrphanBase - SlotsMax*OrphanBlocks*BlockBytes)

// OrphanAddr is the address of block k of slot i's orphan table.
func OrphanAddr(slot, k int) uint64 {
	return OrphanBase + uint64(slot*OrphanBlocks+k)*BlockBytes
}

// OrphanPos is where entry n of slot i's table lives: its block's address
// and the entry's offset in the block.
func OrphanPos(slot, n int) (addr uint64, off int) {
	return OrphanAddr(slot, n/OrphansPerBlock), HeaderBytes + (n%OrphansPerBlock)*orphanEntryBytes
}

// Orphan is one entry of an orphan table.
type Orphan struct {
	N   int // the entry's index in its slot's table
	Ino uint64
	Gen uint64
}

// PutOrphan sets the entry at off (from OrphanPos) of an orphan block of
// slot i, block k; ino 0 clears it. A never-written block gets its header.
func PutOrphan(b []byte, slot, k, off int, ino, gen uint64) {
	if h, err := DecodeHeader(b); err != nil || h.Kind == KindNone {
		PutHeader(b, Header{Kind: KindOrphan, Version: Version(b), Index: uint64(slot*OrphanBlocks + k)})
	}
	binary.LittleEndian.PutUint64(b[off:], ino)
	binary.LittleEndian.PutUint64(b[off+8:], gen)
}

// DecodeOrphans returns the entries of block k of slot i's orphan table.
func DecodeOrphans(b []byte, slot, k int) ([]Orphan, error) {
	h, err := DecodeHeader(b)
	switch {
	case err != nil:
		return nil, err
	case h.Kind == KindNone:
		return nil, nil
	case h.Kind != KindOrphan || h.Owner != 0 || h.Index != uint64(slot*OrphanBlocks+k):
		return nil, fmt.Errorf("%w: a %v block (index %d) where orphan block %d of slot %d belongs", ErrCorrupt, h.Kind, h.Index, k, slot)
	}
	var out []Orphan
	for j := range OrphansPerBlock {
		off := HeaderBytes + j*orphanEntryBytes
		ino := binary.LittleEndian.Uint64(b[off:])
		gen := binary.LittleEndian.Uint64(b[off+8:])
		switch {
		case ino == 0 && gen == 0:
			continue
		case !ValidIno(ino):
			return nil, fmt.Errorf("%w: orphan block %d of slot %d: entry %d names inode %d", ErrCorrupt, k, slot, j, ino)
		}
		out = append(out, Orphan{N: k*OrphansPerBlock + j, Ino: ino, Gen: gen})
	}
	return out, nil
}

// DecodeOrphanTable returns the entries of slot i's whole table, read as
// OrphanBlocks consecutive blocks from OrphanAddr(i, 0).
func DecodeOrphanTable(buf []byte, slot int) ([]Orphan, error) {
	if len(buf) != OrphanBlocks*BlockBytes {
		return nil, fmt.Errorf("%w: orphan table of %d bytes", ErrCorrupt, len(buf))
	}
	var out []Orphan
	for k := range OrphanBlocks {
		es, err := DecodeOrphans(buf[k*BlockBytes:(k+1)*BlockBytes], slot, k)
		if err != nil {
			return nil, err
		}
		out = append(out, es...)
	}
	return out, nil
}
