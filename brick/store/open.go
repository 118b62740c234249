package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/plumeria-fs/plumeria/internal/limits"
)

// Open opens the store in dir, creating it if dir holds none. It replays
// the segments written after the index's watermark, truncates a torn tail
// off the head segment, and rebuilds the live-bytes accounting from the
// index. Bit rot in a segment does not stop Open; reads of the blocks it
// hit report ErrCorrupt. A store of format version 1 opens as it is and
// moves to version 2 with its first ref (record.go). Errors: invalid
// options, I/O errors, an index of a format version other than 1 or 2, or
// segments without an index.
func Open(dir string, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	s := &Store{
		dir:           dir,
		opts:          opts,
		log:           opts.Logger.With("store", dir),
		reqs:          make(chan *request),
		stop:          make(chan struct{}),
		committerDone: make(chan struct{}),
		zero:          newZeroer(),
	}
	s.mu.segs = map[uint64]*segment{}
	s.acct.live = map[uint64]int64{}
	if err := s.open(); err != nil {
		if s.db != nil {
			s.db.Close()
		}
		s.closeFilesLocked()
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	go s.runCommitter()
	go s.zero.run(s)
	return s, nil
}

// Defaults of the index's memory (Options). Per store: a process with three
// bricks keeps three of each.
const (
	IndexCacheBytesDefault    = 64 << 20
	IndexMemTableBytesDefault = 4 << 20
)

func (o Options) withDefaults() (Options, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.SegmentBytes == 0 {
		o.SegmentBytes = limits.SegmentBytesMax
	}
	if o.CleanLiveFractionMax == 0 {
		o.CleanLiveFractionMax = 0.5
	}
	if o.IndexCacheBytes == 0 {
		o.IndexCacheBytes = IndexCacheBytesDefault
	}
	if o.IndexMemTableBytes == 0 {
		o.IndexMemTableBytes = IndexMemTableBytesDefault
	}
	switch {
	case o.SegmentBytes < SegmentBytesMin || o.SegmentBytes > limits.SegmentBytesMax:
		return o, fmt.Errorf("SegmentBytes %d outside [%d, %d]", o.SegmentBytes, SegmentBytesMin, limits.SegmentBytesMax)
	case o.CleanLiveFractionMax < 0 || o.CleanLiveFractionMax > 1:
		return o, fmt.Errorf("CleanLiveFractionMax %v outside (0, 1]", o.CleanLiveFractionMax)
	case o.CapacityBytes < 0 || o.ReserveBytes < 0:
		return o, fmt.Errorf("negative CapacityBytes %d or ReserveBytes %d", o.CapacityBytes, o.ReserveBytes)
	case o.CapacityBytes > 0 && o.ReserveBytes >= o.CapacityBytes:
		return o, fmt.Errorf("ReserveBytes %d not below CapacityBytes %d", o.ReserveBytes, o.CapacityBytes)
	}
	return o, nil
}

func (s *Store) open() error {
	cache := pebble.NewCache(s.opts.IndexCacheBytes)
	defer cache.Unref() // the DB holds its own reference
	po := &pebble.Options{Logger: pebbleLogger{s.log}, Cache: cache, MemTableSize: s.opts.IndexMemTableBytes}
	// Every put looks its key up first (the live-bytes accounting of the
	// version it replaces); a new block's key is in no table, and a bloom
	// filter per table answers that without reading the table's blocks.
	// (Tables written before without filters are read as they are.)
	po.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	db, err := pebble.Open(filepath.Join(s.dir, "index"), po)
	if err != nil {
		return fmt.Errorf("open index: %w", err)
	}
	s.db = db
	ids, err := listSegments(s.dir)
	if err != nil {
		return err
	}
	wm, err := s.loadMeta(len(ids) > 0)
	if err != nil {
		return err
	}
	for _, id := range ids {
		seg, err := s.openSegment(id)
		if err != nil {
			return err
		}
		s.mu.segs[id] = seg
	}
	if err := s.replay(ids, wm); err != nil {
		return err
	}
	if err := s.openHead(ids, wm); err != nil {
		return err
	}
	if err := s.loadAccounting(); err != nil {
		return err
	}
	if err := s.setCapacity(); err != nil {
		return err
	}
	s.openBalloon()
	return nil
}

// loadMeta checks the index's format version and returns its watermark.
// A new index is initialised, at format version 1 (formatVersionMin: it
// moves to 2 with its first ref, record.go), unless segments exist: an
// index lost beside its segments cannot be rebuilt exactly (moves depend
// on index state).
func (s *Store) loadMeta(haveSegments bool) (watermark, error) {
	v, closer, err := s.db.Get(versionKey)
	if errors.Is(err, pebble.ErrNotFound) {
		if haveSegments {
			return watermark{}, errors.New("segments present but index empty")
		}
		b := s.db.NewBatch()
		defer b.Close()
		b.Set(versionKey, []byte{formatVersionMin}, nil)
		b.Set(watermarkKey, appendWatermark(nil, watermark{}), nil)
		s.version.Store(formatVersionMin)
		return watermark{}, b.Commit(pebble.Sync)
	}
	if err != nil {
		return watermark{}, fmt.Errorf("index version: %w", err)
	}
	ver, err := checkVersion(v)
	closer.Close()
	if err != nil {
		return watermark{}, err
	}
	s.version.Store(uint32(ver))
	v, closer, err = s.db.Get(watermarkKey)
	if err != nil {
		return watermark{}, fmt.Errorf("index watermark: %w", err)
	}
	defer closer.Close()
	return decodeWatermark(v)
}

// checkVersion returns the format version of the index's version value v,
// or an error saying why this build cannot open the store.
func checkVersion(v []byte) (byte, error) {
	switch {
	case len(v) != 1:
		return 0, fmt.Errorf("index format version %x: not one byte", v)
	case v[0] > formatVersion:
		return 0, fmt.Errorf("index format version %d, newer than this build's %d: open the store with a build that knows format %d", v[0], formatVersion, v[0])
	case v[0] < formatVersionMin:
		return 0, fmt.Errorf("index format version %d, want %d to %d", v[0], formatVersionMin, formatVersion)
	}
	return v[0], nil
}

// replay re-applies to the index every committed batch at or after the
// watermark, truncates the head's torn tail, and syncs the index, so a
// crash right after Open needs no more than this replay again.
func (s *Store) replay(ids []uint64, wm watermark) error {
	for i, id := range ids {
		if id < wm.seg {
			continue
		}
		from := int64(0)
		if id == wm.seg {
			from = int64(wm.off)
		}
		if err := s.replaySegment(s.mu.segs[id], from, i == len(ids)-1); err != nil {
			return err
		}
	}
	return s.db.LogData(nil, pebble.Sync)
}

func (s *Store) replaySegment(seg *segment, from int64, isHead bool) error {
	size := seg.size.Load()
	if from > size {
		s.log.Error("index watermark past end of segment; blocks written there read as corrupt",
			"segment", seg.id, "watermark", from, "size", size)
		from = size
	}
	b, err := s.readRange(seg, from, size)
	if err != nil {
		return err
	}
	ib := newIndexBatch(s.db)
	defer ib.Close()
	d := newDelta()
	res, err := scanSegment(b, from, func(recs []scanned) error {
		if err := ib.prefetch(recs); err != nil {
			return err
		}
		for _, r := range recs {
			// A ref in a version 1 store (written by a build that did not
			// upgrade it first) is read as a ref all the same; the upgrade
			// keeps a version 1 build from misreading it next.
			if s.version.Load() < formatVersionRef && hasRef(r.h, r.rec) {
				if err := s.upgradeFormat(); err != nil {
					return err
				}
			}
			if err := applyRecord(ib, seg.id, uint64(r.off), r.h, r.rec, d); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("replay segment %d: %w", seg.id, err)
	}
	if err := ib.commit(watermark{seg: seg.id, off: uint64(res.end)}); err != nil {
		return fmt.Errorf("replay segment %d: %w", seg.id, err)
	}
	s.logScan(seg.id, from, size, res)
	if !isHead || res.end == size {
		return nil
	}
	return s.truncateTail(seg, res.end)
}

func (s *Store) logScan(id uint64, from, size int64, res scanResult) {
	attrs := []any{"segment", id, "from", from, "end", res.end, "size", size, "gaps", res.gaps,
		"bad_data", res.badData, "mismatched_batches", res.mismatched, "dropped_records", res.dropped}
	if res.gaps > 0 || res.badData > 0 || res.mismatched > 0 {
		s.log.Error("segment damaged; blocks hit read as corrupt or older", attrs...)
	} else if (res.end != size && !res.zeroTail) || res.dropped > 0 {
		s.log.Warn("torn tail after last commit record", attrs...)
	} else if res.end > from {
		s.log.Debug("replayed", attrs...)
	}
}

// truncateTail cuts the head segment back to end, the end of its last
// commit record, so the next batch is appended after whole batches only.
func (s *Store) truncateTail(seg *segment, end int64) error {
	if err := seg.cut(end); err != nil {
		return fmt.Errorf("torn tail: %w", err)
	}
	seg.size.Store(end)
	return nil
}

// openHead picks the segment to append to: the last one, unless it lies
// before the watermark (possible only if segment files were lost), in
// which case a fresh one after the watermark is created.
func (s *Store) openHead(ids []uint64, wm watermark) error {
	if n := len(ids); n > 0 && ids[n-1] >= wm.seg {
		s.head = s.mu.segs[ids[n-1]]
	} else {
		seg, err := s.createSegment(wm.seg + 1)
		if err != nil {
			return err
		}
		s.mu.segs[seg.id] = seg
		s.head = seg
	}
	s.headID.Store(s.head.id)
	s.preallocate(s.head)
	for _, seg := range s.mu.segs {
		s.used.Add(seg.size.Load())
	}
	return nil
}

// loadAccounting computes live bytes per segment and the entry count from
// a full pass over the index.
func (s *Store) loadAccounting() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{entryPrefix}, UpperBound: []byte{entryPrefix + 1}})
	if err != nil {
		return err
	}
	var dangling int64
	for it.First(); it.Valid(); it.Next() {
		e, err := decodeEntry(it.Value())
		if err != nil {
			it.Close()
			return fmt.Errorf("index entry %x: %w", it.Key(), err)
		}
		s.acct.live[e.seg] += int64(e.len)
		s.acct.entries++
		if seg := s.mu.segs[e.seg]; seg == nil || int64(e.off)+int64(e.len) > seg.size.Load() {
			dangling++
		}
	}
	if dangling > 0 {
		s.log.Error("index entries point past the segments; they read as corrupt", "entries", dangling)
	}
	return it.Close()
}

func (s *Store) setCapacity() error {
	s.capacity = s.opts.CapacityBytes
	if s.capacity == 0 {
		free, err := s.freeDisk()
		if err != nil {
			return err
		}
		s.capacity = s.used.Load() + free
	}
	s.reserve = s.opts.ReserveBytes
	if s.reserve == 0 {
		s.reserve = min(s.opts.SegmentBytes, s.capacity/8)
	}
	if s.reserve >= s.capacity {
		return fmt.Errorf("ReserveBytes %d not below capacity %d", s.reserve, s.capacity)
	}
	s.metaReserve = min(metaReserveMax, (s.capacity-s.reserve)/16)
	return nil
}

// metaReserveMax bounds the metadata reserve (Options.ReserveBytes).
const metaReserveMax = 64 << 20
