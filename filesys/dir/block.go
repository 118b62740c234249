package dir

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// Record: one entry, in the inline root and in blocks. Little-endian.
//
//	+--------+--------+--------+---------+------------------+
//	| hash   | ino    | type   | namelen | name             |
//	| 8      | 8      | 1      | 1       | namelen (1..255) |
//	+--------+--------+--------+---------+------------------+
//
// hash is xxhash64(name), stored so scans compare 8 bytes before names.
// Part of format version 1: never edit; add a version instead.
const (
	recordHeaderBytes = 8 + 8 + 1 + 1
	recordBytesMax    = recordHeaderBytes + NameBytesMax
)

// rec is a decoded record.
type rec struct {
	h    uint64
	ino  uint64
	typ  uint8
	name string
}

func (r rec) size() int { return recordHeaderBytes + len(r.name) }

func appendRec(dst []byte, r rec) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, r.h)
	dst = binary.LittleEndian.AppendUint64(dst, r.ino)
	dst = append(dst, r.typ, byte(len(r.name)))
	return append(dst, r.name...)
}

// validName reports whether checkName accepts name, without allocating.
func validName(name []byte) bool {
	return len(name) > 0 && !bytes.Equal(name, []byte(".")) && !bytes.Equal(name, []byte("..")) &&
		bytes.IndexByte(name, '/') < 0 && bytes.IndexByte(name, 0) < 0
}

// parseRecs checks that p is exactly count well-formed records.
func parseRecs(p []byte, count int) error {
	off := 0
	for i := 0; i < count; i++ {
		if len(p)-off < recordHeaderBytes {
			return fmt.Errorf("record %d at %d: header overruns %d bytes: %w", i, off, len(p), ErrCorrupt)
		}
		n := recordHeaderBytes + int(p[off+17])
		if len(p)-off < n {
			return fmt.Errorf("record %d at %d: %d bytes overrun %d: %w", i, off, n, len(p), ErrCorrupt)
		}
		if !validName(p[off+recordHeaderBytes : off+n]) {
			return fmt.Errorf("record %d at %d: bad name %q: %w", i, off, p[off+recordHeaderBytes:off+n], ErrCorrupt)
		}
		off += n
	}
	if off != len(p) {
		return fmt.Errorf("%d records end at %d, not %d: %w", count, off, len(p), ErrCorrupt)
	}
	return nil
}

// recAt decodes the record at off of a parsed region.
func recAt(p []byte, off int) rec {
	n := int(p[off+17])
	return rec{
		h:    binary.LittleEndian.Uint64(p[off:]),
		ino:  binary.LittleEndian.Uint64(p[off+8:]),
		typ:  p[off+16],
		name: string(p[off+recordHeaderBytes : off+recordHeaderBytes+n]),
	}
}

// recSizeAt returns the size of the record at off of a parsed region.
func recSizeAt(p []byte, off int) int { return recordHeaderBytes + int(p[off+17]) }

// Block payload, for a bucket (kind 1) and an overflow block (kind 2).
// Little-endian; BlockBytes long.
//
//	+---------+------+-------+------+----------+------+-------+------+------+
//	| version | kind | count | used | reserved | self | owner | next | prev |
//	| 1       | 1    | 2     | 2    | 2 (=0)   | 4    | 4     | 4    | 4    |
//	+---------+------+-------+------+----------+------+-------+------+------+
//	| count records, used bytes in all          | zeros to BlockBytes      |
//	+-------------------------------------------+--------------------------+
//
// self is the block's own number and owner the bucket whose chain it is in,
// so a block read from the wrong place is caught. next is the next overflow
// block of the chain (0: none; block 0 is always a bucket). prev is the
// previous block of the chain (a bucket or an overflow block; 0 in a
// bucket). An overflow block is never empty. Records are in no order.
// Part of format version 1: never edit; add a version instead.
const (
	blockHeaderBytes = 24
	recordSpace      = BlockBytes - blockHeaderBytes
	formatVersion    = 1

	kindBucket   = 1
	kindOverflow = 2
)

type blockHeader struct {
	kind                    uint8
	count, used             int
	self, owner, next, prev uint32
}

func putHeader(p []byte, hd blockHeader) {
	p[0], p[1] = formatVersion, hd.kind
	binary.LittleEndian.PutUint16(p[2:], uint16(hd.count))
	binary.LittleEndian.PutUint16(p[4:], uint16(hd.used))
	binary.LittleEndian.PutUint16(p[6:], 0)
	binary.LittleEndian.PutUint32(p[8:], hd.self)
	binary.LittleEndian.PutUint32(p[12:], hd.owner)
	binary.LittleEndian.PutUint32(p[16:], hd.next)
	binary.LittleEndian.PutUint32(p[20:], hd.prev)
}

// encodeBlock writes a whole block holding recs into buf (len BlockBytes).
// The caller has checked that recs fit.
func encodeBlock(buf []byte, hd blockHeader, recs []rec) []byte {
	buf = buf[:blockHeaderBytes]
	for _, r := range recs {
		buf = appendRec(buf, r)
	}
	hd.count, hd.used = len(recs), len(buf)-blockHeaderBytes
	putHeader(buf, hd)
	buf = buf[:BlockBytes]
	clear(buf[blockHeaderBytes+hd.used:])
	return buf
}

// parseBlock decodes and checks a block's header and the layout of its
// records. It does not check the tail of zeros (see checkTail) nor how the
// block fits its chain (see walk).
func parseBlock(p []byte) (blockHeader, error) {
	if len(p) != BlockBytes {
		return blockHeader{}, fmt.Errorf("block of %d bytes, not %d: %w", len(p), BlockBytes, ErrCorrupt)
	}
	if p[0] != formatVersion {
		return blockHeader{}, fmt.Errorf("block version %d, not %d: %w", p[0], formatVersion, ErrCorrupt)
	}
	hd := blockHeader{
		kind:  p[1],
		count: int(binary.LittleEndian.Uint16(p[2:])),
		used:  int(binary.LittleEndian.Uint16(p[4:])),
		self:  binary.LittleEndian.Uint32(p[8:]),
		owner: binary.LittleEndian.Uint32(p[12:]),
		next:  binary.LittleEndian.Uint32(p[16:]),
		prev:  binary.LittleEndian.Uint32(p[20:]),
	}
	switch {
	case hd.kind != kindBucket && hd.kind != kindOverflow:
		return hd, fmt.Errorf("block kind %d: %w", hd.kind, ErrCorrupt)
	case binary.LittleEndian.Uint16(p[6:]) != 0:
		return hd, fmt.Errorf("block reserved bytes not zero: %w", ErrCorrupt)
	case hd.used > recordSpace:
		return hd, fmt.Errorf("block uses %d bytes > %d: %w", hd.used, recordSpace, ErrCorrupt)
	case hd.self >= MaxBlocks || hd.owner >= BucketsMax || hd.prev >= MaxBlocks:
		return hd, fmt.Errorf("block self %d owner %d prev %d out of range: %w", hd.self, hd.owner, hd.prev, ErrCorrupt)
	case hd.next != 0 && (hd.next < OverflowBase || hd.next >= MaxBlocks):
		return hd, fmt.Errorf("block next %d outside the overflow region: %w", hd.next, ErrCorrupt)
	}
	if err := parseRecs(p[blockHeaderBytes:blockHeaderBytes+hd.used], hd.count); err != nil {
		return hd, fmt.Errorf("block %d: %w", hd.self, err)
	}
	return hd, nil
}

// checkTail checks that the bytes after the records are zero.
func checkTail(p []byte, hd blockHeader) error {
	for i, c := range p[blockHeaderBytes+hd.used:] {
		if c != 0 {
			return fmt.Errorf("block %d: byte %d after the records is %#x: %w", hd.self, blockHeaderBytes+hd.used+i, c, ErrCorrupt)
		}
	}
	return nil
}

// findRec returns the offset (in p) and size of the record called name with
// hash h, or n == 0.
func findRec(p []byte, hd blockHeader, h uint64, name string) (off, n int) {
	for off = blockHeaderBytes; off < blockHeaderBytes+hd.used; off += n {
		n = recSizeAt(p, off)
		if binary.LittleEndian.Uint64(p[off:]) == h && string(p[off+recordHeaderBytes:off+n]) == name {
			return off, n
		}
	}
	return 0, 0
}

// appendRecs appends the records of a parsed block whose cookie is > after.
func appendRecs(dst []rec, p []byte, hd blockHeader, after uint64) []rec {
	for off := blockHeaderBytes; off < blockHeaderBytes+hd.used; off += recSizeAt(p, off) {
		if cookieOf(binary.LittleEndian.Uint64(p[off:])) > after {
			dst = append(dst, recAt(p, off))
		}
	}
	return dst
}

// sortRecs sorts by (cookie, name), the order of List.
func sortRecs(recs []rec) {
	slices.SortFunc(recs, func(a, b rec) int {
		ca, cb := cookieOf(a.h), cookieOf(b.h)
		switch {
		case ca < cb:
			return -1
		case ca > cb:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
}

// appendToBlock adds r to the parsed block p in place; the caller has
// checked that it fits.
func appendToBlock(p []byte, hd *blockHeader, r rec) {
	end := blockHeaderBytes + hd.used
	appendRec(p[end:end], r)
	hd.count++
	hd.used += r.size()
	putHeader(p, *hd)
}

// cutFromBlock removes the n-byte record at off from the parsed block p in
// place and zeroes the freed tail.
func cutFromBlock(p []byte, hd *blockHeader, off, n int) {
	end := blockHeaderBytes + hd.used
	copy(p[off:], p[off+n:end])
	clear(p[end-n : end])
	hd.count--
	hd.used -= n
	putHeader(p, *hd)
}

// pack splits recs into the groups that fill a chain's blocks in turn:
// always at least one group (a bucket block may be empty).
func pack(recs []rec) [][]rec {
	groups := [][]rec{}
	start, used := 0, 0
	for i, r := range recs {
		if used+r.size() > recordSpace {
			groups = append(groups, recs[start:i])
			start, used = i, 0
		}
		used += r.size()
	}
	return append(groups, recs[start:])
}
