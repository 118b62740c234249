// Package dir stores one directory: a map from names to (inode, type) that
// stays fast at millions of entries and can be listed in pages with stable
// cookies.
//
// A small directory lives inside its inode: Dir.Encode holds the entries
// themselves while they fit in inlineMax bytes. A larger one is a linear hash
// table (Litwin 1980) in 4 KiB metadata blocks of a sparse region that the
// caller gives the directory; Dir.Encode then holds the table's parameters
// (level, split pointer, overflow count, entry and byte counts).
//
// The package does no I/O and reads no clock: every block goes through the
// caller's Blocks, which logs and caches them. A Dir is not safe for
// concurrent use; the caller holds the directory's lock. After a mutating
// method returns an error, the Dir and the blocks written so far must be
// thrown away (the caller aborts its transaction and decodes the root again).
//
// # Hashing and cookies
//
// h = xxhash64(name) is part of the format forever. The bucket of h is its
// low bits under the usual linear-hashing rule: with level L and split
// pointer s, b = h mod 2^L, and b = h mod 2^(L+1) if b < s. There are
// N = 2^L + s buckets; bucket b is block b.
//
// The readdir cookie of an entry is cookieOf(h) = reverse64(h)>>1 | 1: the
// bit-reversal of h cut to 63 bits (so it is a positive off_t, as telldir
// and the kernel expect) with the low bit set (so it is never 0, which means
// "from the start"). The low bits of h are the high bits of the cookie, so
// each bucket holds one contiguous range of cookies, and a split cuts a range
// in two. List returns entries in global cookie order, whatever the table's
// shape; so an entry present during a whole listing is returned exactly once
// even if inserts, removes, splits and merges happen between pages. Names
// whose hashes agree in their low 62 bits share a cookie; List never splits
// such a group across pages, and lookups compare names, so full 64-bit
// collisions work.
//
// # Growth, overflow and shrinking
//
// After an insert, if the average bucket holds more than 3/4 of a block's
// record space, one bucket (the one at the split pointer) is split. A bucket
// that fills before its turn chains into overflow blocks. Overflow blocks are
// numbered densely: overflow k (0 <= k < the root's overflow count) is block
// OverflowBase+k. Freeing one moves the last overflow block into its place
// and fixes the two neighbours that point at it, so the blocks in use are
// always exactly [0, N) and [OverflowBase, OverflowBase+overflows): the root
// alone says what is in use, and there is no free list to trust.
//
// A remove frees an overflow block that becomes empty; when the load would
// stay below 3/8 of a block per bucket with one bucket fewer, the last
// bucket is merged into its buddy (the split is undone); and a
// one-bucket table whose entries fit in half of inlineMax goes back inline.
// Every operation reads and writes O(1) blocks (a chain or two, plus up to
// three blocks per overflow block moved).
//
// A block entering use is always written in full, so stale bytes of an
// earlier owner of that block never show.
package dir

import (
	"errors"
	"fmt"
	"iter"
	"math/bits"
	"strings"

	"github.com/cespare/xxhash/v2"
)

const (
	// BlockBytes is the payload of one directory block that this package
	// owns; the file system keeps its own header in the rest of each 4 KiB
	// block.
	BlockBytes = 4032
	// MaxBlocks bounds block numbers: a directory's blocks are numbered
	// 0 .. MaxBlocks-1 (a sparse region of the volume).
	MaxBlocks = 1 << 26 // = layout.DirBlocksMax: a directory region is 2^38 bytes
	// NameBytesMax bounds the length of a name in bytes.
	NameBytesMax = 255
	// InlineBytesMin is the smallest inlineMax New and Decode accept: the
	// hashed root must fit.
	InlineBytesMin = 64

	// BucketsMax bounds the number of buckets: bucket b is block b.
	BucketsMax = MaxBlocks / 2
	// OverflowBase is the block number of overflow block 0.
	OverflowBase = MaxBlocks / 2
	// OverflowsMax bounds the number of overflow blocks.
	OverflowsMax = MaxBlocks - OverflowBase
)

// Compile-time relations between the limits.
const (
	_ = uint(BlockBytes - blockHeaderBytes - recordBytesMax) // a record fits a block
	_ = uint(InlineBytesMin - rootHashedBytes)               // the hashed root fits inline
	_ = uint(1<<16 - 1 - BlockBytes)                         // used and count fit in 16 bits
	_ = uint(1<<32 - 1 - MaxBlocks)                          // block numbers fit in 32 bits
	_ = uint(62 - bitsLevelMax)                              // bucket bits are cookie bits
)

// bitsLevelMax is the largest level: 2^level buckets <= BucketsMax.
const bitsLevelMax = 26

// Sentinel errors. Each is returned wrapped with context; test with errors.Is.
var (
	ErrExists   = errors.New("dir: name exists")
	ErrNotFound = errors.New("dir: name not found")
	ErrBadName  = errors.New("dir: bad name")
	ErrFull     = errors.New("dir: directory full")
	ErrCorrupt  = errors.New("dir: corrupt")
)

// Entry is one name of a directory.
type Entry struct {
	Name   string
	Ino    uint64
	Type   uint8  // opaque to this package
	Cookie uint64 // set by Lookup, Remove and List; ignored by Insert
}

// Blocks is the directory's region of the volume, in BlockBytes payloads.
type Blocks interface {
	// Read returns the payload of block n (len BlockBytes), zeros if never
	// written. It is valid only until the next call; copy before modifying.
	Read(n uint64) ([]byte, error)
	// Write replaces block n's payload. p is only valid during the call.
	Write(n uint64, p []byte) error
}

// Dir is a directory's root state, stored by the caller in the directory's
// inode (Encode, Decode).
type Dir struct {
	inlineMax int
	hash      func(string) uint64 // xxhash64; tests swap it to force collisions

	hashed bool
	inline []rec // while !hashed: sorted by (cookie, name)

	// While hashed. Invariant: 2^level + split <= BucketsMax, split < 2^level.
	level     uint8
	split     uint32
	overflows uint32 // overflow blocks in use: OverflowBase .. OverflowBase+overflows-1

	count uint64 // entries
	bytes uint64 // sum of the entries' record sizes

	buf []byte // scratch block for writes
}

// New returns an empty directory whose root encodes in at most inlineMax
// bytes. It panics if inlineMax is outside [InlineBytesMin, InlineBytesMax]
// (a programming error).
func New(inlineMax int) *Dir {
	if inlineMax < InlineBytesMin || inlineMax > InlineBytesMax {
		panic(fmt.Sprintf("dir: inlineMax %d outside [%d, %d]", inlineMax, InlineBytesMin, InlineBytesMax))
	}
	return &Dir{inlineMax: inlineMax, hash: xxhash.Sum64String}
}

// Len returns the number of entries.
func (d *Dir) Len() uint64 { return d.count }

// buckets returns N, the number of buckets (0 while inline).
func (d *Dir) buckets() uint32 {
	if !d.hashed {
		return 0
	}
	return 1<<d.level + d.split
}

// InUse yields the block numbers the directory uses now, in increasing
// order: buckets [0, N) and overflow blocks [OverflowBase, OverflowBase+k).
// Every other block of the region is free and may hold stale bytes.
func (d *Dir) InUse() iter.Seq[uint64] {
	n, k := uint64(d.buckets()), uint64(d.overflows)
	return func(yield func(uint64) bool) {
		for i := uint64(0); i < n; i++ {
			if !yield(i) {
				return
			}
		}
		for i := uint64(0); i < k; i++ {
			if !yield(OverflowBase + i) {
				return
			}
		}
	}
}

// BlocksInUse returns how many blocks InUse yields.
func (d *Dir) BlocksInUse() uint64 { return uint64(d.buckets()) + uint64(d.overflows) }

// cookieOf maps a hash to its readdir cookie (see the package doc).
func cookieOf(h uint64) uint64 { return bits.Reverse64(h)>>1 | 1 }

// cookieEnd is one past the largest cookie.
const cookieEnd = 1 << 63

// checkName returns ErrBadName if name can never be stored.
func checkName(name string) error {
	switch {
	case name == "", name == ".", name == "..":
		return fmt.Errorf("%q: %w", name, ErrBadName)
	case len(name) > NameBytesMax:
		return fmt.Errorf("name of %d bytes > %d: %w", len(name), NameBytesMax, ErrBadName)
	case strings.IndexByte(name, '/') >= 0 || strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("%q contains '/' or NUL: %w", name, ErrBadName)
	}
	return nil
}

// bucketOf returns the bucket of hash h (hashed mode).
func (d *Dir) bucketOf(h uint64) uint32 {
	b := uint32(h & (1<<d.level - 1))
	if b < d.split {
		b = uint32(h & (1<<(d.level+1) - 1))
	}
	return b
}

// bucketOfCookie returns the bucket whose cookie range holds c.
func (d *Dir) bucketOfCookie(c uint64) uint32 { return d.bucketOf(bits.Reverse64(c << 1)) }

// cookieRangeEnd returns one past the last cookie of bucket b's range.
func (d *Dir) cookieRangeEnd(b uint32) uint64 {
	depth := uint(d.level)
	if b < d.split || b >= 1<<d.level {
		depth++
	}
	prefix := bits.Reverse64(uint64(b)) >> (64 - depth) // 0 when depth is 0
	return (prefix + 1) << (63 - depth)
}

func (r rec) entry() Entry {
	return Entry{Name: r.name, Ino: r.ino, Type: r.typ, Cookie: cookieOf(r.h)}
}

// Lookup returns the entry called name. It returns ErrBadName for a name
// that can never be stored and ErrCorrupt for a damaged block.
func (d *Dir) Lookup(b Blocks, name string) (Entry, bool, error) {
	if err := checkName(name); err != nil {
		return Entry{}, false, err
	}
	h := d.hash(name)
	if !d.hashed {
		i, ok := d.inlineFind(h, name)
		if !ok {
			return Entry{}, false, nil
		}
		return d.inline[i].entry(), true, nil
	}
	var found rec
	var ok bool
	err := d.walk(b, d.bucketOf(h), func(_ uint32, hd blockHeader, p []byte) bool {
		if off, n := findRec(p, hd, h, name); n > 0 {
			found, ok = recAt(p, off), true
			return false
		}
		return true
	})
	if err != nil || !ok {
		return Entry{}, false, err
	}
	return found.entry(), true, nil
}

// Insert adds e (its Cookie is ignored). It returns ErrBadName, ErrExists,
// ErrFull when the region has no block left, or ErrCorrupt.
func (d *Dir) Insert(b Blocks, e Entry) error {
	if err := checkName(e.Name); err != nil {
		return err
	}
	r := rec{h: d.hash(e.Name), ino: e.Ino, typ: e.Type, name: e.Name}
	if !d.hashed {
		return d.inlineInsert(b, r)
	}
	if err := d.hashedInsert(b, r); err != nil {
		return err
	}
	return d.maybeSplit(b)
}

// Remove deletes the entry called name and returns it. It returns
// ErrBadName, ErrNotFound or ErrCorrupt.
func (d *Dir) Remove(b Blocks, name string) (Entry, error) {
	if err := checkName(name); err != nil {
		return Entry{}, err
	}
	h := d.hash(name)
	if !d.hashed {
		i, ok := d.inlineFind(h, name)
		if !ok {
			return Entry{}, fmt.Errorf("remove %q: %w", name, ErrNotFound)
		}
		r := d.inline[i]
		d.inline = append(d.inline[:i], d.inline[i+1:]...)
		d.count--
		d.bytes -= uint64(r.size())
		return r.entry(), nil
	}
	r, err := d.hashedRemove(b, h, name)
	if err != nil {
		return Entry{}, err
	}
	if err := d.maybeShrink(b); err != nil {
		return Entry{}, err
	}
	return r.entry(), nil
}

// List returns the entries with Cookie > after, in cookie order: at most max
// of them (max < 1 counts as 1), except that a group of entries sharing one
// cookie is never split, so a page may exceed max by the rest of a group.
// done reports that no entry with a larger cookie exists. after == 0 starts
// from the beginning; 0 is never a cookie. An entry present during a whole
// listing is returned exactly once, whatever happens between calls.
func (d *Dir) List(b Blocks, after uint64, max int) (ents []Entry, done bool, err error) {
	if max < 1 {
		max = 1
	}
	if !d.hashed {
		ents, done = pageOf(d.inline, after, max, nil)
		return ents, done, nil
	}
	var recs []rec
	for pos := after + 1; pos != 0 && pos < cookieEnd; {
		bk := d.bucketOfCookie(pos)
		recs = recs[:0]
		err := d.walk(b, bk, func(_ uint32, hd blockHeader, p []byte) bool {
			recs = appendRecs(recs, p, hd, after)
			return true
		})
		if err != nil {
			return nil, false, err
		}
		sortRecs(recs)
		var full bool
		ents, full = pageOf(recs, after, max, ents)
		if !full {
			return ents, false, nil
		}
		// Go on even with a full page, to learn whether any entry follows:
		// pageOf stops at the first one.
		pos = d.cookieRangeEnd(bk)
	}
	return ents, true, nil
}

// pageOf appends to ents the records of recs (sorted) with cookie > after
// until ents holds max entries and the last cookie's group is complete. It
// reports whether recs was used up.
func pageOf(recs []rec, after uint64, max int, ents []Entry) ([]Entry, bool) {
	for _, r := range recs {
		c := cookieOf(r.h)
		if c <= after {
			continue
		}
		if len(ents) >= max && c != ents[len(ents)-1].Cookie {
			return ents, false
		}
		ents = append(ents, r.entry())
	}
	return ents, true
}
