package store

import (
	"bytes"
	"encoding/binary"
	"errors"
)

// scanned is one record found in a segment.
type scanned struct {
	h   header
	off int64  // offset of the record in its segment
	rec []byte // the whole record, header included
}

// scanResult sums up one scan of a segment.
type scanResult struct {
	end        int64 // end of the last commit record; a torn tail starts here
	gaps       int   // stretches of bytes with no valid header, skipped
	badData    int   // records whose data failed its crc (kept: they read as corrupt)
	mismatched int   // batches whose commit record disagreed with what was found
	dropped    int   // records after the last commit record (a torn tail)
	zeroTail   bool  // zeros from the last record to the end: free space
}

var magicBytes = binary.LittleEndian.AppendUint32(nil, recordMagic)

// scanSegment walks b, the bytes of one segment starting at offset base,
// and calls fn with the records of each batch whose commit record it finds,
// in log order. It never fails on bad bytes:
//   - bytes that hold no valid header (bit rot, a torn write) are skipped
//     up to the next valid header, so rot in the middle of a sealed segment
//     costs only the records it hit;
//   - a record whose header is good but whose data fails its crc is kept,
//     so the index still knows the key and reads of it report ErrCorrupt;
//   - records with no commit record after them are dropped (a torn tail);
//   - zeros from a position to the end are free space, not a gap: the
//     head segment is preallocated (segment.go).
//
// A batch with a gap inside is still applied (what was found of it): its
// commit record proves the batch was written whole, and the records lost
// to the gap cannot be recovered here anyway.
func scanSegment(b []byte, base int64, fn func([]scanned) error) (scanResult, error) {
	res := scanResult{end: base}
	var pending []scanned
	var pendingBytes uint64
	for pos := 0; pos < len(b); {
		h, n, err := decodeRecord(b[pos:])
		if err != nil && !errors.Is(err, errDataCRC) {
			next := resync(b, pos+1)
			if next == len(b) && allZero(b[pos:]) {
				res.zeroTail = true // the preallocated, never written tail of the head
				break
			}
			res.gaps++
			pos = next
			continue
		}
		if h.kind != kindCommit {
			if err != nil {
				res.badData++
			}
			pending = append(pending, scanned{h: h, off: base + int64(pos), rec: b[pos : pos+n]})
			pendingBytes += uint64(n)
			pos += n
			continue
		}
		if h.commitCount() != uint64(len(pending)) || h.commitBytes() != pendingBytes {
			res.mismatched++
		}
		if err := fn(pending); err != nil {
			return res, err
		}
		pending, pendingBytes = nil, 0
		pos += n
		res.end = base + int64(pos)
	}
	res.dropped = len(pending)
	return res, nil
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// resync returns the first position at or after pos where a record could
// start, or len(b).
func resync(b []byte, pos int) int {
	if pos >= len(b) {
		return len(b)
	}
	i := bytes.Index(b[pos:], magicBytes)
	if i < 0 {
		return len(b)
	}
	return pos + i
}
