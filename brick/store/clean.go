package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Clean runs one cleaner pass: it picks the sealed segments whose live
// fraction is below Options.CleanLiveFractionMax, emptiest first, and for
// each copies its live records to the head (as move records, verbatim),
// makes the index durable, and deletes the file. It returns the bytes of
// the segment files deleted; the live bytes they held now sit in the head.
// Safe to run concurrently with Apply and reads; passes are serialized.
// Errors: ctx's, ErrClosed, ErrNoSpace (the reserve is exhausted), I/O.
func (s *Store) Clean(ctx context.Context) (int64, error) {
	s.cleanMu.Lock()
	defer s.cleanMu.Unlock()
	var total int64
	for _, id := range s.victims() {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := s.cleanSegment(ctx, id)
		total += n
		if err != nil {
			return total, fmt.Errorf("clean segment %d: %w", id, err)
		}
	}
	return total, nil
}

// RunCleaner calls Clean every period (1s if every <= 0) until ctx is
// done or the store is closed. Errors are logged.
func (s *Store) RunCleaner(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := s.Clean(ctx)
		switch {
		case errors.Is(err, ErrClosed):
			return
		case err != nil && ctx.Err() == nil:
			s.log.Error("cleaner pass failed", "err", err, "reclaimed", n)
		case n > 0:
			s.log.Debug("cleaner pass", "reclaimed", n)
		}
	}
}

// victims returns the sealed segments worth cleaning, emptiest first.
func (s *Store) victims() []uint64 {
	type cand struct {
		id   uint64
		frac float64
	}
	head := s.headID.Load()
	var cands []cand
	s.mu.RLock()
	for id, seg := range s.mu.segs {
		if id < head {
			cands = append(cands, cand{id: id, frac: float64(seg.size.Load())})
		}
	}
	s.mu.RUnlock()
	s.acct.Lock()
	for i := range cands {
		if size := cands[i].frac; size > 0 {
			cands[i].frac = float64(s.acct.live[cands[i].id]) / size
		}
	}
	s.acct.Unlock()
	cands = slices.DeleteFunc(cands, func(c cand) bool { return c.frac >= s.opts.CleanLiveFractionMax })
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Compare(a.frac, b.frac) })
	ids := make([]uint64, len(cands))
	for i, c := range cands {
		ids[i] = c.id
	}
	return ids
}

// moved is a live record the cleaner copies, and where it was.
type moved struct {
	seg, off uint64
	rec      []byte
}

func (s *Store) cleanSegment(ctx context.Context, id uint64) (int64, error) {
	s.mu.RLock()
	seg := s.mu.segs[id]
	s.mu.RUnlock()
	if seg == nil {
		return 0, nil
	}
	size := seg.size.Load()
	b, err := s.readRange(seg, 0, size)
	if err != nil {
		return 0, err
	}
	live, err := s.liveRecords(id, b)
	if err != nil {
		return 0, err
	}
	if err := s.moveRecords(ctx, live); err != nil {
		return 0, err
	}
	if err := s.syncIndex(); err != nil {
		return 0, err
	}
	// Only Apply and the cleaner change a sealed segment's live bytes, and
	// Apply only lowers them; if any are left, a live record hid from the
	// scan (its header rotted) and the file must stay.
	if n := s.liveBytes(id); n != 0 {
		s.log.Error("segment keeps live records the scan could not find; not deleted", "segment", id, "live", n)
		return 0, nil
	}
	return size, s.dropSegment(seg, size)
}

// liveRecords returns the records of segment id (bytes b) that the index
// still points at.
func (s *Store) liveRecords(id uint64, b []byte) ([]moved, error) {
	var live []moved
	_, err := scanSegment(b, 0, func(recs []scanned) error {
		for _, r := range recs {
			h, rec, off := r.h, r.rec, uint64(r.off)
			switch h.kind {
			case kindMove:
				ih, inner, err := decodeMove(h, rec)
				if err != nil {
					continue
				}
				h, rec, off = ih, inner, off+headerBytes
			case kindRemove:
				continue
			}
			e, ok, err := s.lookup(h.key())
			if err != nil {
				return err
			}
			if ok && e.seg == id && e.off == off {
				live = append(live, moved{seg: id, off: off, rec: rec})
			}
		}
		return nil
	})
	return live, err
}

func (s *Store) lookup(k Key) (entry, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return entry{}, false, ErrClosed
	}
	return getEntry(s.db, k)
}

// moveRecords commits move records for live, in batches through the
// committer, so they are group committed and ordered with Apply batches.
func (s *Store) moveRecords(ctx context.Context, live []moved) error {
	// Keep a batch well inside one segment, so small segments stay small.
	bytesMax := max(s.opts.SegmentBytes/2, moveRecordBytesMax)
	for len(live) > 0 {
		n, bytes := 0, int64(0)
		for n < len(live) && n < BatchOpsMax && bytes+moveRecordBytesMax <= bytesMax {
			bytes += int64(headerBytes + len(live[n].rec))
			n++
		}
		bb := newBatchBuilder(n, int(bytes))
		for _, m := range live[:n] {
			bb = bb.add(header{kind: kindMove, vol: m.seg, block: m.off}, m.rec)
		}
		r := bb.finish()
		r.internal = true
		if err := s.submit(ctx, r); err != nil {
			return err
		}
		live = live[n:]
	}
	return nil
}

// syncIndex makes every index batch committed so far durable.
func (s *Store) syncIndex() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return ErrClosed
	}
	return s.db.LogData(nil, pebble.Sync)
}

// dropSegment deletes a cleaned segment. Taking s.mu exclusively waits out
// readers that looked up a location in it before the moves committed.
// If a crash undoes the unlink, the file comes back with no live records,
// before the watermark, and the next pass deletes it again.
func (s *Store) dropSegment(seg *segment, size int64) error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	delete(s.mu.segs, seg.id)
	err := seg.f.Close()
	s.mu.Unlock()
	if rerr := os.Remove(filepath.Join(s.dir, segName(seg.id))); rerr != nil {
		err = errors.Join(err, rerr)
	}
	s.used.Add(-size)
	s.stats.cleanedBytes.Add(size)
	s.acct.Lock()
	delete(s.acct.live, seg.id)
	s.acct.Unlock()
	return err
}
