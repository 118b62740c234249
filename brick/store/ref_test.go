package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/plumeria-fs/plumeria/brick/ec"
	"github.com/plumeria-fs/plumeria/internal/limits"
)

// The store's ref payload is brick/ec's: if ec's size changes, the store's
// format must change too (a new kind or version), not follow silently.
const (
	_ = uint64(RefBytes - ec.RefBytes)
	_ = uint64(ec.RefBytes - RefBytes)
)

// refPayload returns the deterministic ref payload of (k, seq).
func refPayload(k Key, seq uint64) []byte {
	return ec.EncodeRef(ec.Ref{SG: uint16(k.Block), StripeSeq: seq<<8 | k.Gen&0xff, Len: 1 + uint16(k.Vol%ec.ShardLenMax)})
}

func refOp(k Key, seq uint64) Op {
	return Op{Kind: OpRef, Key: k, Seq: seq, Ref: refPayload(k, seq)}
}

// checkRef asserts that k holds the ref of seq, through Get and Metas.
func checkRef(t testing.TB, s *Store, k Key, seq uint64) {
	t.Helper()
	data, e, err := s.Get(k)
	if err != nil {
		t.Fatalf("Get %v: %v", k, err)
	}
	if e.Key != k || e.Seq != seq || !e.Ref || e.Tombstone || !bytes.Equal(data, refPayload(k, seq)) {
		t.Fatalf("Get %v: entry %+v, data %x; want the ref of seq %d", k, e, data, seq)
	}
	if _, err := ec.DecodeRef(data); err != nil {
		t.Fatalf("Get %v: payload does not decode: %v", k, err)
	}
	m, err := s.Metas([]Key{k})
	if err != nil || m[0] != (Meta{Present: true, Seq: seq, Ref: true}) {
		t.Fatalf("Metas %v = %+v %v", k, m, err)
	}
}

// indexVersion reads the version key of the closed store in dir.
func indexVersion(t *testing.T, dir string) []byte {
	t.Helper()
	db, err := pebble.Open(filepath.Join(dir, "index"), &pebble.Options{Logger: pebbleLogger{slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v, closer, err := db.Get(versionKey)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	return bytes.Clone(v)
}

// setIndexVersion writes v as the version key of the closed store in dir.
func setIndexVersion(t *testing.T, dir string, v []byte) {
	t.Helper()
	db, err := pebble.Open(filepath.Join(dir, "index"), &pebble.Options{Logger: pebbleLogger{slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set(versionKey, v, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRefRoundTrip: a ref is a version of its block like a put. Readers
// below it read what is under it, readers at or above it read the ref's
// payload flagged as a ref (never data, never zeros), through Get,
// LatestAt and LatestRangeAt (with and without dst, mixed with puts and
// tombstones), Scan, Metas and Chunks.
func TestRefRoundTrip(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	// Block 1: a put at gen 3 and a ref at gen 5. Blocks 2, 5, 6: refs
	// side by side in one batch, around a put (4) and a tombstone (3).
	mustApply(t, s, putOp(k7(1, 3), 1))
	mustApply(t, s, refOp(k7(1, 5), 2), refOp(k7(2, 0), 3), Op{Kind: OpTombstone, Key: k7(3, 0), Seq: 4},
		putOp(k7(4, 0), 5), refOp(k7(5, 0), 6), refOp(k7(6, 0), 7), putOp(k7(7, 0), 8))
	checkPut(t, s, k7(1, 3), 1)
	checkRef(t, s, k7(1, 5), 2)
	checkRef(t, s, k7(2, 0), 3)
	checkRef(t, s, k7(6, 0), 7)

	for _, c := range []struct {
		gen     uint64
		wantGen uint64
		ref     bool
	}{{4, 3, false}, {5, 5, true}, {6, 5, true}} {
		data, e, err := s.LatestAt(7, 1, Reader{Gen: c.gen})
		if err != nil || e.Gen != c.wantGen || e.Ref != c.ref {
			t.Fatalf("LatestAt gen %d: %+v %v, want gen %d ref %v", c.gen, e, err, c.wantGen, c.ref)
		}
		want := blockData(e.Key, e.Seq)
		if c.ref {
			want = refPayload(e.Key, e.Seq)
		}
		if !bytes.Equal(data, want) {
			t.Fatalf("LatestAt gen %d: %d bytes, not the %s", c.gen, len(data), map[bool]string{false: "put's data", true: "ref's payload"}[c.ref])
		}
	}

	const bs = limits.BlockBytes
	for _, gen := range []uint64{4, 6} {
		for _, withDst := range []bool{false, true} {
			var dst []byte
			if withDst {
				dst = bytes.Repeat([]byte{0xEE}, 8*bs)
			}
			got, err := s.LatestRangeAt(7, 0, 8, Reader{Gen: gen}, dst)
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, g := range got {
				b, e := g.Entry.Key.Block, g.Entry
				if g.Err != nil {
					t.Fatalf("gen %d block %d: %v", gen, b, g.Err)
				}
				switch {
				case e.Ref:
					kinds = append(kinds, "ref")
					if !bytes.Equal(g.Ref, refPayload(e.Key, e.Seq)) || g.Data != nil || g.InDst || e.Tombstone {
						t.Fatalf("gen %d block %d: ref %+v", gen, b, g)
					}
					if dst != nil && !bytes.Equal(dst[b*bs:(b+1)*bs], bytes.Repeat([]byte{0xEE}, bs)) {
						t.Fatalf("gen %d block %d: a ref's place in dst was written", gen, b)
					}
				case e.Tombstone:
					kinds = append(kinds, "tomb")
				default:
					kinds = append(kinds, "put")
					if !bytes.Equal(g.Data, blockData(e.Key, e.Seq)) || g.Ref != nil || g.InDst != withDst {
						t.Fatalf("gen %d block %d: put %+v", gen, b, g.Entry)
					}
				}
			}
			want := []string{"put", "ref", "tomb", "put", "ref", "ref", "put"}
			if gen == 6 {
				want[0] = "ref"
			}
			if !slices.Equal(kinds, want) {
				t.Fatalf("gen %d dst %v: blocks %v, want %v", gen, withDst, kinds, want)
			}
		}
	}

	var refs []Key
	if err := s.Scan(7, 0, 10, func(e Entry) bool {
		if e.Ref {
			refs = append(refs, e.Key)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if want := []Key{k7(1, 5), k7(2, 0), k7(5, 0), k7(6, 0)}; !slices.Equal(refs, want) {
		t.Fatalf("Scan refs = %v, want %v", refs, want)
	}
	mustApply(t, s, refOp(k7(100, 0), 9))
	var chunks []uint64
	s.Chunks(7, 16, func(c uint64) { chunks = append(chunks, c) })
	if !slices.Equal(chunks, []uint64{0, 6}) {
		t.Fatalf("Chunks = %v, want [0 6] (a chunk of refs only counts)", chunks)
	}
	// Overwriting a ref with a put (a chunk converted back) reads as data.
	mustApply(t, s, putOp(k7(2, 0), 10))
	checkPut(t, s, k7(2, 0), 10)
	if m, _ := s.Metas([]Key{k7(2, 0)}); m[0].Ref {
		t.Fatalf("Metas after a put over a ref: %+v", m[0])
	}
}

// TestRefAccounting: a ref counts as its record (headerBytes+RefBytes), not
// as a block, in Stats and VolumeBytes, where it stands as a put does.
func TestRefAccounting(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	mustApply(t, s, refOp(Key{Vol: 1, Block: 0, Gen: 1}, 1), putOp(Key{Vol: 1, Block: 0, Gen: 2}, 2), // ref history
		putOp(Key{Vol: 1, Block: 1, Gen: 1}, 3), refOp(Key{Vol: 1, Block: 1, Gen: 2}, 4), // ref live
		refOp(Key{Vol: 1, Block: 2, Gen: 5}, 5)) // above live: live
	if st := s.Stats(); st.Entries != 5 || st.LiveBytes != 2*putRecordBytes+3*refRecordBytes {
		t.Fatalf("Stats %+v, want 5 entries of %d bytes", st, 2*putRecordBytes+3*refRecordBytes)
	}
	got, err := s.VolumeBytes(context.Background(), 1, 2)
	want := VolumeBytes{LiveBytes: putRecordBytes + 2*refRecordBytes, HistoryBytes: refRecordBytes + putRecordBytes, Entries: 5}
	if err != nil || got != want {
		t.Fatalf("VolumeBytes = %+v %v, want %+v", got, err, want)
	}
}

// TestRefPrunes: every prune treats a ref as a put. A tombstone over a ref
// that a reader reads hides the ref from the newer readers: it must stay
// (were the ref taken for a tombstone, the tombstone would go and they
// would read the ref again); a ref no reader reads goes.
func TestRefPrunes(t *testing.T) {
	ctx := context.Background()
	g := func(gen uint64) uint64 { return gen<<32 | versionUnversioned }
	f := func(version uint64) uint64 { return 1<<32 | version }
	for _, c := range []struct {
		name string
		// Block 0: a ref at gens[0] a reader reads, a tombstone at gens[1].
		// Block 1: a ref at gens[2] no reader reads, a put at gens[3].
		gens  [4]uint64
		prune func(s *Store) (PruneStats, error)
	}{
		{"Prune", [4]uint64{g(1), g(2), g(0), g(1)}, func(s *Store) (PruneStats, error) {
			return s.Prune(ctx, 1, 0, 10, []uint64{g(1)}, g(2), nil)
		}},
		{"PruneFileVersions", [4]uint64{g(1), g(2), g(0), g(1)}, func(s *Store) (PruneStats, error) {
			return s.PruneFileVersions(ctx, 1, 0, 10, []uint64{g(1)}, g(2), nil)
		}},
		// File versions 1 and 2 retained (below 5), 3 not.
		{"PruneRetained", [4]uint64{f(1), f(2), f(3), f(4)}, func(s *Store) (PruneStats, error) {
			return s.PruneRetained(ctx, 1, 0, 10, nil, nil, g(1), []uint32{1, 2, 4}, 5, nil)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openT(t, t.TempDir(), Options{})
			ref0, tomb0 := Key{Vol: 1, Block: 0, Gen: c.gens[0]}, Key{Vol: 1, Block: 0, Gen: c.gens[1]}
			ref1, put1 := Key{Vol: 1, Block: 1, Gen: c.gens[2]}, Key{Vol: 1, Block: 1, Gen: c.gens[3]}
			mustApply(t, s, refOp(ref0, 1), Op{Kind: OpTombstone, Key: tomb0, Seq: 2}, refOp(ref1, 3), putOp(put1, 4))
			st, err := c.prune(s)
			if err != nil {
				t.Fatal(err)
			}
			checkRef(t, s, ref0, 1)
			if _, e, err := s.Get(tomb0); err != nil || !e.Tombstone {
				t.Fatalf("tombstone over a read ref: %+v %v", e, err)
			}
			checkPut(t, s, put1, 4)
			checkNotFound(t, s, ref1)
			if st != (PruneStats{Blocks: 1, Versions: 1, Bytes: refRecordBytes}) {
				t.Fatalf("PruneStats = %+v", st)
			}
		})
	}
}

func TestRefInvalid(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{})
	good := putOp(Key{Vol: 1}, 1)
	k := Key{Vol: 1, Block: 1}
	cases := map[string]Op{
		"empty ref":         {Kind: OpRef, Key: k},
		"short ref":         {Kind: OpRef, Key: k, Ref: make([]byte, RefBytes-1)},
		"long ref":          {Kind: OpRef, Key: k, Ref: make([]byte, RefBytes+1)},
		"block-sized ref":   {Kind: OpRef, Key: k, Ref: make([]byte, limits.BlockBytes)},
		"ref in Data":       {Kind: OpRef, Key: k, Data: refPayload(k, 1)},
		"ref with data":     {Kind: OpRef, Key: k, Ref: refPayload(k, 1), Data: make([]byte, limits.BlockBytes)},
		"put with a ref":    {Kind: OpPut, Key: k, Data: blockData(k, 1), Ref: refPayload(k, 1)},
		"tombstone and ref": {Kind: OpTombstone, Key: k, Ref: refPayload(k, 1)},
	}
	for name, op := range cases {
		t.Run(name, func(t *testing.T) {
			err := s.Apply(context.Background(), []Op{good, op})
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Apply = %v, want ErrInvalid", err)
			}
			checkNotFound(t, s, good.Key)
		})
	}
	s.Close()
	if v := indexVersion(t, dir); !bytes.Equal(v, []byte{1}) {
		t.Fatalf("refused refs changed the format version to %x", v)
	}
}

// TestRefReopen: refs survive a reopen from the index, and a replay of the
// segments over an index that never saw them (a crash before the index
// was synced).
func TestRefReopen(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: SegmentBytesMin}
	s := openT(t, dir, opts)
	index := filepath.Join(t.TempDir(), "index")
	checkpointIndex(t, s, index) // empty, version 1: replay sees everything
	for i := range uint64(40) {  // several segments
		mustApply(t, s, putOp(Key{Vol: 1, Block: i}, i), refOp(Key{Vol: 1, Block: i, Gen: 2}, i+100), refOp(Key{Vol: 2, Block: i}, i))
	}
	mustApply(t, s, putOp(Key{Vol: 2, Block: 3}, 500)) // a put over a ref, replayed in order
	before := s.Stats()
	s.Close()
	check := func(s *Store) {
		t.Helper()
		for i := range uint64(40) {
			checkPut(t, s, Key{Vol: 1, Block: i}, i)
			checkRef(t, s, Key{Vol: 1, Block: i, Gen: 2}, i+100)
			if i != 3 {
				checkRef(t, s, Key{Vol: 2, Block: i}, i)
			}
		}
		checkPut(t, s, Key{Vol: 2, Block: 3}, 500)
		if st := s.Stats(); st.Entries != before.Entries || st.LiveBytes != before.LiveBytes {
			t.Fatalf("stats %+v, want %+v", st, before)
		}
		if v := s.version.Load(); v != formatVersionRef {
			t.Fatalf("format version %d after replaying refs", v)
		}
	}
	s = openT(t, dir, opts)
	if before.Segments < 3 {
		t.Fatalf("%d segments, want several", before.Segments)
	}
	check(s)
	s.Close()
	crash := crashDir(t, index, dir)
	s = openT(t, crash, opts)
	check(s)
	s.Close()
	// The replay upgraded the index it began with (at version 1).
	if v := indexVersion(t, crash); !bytes.Equal(v, []byte{formatVersionRef}) {
		t.Fatalf("index version %x after replaying refs into a version 1 index", v)
	}
}

// TestRefClean: the cleaner moves live refs verbatim (a corrupt one stays
// corrupt), and a moved ref reads as before, also after a reopen.
func TestRefClean(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: SegmentBytesMin}
	s := openT(t, dir, opts)
	good, bad, old := Key{Vol: 5, Block: 1}, Key{Vol: 5, Block: 2}, Key{Vol: 5, Block: 3}
	mustApply(t, s, refOp(good, 1), refOp(bad, 1), putOp(old, 1), refOp(Key{Vol: 5, Block: 4}, 1))
	mustApply(t, s, refOp(old, 2)) // a ref over a put, same gen
	overwrite(t, s, 8, 4)          // seal the first segment, mostly dead
	locGood, locBad := location(t, s, good), location(t, s, bad)
	s.Close()
	flipByte(t, dir, locBad.seg, int64(locBad.off)+headerBytes+3)

	s = openT(t, dir, opts)
	if _, err := s.Clean(context.Background()); err != nil {
		t.Fatal(err)
	}
	if now := location(t, s, good); now.seg == locGood.seg || !now.ref {
		t.Fatalf("ref not moved: %+v", now)
	}
	check := func(s *Store) {
		t.Helper()
		checkRef(t, s, good, 1)
		checkRef(t, s, old, 2)
		data, e, err := s.Get(bad)
		if !errors.Is(err, ErrCorrupt) || data != nil || !e.Ref || e.Seq != 1 {
			t.Fatalf("Get moved corrupt ref: %x %+v %v", data, e, err)
		}
		got, err := s.LatestRange(5, 1, 5, 0, nil)
		if err != nil || len(got) != 4 || !bytes.Equal(got[0].Ref, refPayload(good, 1)) || !errors.Is(got[1].Err, ErrCorrupt) ||
			got[1].Ref != nil || !got[1].Entry.Ref || !bytes.Equal(got[2].Ref, refPayload(old, 2)) {
			t.Fatalf("LatestRange after clean: %+v %v", got, err)
		}
	}
	check(s)
	s.Close()
	check(openT(t, dir, opts))
}

// TestRefCorrupt: rot in a ref's payload or header reads as ErrCorrupt
// (with its Entry), never as another payload, and a rewrite repairs it.
func TestRefCorrupt(t *testing.T) {
	for _, at := range []int64{headerBytes + RefBytes - 1, 20 /* block field */, crcOffset} {
		dir := t.TempDir()
		s := openT(t, dir, Options{})
		keys := []Key{{Vol: 1, Block: 1}, {Vol: 1, Block: 2}, {Vol: 1, Block: 3}}
		mustApply(t, s, refOp(keys[0], 5), refOp(keys[1], 5), refOp(keys[2], 5))
		loc := location(t, s, keys[1])
		s.Close()
		flipByte(t, dir, loc.seg, int64(loc.off)+at)

		s = openT(t, dir, Options{})
		checkRef(t, s, keys[0], 5)
		checkRef(t, s, keys[2], 5)
		data, e, err := s.Get(keys[1])
		if !errors.Is(err, ErrCorrupt) || data != nil || e.Key != keys[1] || !e.Ref || e.Seq != 5 {
			t.Fatalf("byte %d: Get corrupt ref: %x, %+v, %v; want ErrCorrupt", at, data, e, err)
		}
		if _, _, err := s.Latest(1, 2, 0); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d: Latest corrupt ref: %v", at, err)
		}
		if n := s.Stats().CorruptReads; n != 2 {
			t.Fatalf("byte %d: CorruptReads = %d, want 2", at, n)
		}
		mustApply(t, s, refOp(keys[1], 6))
		checkRef(t, s, keys[1], 6)
		s.Close()
	}
}

// TestRefDecode: the record and index decoders accept refs only as
// format version 2 defines them.
func TestRefDecode(t *testing.T) {
	k := Key{Vol: 1, Block: 2, Gen: 3}
	ref := appendRecord(nil, header{kind: kindRef, vol: k.Vol, block: k.Block, gen: k.Gen, seq: 4}, refPayload(k, 4))
	if ref[4] != formatVersionRef {
		t.Fatalf("ref record ver %d, want %d", ref[4], formatVersionRef)
	}
	put := appendRecord(nil, header{kind: kindPut, vol: k.Vol, block: k.Block, gen: k.Gen, seq: 4}, blockData(k, 4))
	if put[4] != 1 {
		t.Fatalf("put record ver %d, want 1: a store without refs must stay version 1", put[4])
	}
	// edit changes a copy of rec's header and re-seals it (hcrc), so only
	// the edit is wrong.
	edit := func(rec []byte, change func(b []byte)) []byte {
		b := bytes.Clone(rec)
		change(b)
		binary.LittleEndian.PutUint32(b[hcrcOffset:], crc32.Checksum(b[:hcrcOffset], castagnoli))
		return b
	}
	bad := map[string][]byte{
		"ref as version 1":      edit(ref, func(b []byte) { b[4] = 1 }),
		"put as version 2":      edit(put, func(b []byte) { b[4] = 2 }),
		"ref of a block's size": edit(ref, func(b []byte) { binary.LittleEndian.PutUint32(b[40:], limits.BlockBytes) }),
		"ref of 12 bytes":       edit(ref, func(b []byte) { binary.LittleEndian.PutUint32(b[40:], RefBytes-1) }),
		"kind 7":                edit(ref, func(b []byte) { b[5] = 7 }),
	}
	if _, err := decodeHeader(edit(ref, func([]byte) {})); err != nil {
		t.Fatalf("edit breaks a ref by itself: %v", err)
	}
	for name, b := range bad {
		if _, err := decodeHeader(b); !errors.Is(err, errHeader) {
			t.Errorf("%s: decodeHeader = %v, want errHeader", name, err)
		}
	}
	mv := appendRecord(nil, header{kind: kindMove, vol: 1, block: 0}, ref)
	h, _, err := decodeRecord(mv)
	if err != nil {
		t.Fatal(err)
	}
	if ih, inner, err := decodeMove(h, mv); err != nil || ih.kind != kindRef || !bytes.Equal(inner, ref) || !hasRef(h, mv) {
		t.Fatalf("move of a ref: %+v %v", ih, err)
	}
	for name, e := range map[string]entry{
		"ref and tombstone":    {len: refRecordBytes, ref: true, tomb: true},
		"ref of a put's size":  {len: putRecordBytes, ref: true},
		"put of a ref's size":  {len: refRecordBytes},
		"tombstone, ref sized": {len: refRecordBytes, tomb: true},
	} {
		if _, err := decodeEntry(appendEntry(nil, e)); !errors.Is(err, errIndexBad) {
			t.Errorf("%s: decodeEntry = %v, want errIndexBad", name, err)
		}
	}
	if e, err := decodeEntry(appendEntry(nil, entry{len: refRecordBytes, ref: true})); err != nil || !e.ref {
		t.Fatalf("ref entry: %+v %v", e, err)
	}
}

// TestFormatUpgrade: a store is created at format version 1 and stays
// there (a build of version 1 still opens it) until its first ref; that
// ref moves it to version 2 durably before it reaches a segment; it then
// reopens as version 2 with everything in it.
func TestFormatUpgrade(t *testing.T) {
	dir := t.TempDir()
	// refWrites counts segment writes holding a ref; each checks that the
	// index already says version 2.
	var s atomic.Pointer[Store]
	var refWrites atomic.Int64
	opts := Options{wrapFile: func(f *os.File) segFile { return refWatch{File: f, s: &s, t: t, n: &refWrites} }}
	open := func() *Store {
		st := openT(t, dir, opts)
		s.Store(st)
		return st
	}
	st := open()
	mustApply(t, st, putOp(Key{Vol: 1, Block: 1}, 1), Op{Kind: OpTombstone, Key: Key{Vol: 1, Block: 2}, Seq: 2})
	st.Close()
	if v := indexVersion(t, dir); !bytes.Equal(v, []byte{1}) {
		t.Fatalf("a store without refs is at format version %x, want 1", v)
	}
	st = open()
	mustApply(t, st, putOp(Key{Vol: 1, Block: 3}, 3))
	mustApply(t, st, refOp(Key{Vol: 1, Block: 1, Gen: 1}, 4), putOp(Key{Vol: 1, Block: 4}, 5))
	if refWrites.Load() == 0 {
		t.Fatal("no segment write of a ref seen")
	}
	st.Close()
	if v := indexVersion(t, dir); !bytes.Equal(v, []byte{2}) {
		t.Fatalf("after a ref the store is at format version %x, want 2", v)
	}
	st = open()
	checkPut(t, st, Key{Vol: 1, Block: 1}, 1)
	checkRef(t, st, Key{Vol: 1, Block: 1, Gen: 1}, 4)
	checkPut(t, st, Key{Vol: 1, Block: 4}, 5)
	mustApply(t, st, refOp(Key{Vol: 1, Block: 5}, 6))
	checkRef(t, st, Key{Vol: 1, Block: 5}, 6)
	st.Close()
}

// refWatch fails its test if a ref reaches the segment while the index
// does not say format version 2.
type refWatch struct {
	*os.File
	s *atomic.Pointer[Store]
	t *testing.T
	n *atomic.Int64
}

func (w refWatch) WriteAt(p []byte, off int64) (int, error) {
	refs := false
	scanSegment(p, 0, func(recs []scanned) error {
		for _, r := range recs {
			refs = refs || hasRef(r.h, r.rec)
		}
		return nil
	})
	if refs {
		w.n.Add(1)
		v, closer, err := w.s.Load().db.Get(versionKey)
		if err != nil || !bytes.Equal(v, []byte{formatVersionRef}) {
			w.t.Errorf("a ref written to a segment while the index version is %x (%v)", v, err)
		}
		if err == nil {
			closer.Close()
		}
	}
	return w.File.WriteAt(p, off)
}

// TestFormatRefused: a store of an unknown format version is refused with
// both versions named, and left as it was.
func TestFormatRefused(t *testing.T) {
	for _, c := range []struct {
		v    []byte
		want []string
	}{
		{[]byte{3}, []string{"version 3", "this build's 2", "newer"}},
		{[]byte{0}, []string{"version 0", "want 1 to 2"}},
		{[]byte{1, 0}, []string{"0100"}},
	} {
		dir := t.TempDir()
		s := openT(t, dir, Options{})
		mustApply(t, s, putOp(Key{Vol: 1}, 1))
		s.Close()
		setIndexVersion(t, dir, c.v)
		_, err := Open(dir, Options{})
		if err == nil {
			t.Fatalf("version %x: Open succeeded", c.v)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("version %x: Open error %q lacks %q", c.v, err, w)
			}
		}
		if v := indexVersion(t, dir); !bytes.Equal(v, c.v) {
			t.Fatalf("version %x changed to %x by a refused Open", c.v, v)
		}
	}
}
