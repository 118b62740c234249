package store

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Index format, version 2, in pebble under dir/index.
//
//	key                                    value
//	'e' | vol 8 | block 8 | gen 8 (BE)     entry value, below
//	'm' | "version"                        the store's format version, 1 byte
//	'm' | "watermark"                      | ver 1 | seg 8 | off 8 |  (LE)
//
// The version is 1 or 2 (record.go says when a store moves from 1 to 2);
// a store is created at version 1.
//
// Entry keys are big-endian so pebble's order is (vol, block, gen), the
// order Scan promises. Entry value, little-endian:
//
//	+-----+-------+-----+-----+-----+-----+
//	| ver | flags | seg | off | len | seq |
//	|  1  |   1   |  8  |  8  |  4  |  8  |
//	+-----+-------+-----+-----+-----+-----+
//
//	ver    valueVersion (1: the layout is version 1's in both formats)
//	flags  bit 0: tombstone; bit 1: ref (version 2; never both); other bits 0
//	seg, off, len  where the put, tombstone or ref record lies (header included)
//
// The watermark says the index reflects every record of the segments before
// (seg, off). Index batches are committed without fsync, always together
// with the watermark; the segment fsync is the durability point, and Open
// replays the segments from the watermark. Replay and the live committer
// apply records through the same function, applyRecord, so the index after
// replay is the index the live store had.
const (
	entryPrefix     = 'e'
	metaPrefix      = 'm'
	entryKeyBytes   = 1 + 24
	entryValueBytes = 1 + 1 + 8 + 8 + 4 + 8
	watermarkBytes  = 1 + 8 + 8
	flagTombstone   = 1
	flagRef         = 2 // format version 2
	// valueVersion is the ver byte of entry and watermark values.
	valueVersion = 1
)

var (
	versionKey   = []byte{metaPrefix, 'v', 'e', 'r', 's', 'i', 'o', 'n'}
	watermarkKey = []byte{metaPrefix, 'w', 'a', 't', 'e', 'r', 'm', 'a', 'r', 'k'}
	errIndexBad  = errors.New("bad index value")
)

// entry is a decoded index value.
type entry struct {
	seg, off uint64
	len      uint32
	seq      uint64
	tomb     bool
	ref      bool // a ref record (format version 2); never with tomb
}

// recordBytes is the length an entry's record has, by its kind.
func (e entry) recordBytes() uint32 {
	switch {
	case e.tomb:
		return headerBytes
	case e.ref:
		return refRecordBytes
	}
	return putRecordBytes
}

// watermark is a position in the log: segment id and byte offset.
type watermark struct{ seg, off uint64 }

func entryKey(k Key) []byte { return putEntryKey(make([]byte, entryKeyBytes), k) }

// putEntryKey writes k's index key into b (entryKeyBytes long).
func putEntryKey(b []byte, k Key) []byte {
	b[0] = entryPrefix
	binary.BigEndian.PutUint64(b[1:], k.Vol)
	binary.BigEndian.PutUint64(b[9:], k.Block)
	binary.BigEndian.PutUint64(b[17:], k.Gen)
	return b
}

func decodeEntryKey(b []byte) (Key, error) {
	if len(b) != entryKeyBytes || b[0] != entryPrefix {
		return Key{}, fmt.Errorf("key %x: %w", b, errIndexBad)
	}
	return Key{
		Vol:   binary.BigEndian.Uint64(b[1:]),
		Block: binary.BigEndian.Uint64(b[9:]),
		Gen:   binary.BigEndian.Uint64(b[17:]),
	}, nil
}

func appendEntry(dst []byte, e entry) []byte {
	var b [entryValueBytes]byte
	b[0] = valueVersion
	if e.tomb {
		b[1] |= flagTombstone
	}
	if e.ref {
		b[1] |= flagRef
	}
	binary.LittleEndian.PutUint64(b[2:], e.seg)
	binary.LittleEndian.PutUint64(b[10:], e.off)
	binary.LittleEndian.PutUint32(b[18:], e.len)
	binary.LittleEndian.PutUint64(b[22:], e.seq)
	return append(dst, b[:]...)
}

func decodeEntry(b []byte) (entry, error) {
	if len(b) != entryValueBytes || b[0] != valueVersion || b[1]&^(flagTombstone|flagRef) != 0 || b[1] == flagTombstone|flagRef {
		return entry{}, fmt.Errorf("value %x: %w", b, errIndexBad)
	}
	e := entry{
		tomb: b[1]&flagTombstone != 0,
		ref:  b[1]&flagRef != 0,
		seg:  binary.LittleEndian.Uint64(b[2:]),
		off:  binary.LittleEndian.Uint64(b[10:]),
		len:  binary.LittleEndian.Uint32(b[18:]),
		seq:  binary.LittleEndian.Uint64(b[22:]),
	}
	if e.len != e.recordBytes() {
		return entry{}, fmt.Errorf("value len %d tombstone %v ref %v: %w", e.len, e.tomb, e.ref, errIndexBad)
	}
	return e, nil
}

func appendWatermark(dst []byte, w watermark) []byte {
	var b [watermarkBytes]byte
	b[0] = valueVersion
	binary.LittleEndian.PutUint64(b[1:], w.seg)
	binary.LittleEndian.PutUint64(b[9:], w.off)
	return append(dst, b[:]...)
}

func decodeWatermark(b []byte) (watermark, error) {
	if len(b) != watermarkBytes || b[0] != valueVersion {
		return watermark{}, fmt.Errorf("watermark %x: %w", b, errIndexBad)
	}
	return watermark{seg: binary.LittleEndian.Uint64(b[1:]), off: binary.LittleEndian.Uint64(b[9:])}, nil
}

// getEntry reads the index entry of key k from db.
func getEntry(db *pebble.DB, k Key) (entry, bool, error) {
	v, closer, err := db.Get(entryKey(k))
	if errors.Is(err, pebble.ErrNotFound) {
		return entry{}, false, nil
	}
	if err != nil {
		return entry{}, false, fmt.Errorf("index get %v: %w", k, err)
	}
	e, err := decodeEntry(v)
	if cerr := closer.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return entry{}, false, fmt.Errorf("index get %v: %w", k, err)
	}
	return e, true, nil
}

// compareKeys orders keys as the index does: (vol, block, gen).
func compareKeys(a, b Key) int {
	if c := cmp.Compare(a.Vol, b.Vol); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Block, b.Block); c != 0 {
		return c
	}
	return cmp.Compare(a.Gen, b.Gen)
}

// lookupEntries finds the index entries of keys (sorted by entry key, no
// duplicates) with one iterator over db, calling found for each present
// one. A run of records (a 1 MiB write is 256 blocks side by side) costs
// one seek and a step per entry present, where a pebble Get each built an
// iterator over every memtable and level per key (a quarter of a brick's
// CPU in a sequential write, session 12).
func lookupEntries(db *pebble.DB, keys []Key, found func(i int, e entry) error) error {
	if len(keys) == 0 {
		return nil
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: entryKey(keys[0]), UpperBound: append(entryKey(keys[len(keys)-1]), 0)})
	if err != nil {
		return err
	}
	var ferr error
	var kb [entryKeyBytes]byte
	valid := it.First()
	for i := 0; i < len(keys) && valid && ferr == nil; i++ {
		k := putEntryKey(kb[:], keys[i])
		if c := bytes.Compare(it.Key(), k); c < 0 {
			// The iterator is behind: one step usually reaches k (keys
			// present side by side), else seek.
			if valid = it.Next(); valid && bytes.Compare(it.Key(), k) < 0 {
				valid = it.SeekGE(k)
			}
		}
		if valid && bytes.Equal(it.Key(), k) {
			e, err := decodeEntry(it.Value())
			if err != nil {
				ferr = fmt.Errorf("index get %v: %w", keys[i], err)
				break
			}
			ferr = found(i, e)
		}
	}
	if err := it.Close(); ferr == nil {
		ferr = err
	}
	return ferr
}

// indexBatch is a batch of index changes that reads its own changes over
// the DB's index, as a pebble indexed batch does, but looks the DB up for
// a whole group of records at once (prefetch, one iterator) instead of
// with a Get per record. Only the committer and Open's replay change the
// index, one batch at a time, so the DB does not change under a batch.
type indexBatch struct {
	db   *pebble.DB
	b    *pebble.Batch
	own  map[Key]*entry   // changed in this batch: the new entry, nil if removed
	base map[Key]dbLookup // the DB's entry of each key looked up
}

type dbLookup struct {
	e  entry
	ok bool
}

func newIndexBatch(db *pebble.DB) *indexBatch {
	return &indexBatch{db: db, b: db.NewBatch(), own: map[Key]*entry{}, base: map[Key]dbLookup{}}
}

func (ib *indexBatch) Close() error { return ib.b.Close() }

// commit commits the batch with the watermark w, without fsync.
func (ib *indexBatch) commit(w watermark) error {
	if err := ib.b.Set(watermarkKey, appendWatermark(nil, w), nil); err != nil {
		return err
	}
	return ib.b.Commit(pebble.NoSync)
}

// prefetch looks up the DB's entries of the keys the records change.
func (ib *indexBatch) prefetch(groups ...[]scanned) error {
	var keys []Key
	for _, recs := range groups {
		for _, r := range recs {
			k, ok := recordKey(r.h, r.rec)
			if !ok {
				continue
			}
			if _, done := ib.base[k]; done {
				continue
			}
			if _, done := ib.own[k]; done {
				continue
			}
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, compareKeys)
	keys = slices.Compact(keys)
	for _, k := range keys {
		ib.base[k] = dbLookup{}
	}
	return lookupEntries(ib.db, keys, func(i int, e entry) error {
		ib.base[keys[i]] = dbLookup{e: e, ok: true}
		return nil
	})
}

// recordKey is the key whose entry applying record (h, rec) reads.
func recordKey(h header, rec []byte) (Key, bool) {
	switch h.kind {
	case kindPut, kindTombstone, kindRef, kindRemove:
		return h.key(), true
	case kindMove:
		if ih, _, err := decodeMove(h, rec); err == nil {
			return ih.key(), true
		}
	}
	return Key{}, false
}

func (ib *indexBatch) get(k Key) (entry, bool, error) {
	if e, ok := ib.own[k]; ok {
		if e == nil {
			return entry{}, false, nil
		}
		return *e, true, nil
	}
	if l, ok := ib.base[k]; ok {
		return l.e, l.ok, nil
	}
	e, ok, err := getEntry(ib.db, k) // not prefetched
	if err == nil {
		ib.base[k] = dbLookup{e: e, ok: ok}
	}
	return e, ok, err
}

func (ib *indexBatch) set(k Key, e entry) error {
	ib.own[k] = &e
	return ib.b.Set(entryKey(k), appendEntry(nil, e), nil)
}

func (ib *indexBatch) remove(k Key) error {
	ib.own[k] = nil
	return ib.b.Delete(entryKey(k), nil)
}

// delta collects the accounting changes of index updates not yet committed.
type delta struct {
	live    map[uint64]int64 // segment id → change of live bytes
	entries int64
}

func newDelta() *delta { return &delta{live: map[uint64]int64{}} }

// applyRecord updates the index batch b for record r, which lies at (seg, off).
// Later records win; a move applies only if the key still points at the
// move's source. It must stay deterministic: Open replays it over the log.
func applyRecord(b *indexBatch, seg, off uint64, h header, rec []byte, d *delta) error {
	switch h.kind {
	case kindPut, kindTombstone, kindRef:
		e := entry{seg: seg, off: off, len: uint32(len(rec)), seq: h.seq, tomb: h.kind == kindTombstone, ref: h.kind == kindRef}
		return setEntry(b, h.key(), e, d)
	case kindRemove:
		old, ok, err := b.get(h.key())
		if err != nil || !ok {
			return err
		}
		d.live[old.seg] -= int64(old.len)
		d.entries--
		return b.remove(h.key())
	case kindMove:
		ih, inner, err := decodeMove(h, rec)
		if err != nil {
			return err
		}
		old, ok, err := b.get(ih.key())
		if err != nil || !ok || old.seg != h.moveSeg() || old.off != h.moveOff() {
			return err
		}
		e := entry{seg: seg, off: off + headerBytes, len: uint32(len(inner)), seq: ih.seq, tomb: ih.kind == kindTombstone, ref: ih.kind == kindRef}
		return setEntry(b, ih.key(), e, d)
	}
	return nil // commit records carry no index change
}

func setEntry(b *indexBatch, k Key, e entry, d *delta) error {
	old, ok, err := b.get(k)
	if err != nil {
		return err
	}
	if ok {
		d.live[old.seg] -= int64(old.len)
	} else {
		d.entries++
	}
	d.live[e.seg] += int64(e.len)
	return b.set(k, e)
}

// pebbleLogger sends pebble's log lines to slog at debug level, errors at
// error level, so pebble stays quiet on stderr.
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.log.Debug("pebble: " + fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error("pebble: " + fmt.Sprintf(format, args...))
}

// Fatalf must not return (pebble's contract).
func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := "pebble: " + fmt.Sprintf(format, args...)
	l.log.Error(msg)
	panic(msg)
}
