package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/plumeria-fs/plumeria/internal/limits"
)

// Segment file format, version 2 (version 1 plus the ref record).
//
// A segment file seg-%016x.log (id in hex) is a sequence of records with no
// file header; the file is only ever appended to, or truncated back to the
// end of its last commit record after a torn write. Integers are little-endian.
// The head segment may be preallocated (since session 11, same version):
// its bytes after the last record are zeros up to the end of the file, which
// readers of version 1 take as free space (a reader from before took them
// for a torn tail and truncated them: also correct). Sealed segments end
// with their last commit record.
//
//	 0      4     5      6       8      16      24      32      40     44     48     52
//	+------+-----+------+-------+------+-------+-------+-------+------+------+------+---------+
//	|magic | ver | kind | flags | vol  | block |  gen  |  seq  | dlen | hcrc | crc  | data... |
//	|  4   |  1  |  1   |   2   |  8   |   8   |   8   |   8   |  4   |  4   |  4   |  dlen   |
//	+------+-----+------+-------+------+-------+-------+-------+------+------+------+---------+
//
//	magic  recordMagic; flags = 0 (reserved)
//	ver    the format version that brought in the record's kind
//	       (recordVersion): 2 for a ref, 1 for every other kind, so a
//	       store that never held a ref is a version 1 store byte for byte
//	hcrc   crc32c (Castagnoli) of bytes [0,44): the header alone, so the key and
//	       dlen can be trusted, and the record skipped, when only the data rotted
//	crc    crc32c of bytes [0,48) followed by data: header and data together
//
// Kinds and the meaning of their fields:
//
//	1 put        vol, block, gen = key; seq = caller's Seq; dlen = limits.BlockBytes
//	2 tombstone  as put, dlen = 0
//	3 remove     key and seq as put, dlen = 0
//	4 commit     vol = records in the batch, block = their bytes; gen = seq = dlen = 0
//	5 move       vol = source segment, block = source offset; gen = seq = 0;
//	             data = the moved put, tombstone or ref record, byte for byte
//	6 ref        (version 2) key and seq as put; dlen = RefBytes; data = an
//	             opaque payload the store keeps for the block instead of its
//	             data (brick/ec.Ref: the erasure-coded stripe that holds it)
//
// An Apply batch is its records followed by one commit record; a batch
// never spans two segments. Recovery applies a batch only when its commit
// record is present, so a torn tail is never half visible (scan.go).
// The cleaner writes move records: it copies a live record verbatim, its
// own crc included, so a corrupt block stays detectably corrupt; the index
// takes the move only if the key still points at the source location
// (index.go), so a move never undoes a newer write or a remove.
//
// Format versions. The store's version is the one in its index (index.go,
// open.go). Version 2 adds the ref record and the index's ref flag, and
// changes nothing else. A version 2 build opens a version 1 store as it is
// and keeps writing it as version 1 until it first writes a ref (or
// replays one): then, before that record reaches a segment, it sets the
// index's version to 2, durably (Store.upgradeFormat). The upgrade is one
// way: from then on a version 1 build refuses the store ("index format
// version 02, want 1"), so it never meets a record or an index entry it
// cannot read. A store of a version above formatVersion is refused.
//
// Records are not aligned. limits.BlockBytes is part of the format too: a
// store written with another block size is another format version.
//
// These constants are part of the format: never edit them; add a version.
const (
	recordMagic = 0x52534c50 // "PLSR" in file byte order
	// formatVersion is the newest format this build reads and writes;
	// formatVersionRef the one that brought in refs; formatVersionMin the
	// oldest it opens (and upgrades when it writes a ref).
	formatVersion    = 2
	formatVersionRef = 2
	formatVersionMin = 1
	headerBytes      = 52
	hcrcOffset       = 44
	crcOffset        = 48
	// RefBytes is the size of a ref record's payload (Op.Ref): the store
	// keeps it opaque. It equals brick/ec.RefBytes (asserted at compile
	// time in ref_test.go: the store does not import brick/ec, which pulls
	// in the erasure coder, and its format must not change because another
	// package's constant did: a ref of another size is a new store format).
	RefBytes = 13
	// putRecordBytes is the size of a put record, the largest op record.
	putRecordBytes = headerBytes + limits.BlockBytes
	// refRecordBytes is the size of a ref record.
	refRecordBytes = headerBytes + RefBytes
	// moveRecordBytesMax is the size of a move record carrying a put.
	moveRecordBytesMax = headerBytes + putRecordBytes
)

// Compile-time relations: a ref record is smaller than a put record (a
// move of one fits the bounds of a move of a put), and formats only grow.
const (
	_ = uint64(putRecordBytes - refRecordBytes - 1)
	_ = uint64(formatVersion - formatVersionRef)
	_ = uint64(formatVersionRef - formatVersionMin - 1)
)

type kind uint8

const (
	kindPut       kind = 1
	kindTombstone kind = 2
	kindRemove    kind = 3
	kindCommit    kind = 4
	kindMove      kind = 5
	kindRef       kind = 6 // format version 2
)

// recordVersion is the ver field of a record of kind k: the format
// version that brought k in. A decoder accepts no other.
func recordVersion(k kind) byte {
	if k == kindRef {
		return formatVersionRef
	}
	return 1
}

// header is a decoded record header. For commit and move records vol and
// block carry the fields described in the format box; see the accessors.
type header struct {
	kind            kind
	vol, block, gen uint64
	seq             uint64
	dlen            uint32
	crc             uint32 // stored crc of header and data
}

func (h header) key() Key { return Key{Vol: h.vol, Block: h.block, Gen: h.gen} }

// commitCount and commitBytes describe the batch a commit record closes.
func (h header) commitCount() uint64 { return h.vol }
func (h header) commitBytes() uint64 { return h.block }

// moveSeg and moveOff locate the source of a move record.
func (h header) moveSeg() uint64 { return h.vol }
func (h header) moveOff() uint64 { return h.block }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var (
	errShort     = errors.New("record truncated")
	errHeader    = errors.New("bad record header")
	errHeaderCRC = errors.New("record header checksum mismatch")
	errDataCRC   = errors.New("record data checksum mismatch")
)

// appendRecord appends one record to dst. data must suit h.kind.
func appendRecord(dst []byte, h header, data []byte) []byte {
	start := len(dst)
	var hb [headerBytes]byte
	binary.LittleEndian.PutUint32(hb[0:], recordMagic)
	hb[4] = recordVersion(h.kind)
	hb[5] = byte(h.kind)
	binary.LittleEndian.PutUint64(hb[8:], h.vol)
	binary.LittleEndian.PutUint64(hb[16:], h.block)
	binary.LittleEndian.PutUint64(hb[24:], h.gen)
	binary.LittleEndian.PutUint64(hb[32:], h.seq)
	binary.LittleEndian.PutUint32(hb[40:], uint32(len(data)))
	binary.LittleEndian.PutUint32(hb[hcrcOffset:], crc32.Checksum(hb[:hcrcOffset], castagnoli))
	crc := crc32.Update(crc32.Checksum(hb[:crcOffset], castagnoli), castagnoli, data)
	binary.LittleEndian.PutUint32(hb[crcOffset:], crc)
	dst = append(dst, hb[:]...)
	dst = append(dst, data...)
	if len(dst)-start != headerBytes+len(data) {
		panic("store: appendRecord length") // invariant: appends are exact
	}
	return dst
}

// decodeHeader decodes and checks the header at the start of b. On success
// the header's dlen is valid for its kind, so headerBytes+dlen is the
// record's length; b may still be too short to hold the data.
func decodeHeader(b []byte) (header, error) {
	if len(b) < headerBytes {
		return header{}, errShort
	}
	if binary.LittleEndian.Uint32(b[0:]) != recordMagic {
		return header{}, fmt.Errorf("magic %#x: %w", binary.LittleEndian.Uint32(b[0:]), errHeader)
	}
	if crc32.Checksum(b[:hcrcOffset], castagnoli) != binary.LittleEndian.Uint32(b[hcrcOffset:]) {
		return header{}, errHeaderCRC
	}
	if b[4] != recordVersion(kind(b[5])) || b[6] != 0 || b[7] != 0 {
		return header{}, fmt.Errorf("version %d flags %#x: %w", b[4], b[6:8], errHeader)
	}
	h := header{
		kind:  kind(b[5]),
		vol:   binary.LittleEndian.Uint64(b[8:]),
		block: binary.LittleEndian.Uint64(b[16:]),
		gen:   binary.LittleEndian.Uint64(b[24:]),
		seq:   binary.LittleEndian.Uint64(b[32:]),
		dlen:  binary.LittleEndian.Uint32(b[40:]),
		crc:   binary.LittleEndian.Uint32(b[crcOffset:]),
	}
	if !dlenValid(h.kind, h.dlen) {
		return header{}, fmt.Errorf("kind %d dlen %d: %w", h.kind, h.dlen, errHeader)
	}
	return h, nil
}

func dlenValid(k kind, dlen uint32) bool {
	switch k {
	case kindPut:
		return dlen == limits.BlockBytes
	case kindTombstone, kindRemove, kindCommit:
		return dlen == 0
	case kindRef:
		return dlen == RefBytes
	case kindMove:
		return dlen == headerBytes || dlen == putRecordBytes || dlen == refRecordBytes
	}
	return false
}

// decodeRecord decodes the record at the start of b and checks both
// checksums. n is the record's length whenever the header is good, even if
// the data checksum fails (err wraps errDataCRC), so a reader can skip it.
func decodeRecord(b []byte) (h header, n int, err error) {
	h, err = decodeHeader(b)
	if err != nil {
		return header{}, 0, err
	}
	n = headerBytes + int(h.dlen)
	if len(b) < n {
		return header{}, 0, errShort
	}
	if !dataValid(b[:n], h) {
		return h, n, errDataCRC
	}
	return h, n, nil
}

// dataValid reports whether rec (one whole record with header h) matches
// its stored crc.
func dataValid(rec []byte, h header) bool {
	return dataValidSplit(rec[:headerBytes], rec[headerBytes:], h)
}

// dataValidSplit is dataValid for a record's header and data apart.
func dataValidSplit(hdr, data []byte, h header) bool {
	crc := crc32.Update(crc32.Checksum(hdr[:crcOffset], castagnoli), castagnoli, data)
	return crc == h.crc
}

// decodeMove returns the header of the record a move record carries and
// that record's bytes. The inner record's data is not checked: a move may
// carry a corrupt record on purpose.
func decodeMove(h header, rec []byte) (header, []byte, error) {
	inner := rec[headerBytes:]
	ih, err := decodeHeader(inner)
	if err != nil {
		return header{}, nil, fmt.Errorf("moved record: %w", err)
	}
	if (ih.kind != kindPut && ih.kind != kindTombstone && ih.kind != kindRef) || headerBytes+int(ih.dlen) != len(inner) {
		return header{}, nil, fmt.Errorf("moved record kind %d dlen %d: %w", ih.kind, ih.dlen, errHeader)
	}
	return ih, inner, nil
}

// hasRef reports whether record (h, rec) is a ref or a move carrying one:
// a record a format version 1 store must not hold.
func hasRef(h header, rec []byte) bool {
	if h.kind == kindMove {
		ih, _, err := decodeMove(h, rec)
		return err == nil && ih.kind == kindRef
	}
	return h.kind == kindRef
}
