package store

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"golang.org/x/sys/unix"

	"github.com/plumeria-fs/plumeria/internal/limits"
)

// Get returns the exact key's entry and data: nil for a tombstone, the
// payload (RefBytes) for a ref (Entry.Ref). The data, or payload, is
// checked against its crc on every read. Errors: ErrNotFound;
// ErrCorrupt (with the index's Entry, so the caller can repair that
// version; the bad bytes are never returned); ErrClosed; I/O errors.
func (s *Store) Get(key Key) ([]byte, Entry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return nil, Entry{}, ErrClosed
	}
	e, ok, err := getEntry(s.db, key)
	if err != nil {
		return nil, Entry{}, err
	}
	if !ok {
		return nil, Entry{}, fmt.Errorf("get %v: %w", key, ErrNotFound)
	}
	return s.readEntryLocked(key, e)
}

// Meta is what the index holds for a key, without its data.
type Meta struct {
	Present   bool
	Seq       uint64
	Tombstone bool
	Ref       bool // a ref (Entry.Ref)
}

// Metas looks keys up in the index only: their data is neither read nor
// checked (Get does both). One iterator serves all of them, so many keys
// close together (a replicated chunk's blocks) cost little more than one.
func (s *Store) Metas(keys []Key) ([]Meta, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return nil, ErrClosed
	}
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return compareKeys(keys[a], keys[b]) })
	var sorted []Key
	pos := make([]int, len(keys)) // keys[i] is sorted[pos[i]]
	for _, i := range order {
		if n := len(sorted); n == 0 || sorted[n-1] != keys[i] {
			sorted = append(sorted, keys[i])
		}
		pos[i] = len(sorted) - 1
	}
	metas := make([]Meta, len(sorted))
	err := lookupEntries(s.db, sorted, func(j int, e entry) error {
		metas[j] = Meta{Present: true, Seq: e.seq, Tombstone: e.tomb, Ref: e.ref}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("index lookup of %d keys: %w", len(keys), err)
	}
	out := make([]Meta, len(keys))
	for i := range keys {
		out[i] = metas[pos[i]]
	}
	return out, nil
}

// Latest returns the entry with the greatest Gen <= maxGen for (vol,
// block), and its data as Get does (nil for a tombstone, the payload for
// a ref). Errors as Get.
func (s *Store) Latest(vol, block, maxGen uint64) ([]byte, Entry, error) {
	return s.LatestAt(vol, block, Reader{Gen: maxGen})
}

// LatestAt returns the entry of (vol, block) that r reads, and its data
// as Get does (nil for a tombstone, the payload for a ref). Errors as Get.
func (s *Store) LatestAt(vol, block uint64, r Reader) ([]byte, Entry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return nil, Entry{}, ErrClosed
	}
	lo := entryKey(Key{Vol: vol, Block: block})
	hi := append(entryKey(Key{Vol: vol, Block: block, Gen: r.Gen}), 0)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, Entry{}, err
	}
	k, e, found, err := lastEntry(it, r)
	if err != nil {
		return nil, Entry{}, fmt.Errorf("latest vol %d block %d %v: %w", vol, block, r, err)
	}
	if !found {
		return nil, Entry{}, fmt.Errorf("latest vol %d block %d %v: %w", vol, block, r, ErrNotFound)
	}
	return s.readEntryLocked(k, e)
}

// lastEntry decodes the last entry of it that r accepts, and closes it.
func lastEntry(it *pebble.Iterator, r Reader) (Key, entry, bool, error) {
	for ok := it.Last(); ok; ok = it.Prev() {
		k, kerr := decodeEntryKey(it.Key())
		if kerr == nil && !r.accepts(k.Gen) {
			continue
		}
		e, verr := decodeEntry(it.Value())
		if err := errors.Join(kerr, verr, it.Close()); err != nil {
			return Key{}, entry{}, false, err
		}
		return k, e, true, nil
	}
	return Key{}, entry{}, false, it.Close()
}

// readEntryLocked returns the data (or ref payload) of entry e of key k,
// checked. The caller holds s.mu (R).
func (s *Store) readEntryLocked(k Key, e entry) ([]byte, Entry, error) {
	ent := entryOf(k, e)
	if e.tomb {
		return nil, ent, nil
	}
	seg := s.mu.segs[e.seg]
	if seg == nil {
		return nil, ent, s.corrupt(k, e, "segment file missing")
	}
	rec := make([]byte, e.len)
	if _, err := seg.f.ReadAt(rec, int64(e.off)); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, ent, s.corrupt(k, e, "record past end of segment")
		}
		return nil, ent, fmt.Errorf("get %v: read segment %d at %d: %w", k, e.seg, e.off, err)
	}
	data, err := s.checkRecord(k, e, rec)
	return data, ent, err
}

// RangeBlocksMax bounds a LatestRange: the blocks of the largest chunk.
const RangeBlocksMax = limits.ChunkBytesMax / limits.BlockBytes

// checkRecord checks that rec, read from where entry e of key k says, is
// that put (or ref) record whole, and returns its data (or payload).
func (s *Store) checkRecord(k Key, e entry, rec []byte) ([]byte, error) {
	if len(rec) < headerBytes {
		return nil, s.corrupt(k, e, errShort)
	}
	if err := s.checkSplit(k, e, rec[:headerBytes], rec[headerBytes:]); err != nil {
		return nil, err
	}
	return rec[headerBytes:], nil
}

// Block is one block of a LatestRange: its newest entry at or below the
// generation asked for, and its data (nil for a tombstone or a ref) or the
// error Latest would give for it (ErrCorrupt with Entry set: repair that
// version). InDst: the data was read into LatestRange's dst, at the
// block's place (Data is that part of dst). A ref (Entry.Ref) has its
// payload in Ref and no data: its block is neither zeros nor in dst.
type Block struct {
	Entry Entry
	Data  []byte
	Ref   []byte // Entry.Ref only: the payload, RefBytes (nil with Err)
	Err   error
	InDst bool
}

// set fills b with what readEntryLocked or checkRecord gave for entry.
func (b *Block) set(data []byte, e Entry, err error) {
	b.Entry, b.Err = e, err
	if e.Ref {
		b.Ref = data
	} else {
		b.Data = data
	}
}

// found is an index entry and its key.
type found struct {
	k Key
	e entry
}

// LatestRange is Latest for every block of vol in [blockLo, blockHi) that
// has an entry at or below maxGen, in block order; blocks without one are
// left out. It walks the index once and reads records that lie next to
// each other in a segment (a batch's blocks do) with one read, so a chunk
// costs a few system calls instead of two per block. At most
// RangeBlocksMax blocks.
//
// dst, if not nil, holds (blockHi-blockLo) blocks: a run of put records is
// then read with one preadv, each record's data straight into its block's
// place in dst and its header aside (Block.InDst), instead of into a new
// buffer the caller copies from. The bytes of a block whose record fails
// its checks (Err set) are undefined in dst. Places of blocks not read
// into dst are not written, except when a run could be read only in part
// (it passes its segment's end): its blocks then come back as without
// dst, over whatever the part read left in their places.
func (s *Store) LatestRange(vol, blockLo, blockHi, maxGen uint64, dst []byte) ([]Block, error) {
	return s.LatestRangeAt(vol, blockLo, blockHi, Reader{Gen: maxGen}, dst)
}

// LatestRangeAt is LatestRange for reader r: each block's entry is the
// one r reads (LatestAt).
func (s *Store) LatestRangeAt(vol, blockLo, blockHi uint64, r Reader, dst []byte) ([]Block, error) {
	if blockHi < blockLo || blockHi-blockLo > RangeBlocksMax {
		return nil, fmt.Errorf("range [%d, %d) of more than %d blocks: %w", blockLo, blockHi, RangeBlocksMax, ErrInvalid)
	}
	if dst != nil && uint64(len(dst)) != (blockHi-blockLo)*limits.BlockBytes {
		return nil, fmt.Errorf("range [%d, %d) read into %d bytes: %w", blockLo, blockHi, len(dst), ErrInvalid)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return nil, ErrClosed
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(Key{Vol: vol, Block: blockLo}), UpperBound: entryKey(Key{Vol: vol, Block: blockHi})})
	if err != nil {
		return nil, err
	}
	var ents []found
	for ok := it.First(); ok; ok = it.Next() {
		k, kerr := decodeEntryKey(it.Key())
		e, verr := decodeEntry(it.Value())
		if err := errors.Join(kerr, verr); err != nil {
			it.Close()
			return nil, fmt.Errorf("latest vol %d blocks [%d, %d): %w", vol, blockLo, blockHi, err)
		}
		if !r.accepts(k.Gen) {
			continue
		}
		if n := len(ents); n > 0 && ents[n-1].k.Block == k.Block {
			ents[n-1] = found{k, e} // a newer generation of the same block
			continue
		}
		ents = append(ents, found{k, e})
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("latest vol %d blocks [%d, %d): %w", vol, blockLo, blockHi, err)
	}
	out := make([]Block, len(ents))
	for i := 0; i < len(ents); {
		f := ents[i]
		if f.e.tomb {
			out[i].Entry = entryOf(f.k, f.e)
			i++
			continue
		}
		// The run of records of the same kind (puts or refs) that follow
		// this one in its segment.
		j, end := i+1, f.e.off+uint64(f.e.len)
		for j < len(ents) && !ents[j].e.tomb && ents[j].e.ref == f.e.ref && ents[j].e.seg == f.e.seg && ents[j].e.off == end {
			end += uint64(ents[j].e.len)
			j++
		}
		seg := s.mu.segs[f.e.seg]
		if dst != nil && seg != nil && !f.e.ref {
			done, err := s.readRunInto(seg, ents[i:j], out[i:j], dst, blockLo)
			if err != nil {
				return nil, fmt.Errorf("latest vol %d block %d: read segment %d at %d: %w", vol, f.k.Block, f.e.seg, f.e.off, err)
			}
			if done {
				i = j
				continue
			}
		}
		var buf []byte
		if seg != nil {
			buf = make([]byte, end-f.e.off)
			if _, err := seg.f.ReadAt(buf, int64(f.e.off)); err != nil {
				if !errors.Is(err, io.EOF) {
					return nil, fmt.Errorf("latest vol %d block %d: read segment %d at %d: %w", vol, f.k.Block, f.e.seg, f.e.off, err)
				}
				buf = nil // the run passes the segment's end: record by record
			}
		}
		for ; i < j; i++ {
			g := ents[i]
			if buf == nil {
				out[i].set(s.readEntryLocked(g.k, g.e))
				continue
			}
			at := g.e.off - f.e.off
			data, err := s.checkRecord(g.k, g.e, buf[at:at+uint64(g.e.len):at+uint64(g.e.len)])
			out[i].set(data, entryOf(g.k, g.e), err)
		}
	}
	return out, nil
}

// readRunInto reads a run of put records lying side by side in seg with
// preadv: each record's header into scratch, its data into its block's
// place in dst (block blockLo at dst[0]), and checks each as checkRecord
// does, filling out. It returns false when the run holds other records
// than puts (moves) or seg is not a plain file (nothing read), or when the
// run passes the segment's end (the caller then reads it as before).
func (s *Store) readRunInto(seg *segment, run []found, out []Block, dst []byte, blockLo uint64) (bool, error) {
	f, ok := seg.f.(interface{ Fd() uintptr })
	if !ok {
		return false, nil
	}
	for _, r := range run {
		if r.e.len != putRecordBytes || r.e.ref {
			return false, nil
		}
	}
	const bs = limits.BlockBytes
	place := func(k Key) []byte { at := (k.Block - blockLo) * bs; return dst[at : at+bs : at+bs] }
	hdrs := make([]byte, len(run)*headerBytes)
	hdr := func(i int) []byte { return hdrs[i*headerBytes : (i+1)*headerBytes] }
	iovs := make([][]byte, 0, 2*len(run))
	for i, r := range run {
		iovs = append(iovs, hdr(i), place(r.k))
	}
	off := int64(run[0].e.off)
	for len(iovs) > 0 {
		n, err := unix.Preadv(int(f.Fd()), iovs[:min(len(iovs), iovMax)], off)
		if err != nil {
			return false, err
		}
		if n == 0 {
			return false, nil // past the end: the caller reads record by record
		}
		off += int64(n)
		iovs = skipIovs(iovs, n)
	}
	for i, r := range run {
		out[i] = Block{Entry: entryOf(r.k, r.e), Data: place(r.k), InDst: true}
		if out[i].Err = s.checkSplit(r.k, r.e, hdr(i), out[i].Data); out[i].Err != nil {
			out[i].Data, out[i].InDst = nil, false
		}
	}
	return true, nil
}

// iovMax is the most buffers one preadv takes (Linux's IOV_MAX).
const iovMax = 1024

// skipIovs drops the first n bytes of iovs.
func skipIovs(iovs [][]byte, n int) [][]byte {
	for n > 0 && len(iovs) > 0 {
		if n < len(iovs[0]) {
			iovs[0] = iovs[0][n:]
			return iovs
		}
		n -= len(iovs[0])
		iovs = iovs[1:]
	}
	return iovs
}

// checkSplit is checkRecord for a put (or ref) record read as its header
// and its data apart.
func (s *Store) checkSplit(k Key, e entry, hdr, data []byte) error {
	h, err := decodeHeader(hdr)
	if err != nil {
		return s.corrupt(k, e, err)
	}
	want := kindPut
	if e.ref {
		want = kindRef
	}
	if h.kind != want || h.key() != k || h.seq != e.seq || headerBytes+int(h.dlen) != int(e.len) || len(data) != int(h.dlen) {
		return s.corrupt(k, e, fmt.Sprintf("record kind %d key %v seq %d disagrees with index", h.kind, h.key(), h.seq))
	}
	if !dataValidSplit(hdr, data, h) {
		return s.corrupt(k, e, errDataCRC)
	}
	return nil
}

func (s *Store) corrupt(k Key, e entry, why any) error {
	s.stats.corruptReads.Add(1)
	err := fmt.Errorf("vol %d block %d gen %d: segment %d offset %d: %v: %w",
		k.Vol, k.Block, k.Gen, e.seg, e.off, why, ErrCorrupt)
	s.log.Warn("corrupt block", "err", err)
	return err
}

// Scan visits the index entries (no data is read) of vol with
// blockLo <= Block < blockHi in key order (Block, then Gen, ascending),
// until fn returns false. fn runs with no lock held and may call the store;
// it sees each entry as of some moment during the Scan.
func (s *Store) Scan(vol, blockLo, blockHi uint64, fn func(Entry) bool) error {
	return s.scanEntries(vol, blockLo, blockHi, func(k Key, e entry) bool {
		return fn(entryOf(k, e))
	})
}

// scanEntries is Scan with the index's whole entries.
func (s *Store) scanEntries(vol, blockLo, blockHi uint64, fn func(Key, entry) bool) error {
	if blockLo >= blockHi {
		return nil
	}
	lo := entryKey(Key{Vol: vol, Block: blockLo})
	hi := entryKey(Key{Vol: vol, Block: blockHi})
	for lo != nil {
		ents, next, err := s.scanChunk(lo, hi)
		if err != nil {
			return fmt.Errorf("scan vol %d blocks [%d, %d): %w", vol, blockLo, blockHi, err)
		}
		for _, f := range ents {
			if !fn(f.k, f.e) {
				return nil
			}
		}
		lo = next
	}
	return nil
}

// scanChunk reads up to scanEntriesMax entries in [lo, hi) and returns the
// key to continue from, or nil at the end.
func (s *Store) scanChunk(lo, hi []byte) ([]found, []byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return nil, nil, ErrClosed
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, nil, err
	}
	var ents []found
	var next []byte
	for it.First(); it.Valid(); it.Next() {
		if len(ents) == scanEntriesMax {
			next = append([]byte(nil), it.Key()...)
			break
		}
		k, kerr := decodeEntryKey(it.Key())
		e, verr := decodeEntry(it.Value())
		if err := errors.Join(kerr, verr); err != nil {
			it.Close()
			return nil, nil, err
		}
		ents = append(ents, found{k, e})
	}
	return ents, next, it.Close()
}

// Chunks calls fn, ascending, with each chunk c of vol (blocks [c*per,
// (c+1)*per)) that has at least one index entry: one seek per chunk, not
// a visit of every block (a brick counts its chunks every few seconds, and
// a 1 GiB volume holds 262,144 blocks but 1,024 chunks of 1 MiB). fn runs
// with no lock held.
func (s *Store) Chunks(vol, per uint64, fn func(chunk uint64)) error {
	if per == 0 {
		return fmt.Errorf("chunks of vol %d: chunk of 0 blocks", vol)
	}
	from := uint64(0)
	for {
		found, next, more, err := s.chunksPiece(vol, per, from)
		if err != nil {
			return fmt.Errorf("chunks of vol %d: %w", vol, err)
		}
		for _, c := range found {
			fn(c)
		}
		if !more {
			return nil
		}
		from = next
	}
}

// chunksPiece finds up to scanEntriesMax chunks from chunk from on under
// one hold of the store's lock; more reports whether to go on from next.
func (s *Store) chunksPiece(vol, per, from uint64) (found []uint64, next uint64, more bool, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return nil, 0, false, ErrClosed
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(Key{Vol: vol}), UpperBound: entryKey(Key{Vol: vol, Block: ^uint64(0)})})
	if err != nil {
		return nil, 0, false, err
	}
	last := ^uint64(0) / per // the chunk holding the last block
	c := from
	for ok := it.SeekGE(entryKey(Key{Vol: vol, Block: c * per})); ok; ok = it.SeekGE(entryKey(Key{Vol: vol, Block: c * per})) {
		k, kerr := decodeEntryKey(it.Key())
		if kerr != nil {
			it.Close()
			return nil, 0, false, kerr
		}
		found = append(found, k.Block/per)
		if k.Block/per >= last {
			break
		}
		c = k.Block/per + 1
		if len(found) == scanEntriesMax {
			return found, c, true, it.Close()
		}
	}
	return found, 0, false, it.Close()
}

// Vols lists, ascending, the volume ids that have at least one entry.
func (s *Store) Vols() ([]uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return nil, ErrClosed
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{entryPrefix}, UpperBound: []byte{entryPrefix + 1}})
	if err != nil {
		return nil, err
	}
	var vols []uint64
	for ok := it.First(); ok; {
		k, err := decodeEntryKey(it.Key())
		if err != nil {
			it.Close()
			return nil, fmt.Errorf("vols: %w", err)
		}
		vols = append(vols, k.Vol)
		if k.Vol == math.MaxUint64 {
			break
		}
		ok = it.SeekGE(entryKey(Key{Vol: k.Vol + 1}))
	}
	return vols, it.Close()
}
