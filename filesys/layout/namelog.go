package layout

import (
	"encoding/binary"
	"fmt"
)

// Name log (format 2): the history of a directory's names. Each change of
// a directory's entries appends a record per name added or removed to the
// log of the directory's inode number, in the transaction that makes the
// change. The log is metadata blocks at NameLogAddr(ino, n) (header
// KindNameLog, owner ino, index n); the directory inode's nlog is its
// length in payload bytes: block n's payload holds log bytes
// [n*PayloadBytes, (n+1)*PayloadBytes). A record never spans blocks: one
// that does not fit in the rest of a block starts the next one, and the
// rest stays zeros (a zero op ends a block's records). The log of an inode
// number outlives each directory that had it (nlog is kept on reuse): a
// record names the generation of the directory it belongs to.
//
// Record, little-endian:
//
//	 0            8        12      13        14           15     16           24        32        40
//	| time s i64 | ns u32 | op u8 | type u8 | nameLen u8 | zero | dirGen u64 | ino u64 | gen u64 | name |
//
// op is NameAdded or NameRemoved; type is the entry's file type (its mode
// >> 12, as directory entries keep it); ino and gen name the inode.
const (
	nameRecordFixed = 40

	NameAdded   = 1
	NameRemoved = 2
)

// NameRecord is one change of a directory's names.
type NameRecord struct {
	Time     Time
	Op, Type uint8
	DirGen   uint64
	Ino, Gen uint64
	Name     string
}

// Bytes is the record's encoded length.
func (r *NameRecord) Bytes() int { return nameRecordFixed + len(r.Name) }

// NameLogPlace returns where a record of n bytes goes in a log of nlog
// bytes: its block, its offset in the block's payload, and the log's new
// length.
func NameLogPlace(nlog uint64, n int) (block uint64, off int, end uint64) {
	block, off = nlog/PayloadBytes, int(nlog%PayloadBytes)
	if off+n > PayloadBytes {
		block, off = block+1, 0
	}
	return block, off, block*PayloadBytes + uint64(off+n)
}

// PutNameRecord writes r at the start of p (a block's payload from the
// record's offset on).
func PutNameRecord(p []byte, r *NameRecord) error {
	if r.Name == "" || len(r.Name) > 255 || (r.Op != NameAdded && r.Op != NameRemoved) {
		return fmt.Errorf("layout: name record %+v: bad name or op", r)
	}
	if len(p) < r.Bytes() {
		return fmt.Errorf("layout: name record of %d bytes in %d", r.Bytes(), len(p))
	}
	le := binary.LittleEndian
	putTime(p, r.Time)
	p[12], p[13], p[14], p[15] = r.Op, r.Type, byte(len(r.Name)), 0
	le.PutUint64(p[16:], r.DirGen)
	le.PutUint64(p[24:], r.Ino)
	le.PutUint64(p[32:], r.Gen)
	copy(p[nameRecordFixed:], r.Name)
	return nil
}

// DecodeNameRecords reads the records of one name log block's payload, up
// to limit bytes of it (the log's end within the block), in order.
func DecodeNameRecords(p []byte, limit int) ([]NameRecord, error) {
	if limit > len(p) {
		return nil, fmt.Errorf("%w: name log block: limit %d past its %d bytes", ErrCorrupt, limit, len(p))
	}
	p = p[:limit]
	var out []NameRecord
	le := binary.LittleEndian
	for off := 0; off < len(p); {
		q := p[off:]
		if len(q) < nameRecordFixed || q[12] == 0 {
			if !allZero(q) {
				return nil, fmt.Errorf("%w: name log: bytes after the last record at %d", ErrCorrupt, off)
			}
			break
		}
		r := NameRecord{Time: getTime(q), Op: q[12], Type: q[13], DirGen: le.Uint64(q[16:]), Ino: le.Uint64(q[24:]), Gen: le.Uint64(q[32:])}
		n := int(q[14])
		switch {
		case r.Op != NameAdded && r.Op != NameRemoved:
			return nil, fmt.Errorf("%w: name log: record at %d has op %d", ErrCorrupt, off, r.Op)
		case n == 0 || nameRecordFixed+n > len(q) || q[15] != 0:
			return nil, fmt.Errorf("%w: name log: record at %d: name of %d bytes", ErrCorrupt, off, n)
		case !ValidIno(r.Ino) || r.Time.Nsec >= 1e9:
			return nil, fmt.Errorf("%w: name log: record at %d: inode %d, time %v", ErrCorrupt, off, r.Ino, r.Time)
		}
		r.Name = string(q[nameRecordFixed : nameRecordFixed+n])
		out = append(out, r)
		off += nameRecordFixed + n
	}
	return out, nil
}
