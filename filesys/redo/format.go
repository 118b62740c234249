package redo

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Log region format, version 1. Integers are little-endian.
//
// The region [Base, Base+Size) is cut into 512-byte sectors. Every byte
// ever written has a log position: a byte count since the region's first
// batch, never reset, that lives at region offset position % Size. The log
// is a sequence of batches, each one or more whole sectors starting at a
// sector boundary; a batch that runs past the end of the region continues
// at its start. Batch n+1 starts where batch n ends.
//
// First sector of a batch:
//
//	 0       4       6       8              16        20        24             32
//	+-------+-------+-------+--------------+---------+---------+--------------+
//	| magic | ver   | flags | pos          | sectors | payload | firstLSN     |
//	| 4     | 2     | 2     | 8            | 4       | 4       | 8            |
//	+-------+-------+-------+--------------+---------+---------+--------------+
//	32      36      40             48             56      60      64       512
//	+-------+-------+--------------+--------------+-------+-------+----------+
//	| count | zero  | tailLSN      | tailPos      | bcrc  | hcrc  | payload  |
//	| 4     | 4     | 8            | 8            | 4     | 4     | 448      |
//	+-------+-------+--------------+--------------+-------+-------+----------+
//
// Every further sector of the batch:
//
//	 0            4                                                      512
//	+------------+--------------------------------------------------------+
//	| contMagic  | payload, continued                                     |
//	| 4          | 508                                                    |
//	+------------+--------------------------------------------------------+
//
//	magic     batchMagic; ver = formatVersion
//	flags     flagClean: written by Close with every record released
//	pos       log position of this batch; pos % Size is its region offset,
//	          which tells it apart from stale batches of earlier laps
//	sectors   length of the batch in sectors: exactly enough for payload
//	payload   bytes of records (below); the rest of the last sector is zero
//	firstLSN  LSN of the first record; the others follow one by one. A
//	          batch with count 0 (a marker) has firstLSN = the next LSN
//	tailLSN   oldest record not released when the batch was written
//	tailPos   pos of the batch holding record tailLSN (or this pos):
//	          Recover replays from there
//	bcrc      crc32c (Castagnoli) of the payload bytes
//	hcrc      crc32c of bytes [0,60): the header can be trusted alone
//
// Payload: count records, back to back, across sectors:
//
//	record  | len 4 | nupdates 4 | update ... |     len counts bytes after itself
//	update  | addr 8 | version 8 | off 2 | dlen 2 | data dlen |
//
// Only the first sector of a batch starts with batchMagic; every other
// sector starts with contMagic. Record bytes therefore never sit at a sector
// start, and no record content (a file name, an xattr) can pose as a batch
// header. The end of the log is the valid batch (both crcs good) with the
// highest pos: batches are written one at a time, in order, so at most the
// last one written is torn, and a torn batch fails bcrc.
//
// These constants are part of the format: never edit them; add a version.
const (
	batchMagic    = 0x4f445250 // "PRDO" in byte order
	contMagic     = 0x63445250 // "PRDc" in byte order
	formatVersion = 1
	flagClean     = 1 << 0
	flagsKnown    = flagClean

	sectorBytes      = 512
	headerBytes      = 64
	hcrcOffset       = 60
	contBytes        = 4
	firstSectorBody  = sectorBytes - headerBytes // 448
	otherSectorBody  = sectorBytes - contBytes   // 508
	recordHeadBytes  = 8
	updateHeadBytes  = 20
	metaBlockBytes   = 4096
	positionMax      = 1 << 62 // bound on pos and LSN so sums never overflow
	regionBytesMin   = 64 << 10
	regionBytesMax   = 1 << 30 // Open and Recover read the whole region
	regionAlignBytes = 4096
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// header is a decoded batch header.
type header struct {
	flags    uint16
	pos      uint64
	sectors  uint32
	payload  uint32
	firstLSN LSN
	count    uint32
	tailLSN  LSN
	tailPos  uint64
	bcrc     uint32
}

func (h header) bytes() uint64 { return uint64(h.sectors) * sectorBytes }
func (h header) end() uint64   { return h.pos + h.bytes() }
func (h header) next() LSN     { return h.firstLSN + LSN(h.count) }

// sectorsFor is the number of sectors a batch with payload bytes occupies.
func sectorsFor(payload int) int {
	if payload <= firstSectorBody {
		return 1
	}
	return 1 + (payload-firstSectorBody+otherSectorBody-1)/otherSectorBody
}

// batchBytes is the on-disk size of a batch with payload bytes.
func batchBytes(payload int) int { return sectorsFor(payload) * sectorBytes }

// recordBytes is the encoded size of a record.
func recordBytes(ups []Update) int {
	n := recordHeadBytes
	for _, u := range ups {
		n += updateHeadBytes + len(u.Data)
	}
	return n
}

// appendRecord appends the encoding of one record to dst. The updates must
// have passed checkUpdate.
func appendRecord(dst []byte, ups []Update) []byte {
	n := recordBytes(ups)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(n-4))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(ups)))
	for _, u := range ups {
		dst = binary.LittleEndian.AppendUint64(dst, u.Addr)
		dst = binary.LittleEndian.AppendUint64(dst, u.Version)
		dst = binary.LittleEndian.AppendUint16(dst, u.Off)
		dst = binary.LittleEndian.AppendUint16(dst, uint16(len(u.Data)))
		dst = append(dst, u.Data...)
	}
	return dst
}

// checkUpdate rejects updates that do not fit in one metadata block.
func checkUpdate(u Update) error {
	if u.Addr%metaBlockBytes != 0 {
		return fmt.Errorf("redo: update of block %#x: address not a multiple of %d: %w", u.Addr, metaBlockBytes, ErrBadUpdate)
	}
	if int(u.Off)+len(u.Data) > metaBlockBytes {
		return fmt.Errorf("redo: update of block %#x: bytes [%d,%d) beyond %d: %w", u.Addr, u.Off, int(u.Off)+len(u.Data), metaBlockBytes, ErrBadUpdate)
	}
	return nil
}

// decodeRecords parses count records from payload, which they must fill
// exactly. Update data aliases payload.
func decodeRecords(payload []byte, count uint32, first LSN) ([]Record, error) {
	recs := make([]Record, 0, min(int(count), len(payload)/recordHeadBytes))
	b := payload
	for i := uint32(0); i < count; i++ {
		if len(b) < recordHeadBytes {
			return nil, fmt.Errorf("record %d: %d bytes left, header needs %d", i, len(b), recordHeadBytes)
		}
		n := binary.LittleEndian.Uint32(b)
		if n < 4 || uint64(n) > uint64(len(b)-4) {
			return nil, fmt.Errorf("record %d: length %d, %d bytes left", i, n, len(b)-4)
		}
		rec, body := b[4:4+n], b[4+n:]
		nups := binary.LittleEndian.Uint32(rec)
		rec = rec[4:]
		if uint64(nups) > uint64(len(rec)/updateHeadBytes) {
			return nil, fmt.Errorf("record %d: %d updates in %d bytes", i, nups, len(rec))
		}
		ups := make([]Update, 0, nups)
		for j := uint32(0); j < nups; j++ {
			u, rest, err := decodeUpdate(rec)
			if err != nil {
				return nil, fmt.Errorf("record %d update %d: %w", i, j, err)
			}
			ups = append(ups, u)
			rec = rest
		}
		if len(rec) != 0 {
			return nil, fmt.Errorf("record %d: %d bytes after its updates", i, len(rec))
		}
		recs = append(recs, Record{LSN: first + LSN(i), Updates: ups})
		b = body
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%d bytes after %d records", len(b), count)
	}
	return recs, nil
}

func decodeUpdate(b []byte) (Update, []byte, error) {
	if len(b) < updateHeadBytes {
		return Update{}, nil, fmt.Errorf("%d bytes left, header needs %d", len(b), updateHeadBytes)
	}
	u := Update{
		Addr:    binary.LittleEndian.Uint64(b[0:]),
		Version: binary.LittleEndian.Uint64(b[8:]),
		Off:     binary.LittleEndian.Uint16(b[16:]),
	}
	dlen := int(binary.LittleEndian.Uint16(b[18:]))
	b = b[updateHeadBytes:]
	if dlen > len(b) {
		return Update{}, nil, fmt.Errorf("data length %d, %d bytes left", dlen, len(b))
	}
	u.Data = b[:dlen:dlen]
	if err := checkUpdate(u); err != nil {
		return Update{}, nil, err
	}
	return u, b[dlen:], nil
}

// encodeBatch lays out a batch: h.sectors and h.payload and h.bcrc are
// computed from payload, the other fields taken from h.
func encodeBatch(h header, payload []byte) []byte {
	n := sectorsFor(len(payload))
	h.sectors, h.payload = uint32(n), uint32(len(payload))
	h.bcrc = crc32.Checksum(payload, castagnoli)
	buf := make([]byte, n*sectorBytes)
	putHeader(buf, h)
	rest := payload[copy(buf[headerBytes:sectorBytes], payload):]
	for s := 1; s < n; s++ {
		sec := buf[s*sectorBytes : (s+1)*sectorBytes]
		binary.LittleEndian.PutUint32(sec, contMagic)
		rest = rest[copy(sec[contBytes:], rest):]
	}
	return buf
}

func putHeader(b []byte, h header) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], batchMagic)
	le.PutUint16(b[4:], formatVersion)
	le.PutUint16(b[6:], h.flags)
	le.PutUint64(b[8:], h.pos)
	le.PutUint32(b[16:], h.sectors)
	le.PutUint32(b[20:], h.payload)
	le.PutUint64(b[24:], uint64(h.firstLSN))
	le.PutUint32(b[32:], h.count)
	le.PutUint32(b[36:], 0)
	le.PutUint64(b[40:], uint64(h.tailLSN))
	le.PutUint64(b[48:], h.tailPos)
	le.PutUint32(b[56:], h.bcrc)
	le.PutUint32(b[hcrcOffset:], crc32.Checksum(b[:hcrcOffset], castagnoli))
}

// errNoHeader: the sector does not start a batch (the common case: a
// continuation sector, zeros, or garbage). Not worth a message.
var errNoHeader = errors.New("no batch header")

// decodeHeader parses and checks the header at the start of sector b of a
// region of size bytes, found at region offset off.
func decodeHeader(b []byte, size, off uint64) (header, error) {
	le := binary.LittleEndian
	if len(b) < headerBytes || le.Uint32(b) != batchMagic {
		return header{}, errNoHeader
	}
	if crc32.Checksum(b[:hcrcOffset], castagnoli) != le.Uint32(b[hcrcOffset:]) {
		return header{}, errNoHeader
	}
	if v := le.Uint16(b[4:]); v != formatVersion {
		return header{}, fmt.Errorf("batch at offset %d: format version %d, want %d", off, v, formatVersion)
	}
	h := header{
		flags:    le.Uint16(b[6:]),
		pos:      le.Uint64(b[8:]),
		sectors:  le.Uint32(b[16:]),
		payload:  le.Uint32(b[20:]),
		firstLSN: LSN(le.Uint64(b[24:])),
		count:    le.Uint32(b[32:]),
		tailLSN:  LSN(le.Uint64(b[40:])),
		tailPos:  le.Uint64(b[48:]),
		bcrc:     le.Uint32(b[56:]),
	}
	if err := h.check(le.Uint32(b[36:]), size, off); err != nil {
		return header{}, fmt.Errorf("batch at offset %d: %w", off, err)
	}
	return h, nil
}

// check validates a header's fields against each other and the region.
func (h header) check(zero uint32, size, off uint64) error {
	switch {
	case zero != 0 || h.flags&^flagsKnown != 0:
		return fmt.Errorf("reserved bits set (flags %#x, zero %#x)", h.flags, zero)
	case h.pos >= positionMax || h.pos%size != off:
		return fmt.Errorf("position %d does not belong at offset %d", h.pos, off)
	case h.sectors == 0 || h.bytes() > size/2 || int(h.sectors) != sectorsFor(int(h.payload)):
		return fmt.Errorf("%d sectors for %d payload bytes", h.sectors, h.payload)
	case h.firstLSN == 0 || h.firstLSN >= positionMax || uint64(h.count) > uint64(h.payload)/recordHeadBytes:
		return fmt.Errorf("%d records from LSN %d in %d bytes", h.count, h.firstLSN, h.payload)
	case h.tailLSN == 0 || h.tailLSN > h.next():
		return fmt.Errorf("tail LSN %d, records [%d,%d)", h.tailLSN, h.firstLSN, h.next())
	case h.tailPos > h.pos || h.pos-h.tailPos >= size || h.tailPos%sectorBytes != 0:
		return fmt.Errorf("tail position %d for batch at %d", h.tailPos, h.pos)
	}
	return nil
}

// decodeBatch decodes and fully checks the batch whose header h was found
// at region offset h.pos % len(region).
func decodeBatch(region []byte, h header) ([]Record, error) {
	size := uint64(len(region))
	payload := make([]byte, 0, h.payload)
	off := h.pos % size
	for s := uint32(0); s < h.sectors; s++ {
		sec := region[off : off+sectorBytes]
		body := sec[headerBytes:]
		if s > 0 {
			if binary.LittleEndian.Uint32(sec) != contMagic {
				return nil, fmt.Errorf("batch at %d: sector %d is not a continuation", h.pos, s)
			}
			body = sec[contBytes:]
		}
		payload = append(payload, body[:min(len(body), int(h.payload)-len(payload))]...)
		off = (off + sectorBytes) % size
	}
	if crc32.Checksum(payload, castagnoli) != h.bcrc {
		return nil, fmt.Errorf("batch at %d: payload crc mismatch", h.pos)
	}
	recs, err := decodeRecords(payload, h.count, h.firstLSN)
	if err != nil {
		return nil, fmt.Errorf("batch at %d: %w", h.pos, err)
	}
	return recs, nil
}
