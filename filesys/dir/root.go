package dir

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/cespare/xxhash/v2"
)

// Root, as Encode writes it into the inode. Little-endian. Two kinds:
//
// Inline (kind 1): the entries themselves, sorted by (cookie, name).
//
//	+---------+------+-------+------------------------------+
//	| version | kind | count | count records (see block.go) |
//	| 1       | 1    | 2     |                              |
//	+---------+------+-------+------------------------------+
//
// Hashed (kind 2): the linear hash table's parameters; 32 bytes.
//
//	+---------+------+-------+----------+-------+-----------+----------+-------+-------+
//	| version | kind | level | reserved | split | overflows | reserved | count | bytes |
//	| 1       | 1    | 1     | 1 (=0)   | 4     | 4         | 4 (=0)   | 8     | 8     |
//	+---------+------+-------+----------+-------+-----------+----------+-------+-------+
//
// level and split give N = 2^level + split buckets (blocks 0..N-1);
// overflows is the number of overflow blocks (OverflowBase..+overflows-1).
// count is the number of entries and bytes the sum of their record sizes.
// Part of format version 1: never edit; add a version instead.
const (
	rootInlineHeaderBytes = 4
	rootHashedBytes       = 32

	kindInline = 1
	kindHashed = 2

	// InlineBytesMax bounds inlineMax: the inline count is 16 bits.
	InlineBytesMax = 1 << 16
)

// Encode returns the root, at most inlineMax bytes long.
func (d *Dir) Encode() []byte {
	if !d.hashed {
		b := make([]byte, rootInlineHeaderBytes, rootInlineHeaderBytes+int(d.bytes))
		b[0], b[1] = formatVersion, kindInline
		binary.LittleEndian.PutUint16(b[2:], uint16(len(d.inline)))
		for _, r := range d.inline {
			b = appendRec(b, r)
		}
		return b
	}
	b := make([]byte, rootHashedBytes)
	b[0], b[1], b[2] = formatVersion, kindHashed, d.level
	binary.LittleEndian.PutUint32(b[4:], d.split)
	binary.LittleEndian.PutUint32(b[8:], d.overflows)
	binary.LittleEndian.PutUint64(b[16:], d.count)
	binary.LittleEndian.PutUint64(b[24:], d.bytes)
	return b
}

// Decode parses a root made by Encode with the same inlineMax. It returns
// ErrCorrupt for anything Encode cannot have made. It panics if inlineMax is
// outside [InlineBytesMin, InlineBytesMax] (a programming error).
func Decode(b []byte, inlineMax int) (*Dir, error) {
	return decode(b, inlineMax, xxhash.Sum64String)
}

func decode(b []byte, inlineMax int, hash func(string) uint64) (*Dir, error) {
	d := New(inlineMax)
	d.hash = hash
	if len(b) > inlineMax {
		return nil, fmt.Errorf("root of %d bytes > %d: %w", len(b), inlineMax, ErrCorrupt)
	}
	if len(b) < 2 || b[0] != formatVersion {
		return nil, fmt.Errorf("root: no version %d header: %w", formatVersion, ErrCorrupt)
	}
	switch b[1] {
	case kindInline:
		return d, d.decodeInline(b)
	case kindHashed:
		return d, d.decodeHashed(b)
	}
	return nil, fmt.Errorf("root kind %d: %w", b[1], ErrCorrupt)
}

func (d *Dir) decodeInline(b []byte) error {
	if len(b) < rootInlineHeaderBytes {
		return fmt.Errorf("inline root of %d bytes: %w", len(b), ErrCorrupt)
	}
	count := int(binary.LittleEndian.Uint16(b[2:]))
	p := b[rootInlineHeaderBytes:]
	if err := parseRecs(p, count); err != nil {
		return fmt.Errorf("inline root: %w", err)
	}
	d.inline = make([]rec, 0, count)
	for off := 0; off < len(p); off += recSizeAt(p, off) {
		r := recAt(p, off)
		if h := d.hash(r.name); h != r.h {
			return fmt.Errorf("inline root: %q has hash %#x, not %#x: %w", r.name, r.h, h, ErrCorrupt)
		}
		if n := len(d.inline); n > 0 && !recLess(d.inline[n-1], r) {
			return fmt.Errorf("inline root: %q not after %q: %w", r.name, d.inline[n-1].name, ErrCorrupt)
		}
		d.inline = append(d.inline, r)
	}
	d.count, d.bytes = uint64(count), uint64(len(p))
	return nil
}

func (d *Dir) decodeHashed(b []byte) error {
	if len(b) != rootHashedBytes {
		return fmt.Errorf("hashed root of %d bytes, not %d: %w", len(b), rootHashedBytes, ErrCorrupt)
	}
	d.hashed = true
	d.level = b[2]
	d.split = binary.LittleEndian.Uint32(b[4:])
	d.overflows = binary.LittleEndian.Uint32(b[8:])
	d.count = binary.LittleEndian.Uint64(b[16:])
	d.bytes = binary.LittleEndian.Uint64(b[24:])
	if b[3] != 0 || binary.LittleEndian.Uint32(b[12:]) != 0 {
		return fmt.Errorf("hashed root: reserved bytes not zero: %w", ErrCorrupt)
	}
	return d.checkParams()
}

// checkParams checks the hashed root's parameters.
func (d *Dir) checkParams() error {
	switch {
	case d.level > bitsLevelMax || d.split >= 1<<d.level || d.buckets() > BucketsMax:
		return fmt.Errorf("hashed root: level %d split %d: %w", d.level, d.split, ErrCorrupt)
	case d.overflows > OverflowsMax:
		return fmt.Errorf("hashed root: %d overflow blocks > %d: %w", d.overflows, OverflowsMax, ErrCorrupt)
	case d.bytes/(recordHeaderBytes+1) < d.count || d.bytes/recordBytesMax > d.count:
		return fmt.Errorf("hashed root: %d bytes for %d entries: %w", d.bytes, d.count, ErrCorrupt)
	case d.bytes > d.BlocksInUse()*recordSpace:
		return fmt.Errorf("hashed root: %d bytes in %d blocks: %w", d.bytes, d.BlocksInUse(), ErrCorrupt)
	}
	return nil
}

// recLess orders records as List returns them: by cookie, then name.
func recLess(a, b rec) bool {
	ca, cb := cookieOf(a.h), cookieOf(b.h)
	return ca < cb || ca == cb && a.name < b.name
}

// inlineFind returns where the record (h, name) is or would go in d.inline.
func (d *Dir) inlineFind(h uint64, name string) (int, bool) {
	key := rec{h: h, name: name}
	i := sort.Search(len(d.inline), func(i int) bool { return !recLess(d.inline[i], key) })
	return i, i < len(d.inline) && d.inline[i].h == h && d.inline[i].name == name
}

func (d *Dir) inlineInsert(b Blocks, r rec) error {
	i, ok := d.inlineFind(r.h, r.name)
	if ok {
		return fmt.Errorf("insert %q: %w", r.name, ErrExists)
	}
	if rootInlineHeaderBytes+int(d.bytes)+r.size() > d.inlineMax {
		recs := append(d.inline[:i:i], r)
		recs = append(recs, d.inline[i:]...)
		if err := d.toHashed(b, recs); err != nil {
			return err
		}
		return d.maybeSplit(b)
	}
	d.inline = append(d.inline, rec{})
	copy(d.inline[i+1:], d.inline[i:])
	d.inline[i] = r
	d.count++
	d.bytes += uint64(r.size())
	return nil
}

// checkInline checks the inline entries (for Check).
func (d *Dir) checkInline() error {
	var bytes uint64
	for i, r := range d.inline {
		if err := checkName(r.name); err != nil {
			return fmt.Errorf("inline entry %d: %v: %w", i, err, ErrCorrupt)
		}
		if h := d.hash(r.name); h != r.h {
			return fmt.Errorf("inline %q: hash %#x, not %#x: %w", r.name, r.h, h, ErrCorrupt)
		}
		if i > 0 && !recLess(d.inline[i-1], r) {
			return fmt.Errorf("inline %q not after %q: %w", r.name, d.inline[i-1].name, ErrCorrupt)
		}
		bytes += uint64(r.size())
	}
	switch {
	case uint64(len(d.inline)) != d.count || bytes != d.bytes:
		return fmt.Errorf("inline: %d entries of %d bytes, root says %d of %d: %w",
			len(d.inline), bytes, d.count, d.bytes, ErrCorrupt)
	case rootInlineHeaderBytes+int(bytes) > d.inlineMax:
		return fmt.Errorf("inline: %d bytes > %d: %w", rootInlineHeaderBytes+bytes, d.inlineMax, ErrCorrupt)
	case d.overflows != 0 || d.level != 0 || d.split != 0:
		return fmt.Errorf("inline root with table parameters: %w", ErrCorrupt)
	}
	return nil
}
