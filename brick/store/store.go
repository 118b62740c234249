package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/plumeria-fs/plumeria/internal/limits"
)

// Key names one stored block version.
type Key struct{ Vol, Block, Gen uint64 }

// Entry is what the index knows of a stored block version: a put (its
// data), a tombstone (zeros), or a ref (Ref: no data here, but a payload
// of RefBytes saying where the data is; the store does not read it).
type Entry struct {
	Key
	Seq       uint64
	Tombstone bool
	Ref       bool // never with Tombstone
}

// entryOf is the Entry of index entry e of key k.
func entryOf(k Key, e entry) Entry {
	return Entry{Key: k, Seq: e.seq, Tombstone: e.tomb, Ref: e.ref}
}

// OpKind says what an Op does.
type OpKind uint8

const (
	OpPut       OpKind = iota + 1 // store Data (exactly BlockBytes) at Key with Seq
	OpTombstone                   // store a tombstone at Key with Seq
	OpRemove                      // remove Key entirely (index entry gone; its record becomes garbage)
	OpRef                         // store the payload Ref (exactly RefBytes) at Key with Seq, instead of data
)

// Op is one change of an Apply batch. A ref is a version of the block
// like a put: it hides older gens from the readers above it, prunes as a
// put, and reads back as its payload with Entry.Ref (never as data or as
// zeros). The first ref a store takes moves it to format version 2
// (record.go).
type Op struct {
	Kind OpKind
	Key  Key
	Seq  uint64
	Data []byte // OpPut only, len == limits.BlockBytes
	Ref  []byte // OpRef only, len == RefBytes; opaque to the store (brick/ec.Ref)
}

// Options configure Open. The zero value is usable.
type Options struct {
	// CapacityBytes bounds the bytes of segment files. 0 means the bytes the
	// segments held at Open plus the free space of the file system holding
	// dir. The index (a few dozen bytes per block) is not counted.
	CapacityBytes int64
	// ReserveBytes of the capacity are kept back from Apply for the cleaner,
	// which must copy live records before it can free a segment.
	// 0 means min(SegmentBytes, capacity/8). Of the rest, a metadata
	// reserve of min(64 MiB, rest/16) is kept back from Apply for
	// ApplyReserved (a file system's log and metadata: a full volume still
	// lets it commit, delete and free space).
	ReserveBytes int64
	// SegmentBytes is the size at which the head segment is rolled. 0 means
	// limits.SegmentBytesMax; allowed: [SegmentBytesMin, limits.SegmentBytesMax].
	// A segment exceeds it only when one batch alone is larger.
	SegmentBytes int64
	// CleanLiveFractionMax: Clean picks sealed segments whose live bytes are
	// below this fraction of their size. 0 means 0.5; allowed (0, 1].
	CleanLiveFractionMax float64
	// IndexCacheBytes bounds the memory pebble keeps of the index's blocks
	// (about 60 bytes per stored 4 KiB block: 64 MiB covers ~4 GiB of data
	// without a read of the index from disk). 0 means IndexCacheBytesDefault.
	IndexCacheBytes int64
	// IndexMemTableBytes is pebble's memtable size: index updates gathered
	// in memory before they are written as a table. 0 means
	// IndexMemTableBytesDefault (pebble's own default). Larger is slower
	// for a workload that rewrites the same blocks: a range scan (a
	// decommit, a read) steps over every version the memtable holds (16
	// MiB made the e2e fsx test more than twice as slow).
	IndexMemTableBytes uint64
	// Logger receives the store's and pebble's messages. nil discards them.
	Logger *slog.Logger

	wrapFile func(*os.File) segFile // tests: inject disk faults
	noZero   bool                   // tests: no zeros written ahead (zero.go)
	// freeBytes, if set, replaces the file system's free bytes (statfs)
	// wherever the store asks for them (freeDisk; tests).
	freeBytes func() (int64, error)
}

const (
	// BatchOpsMax bounds the ops of one Apply: one chunk of blocks.
	BatchOpsMax = limits.ChunkBytesMax / limits.BlockBytes
	// SegmentBytesMin bounds Options.SegmentBytes from below.
	SegmentBytesMin = 64 << 10
	// batchBytesMax is the largest encoded batch: ops, then a commit record.
	batchBytesMax = BatchOpsMax*moveRecordBytesMax + headerBytes
	// groupBytesMax bounds one group commit; a group exceeds it by at most
	// one batch.
	groupBytesMax = 16 << 20
	// scanEntriesMax bounds the index entries Scan reads per lock hold.
	scanEntriesMax = 1024
)

// Compile-time relations: each fails to compile if it breaks.
const (
	_ = uint64(limits.SegmentBytesMax - batchBytesMax)   // a batch fits in a segment
	_ = uint64(limits.SegmentBytesMax - SegmentBytesMin) // the default is allowed
)

var (
	ErrNotFound = errors.New("store: block not found")
	ErrCorrupt  = errors.New("store: checksum mismatch")
	ErrNoSpace  = errors.New("store: no space left")
	ErrClosed   = errors.New("store: closed")
	// ErrInvalid reports a malformed Apply batch (unknown kind, wrong data
	// or ref length, more than BatchOpsMax ops); nothing of the batch is
	// written.
	ErrInvalid = errors.New("store: invalid op")
)

// Store is a brick's local block store; see the package doc.
type Store struct {
	dir               string
	opts              Options
	log               *slog.Logger
	db                *pebble.DB
	capacity, reserve int64 // immutable after Open
	metaReserve       int64 // immutable after Open; see Options.ReserveBytes

	// The metadata balloon (balloon.go): owned by the committer once Open
	// returns; balloon is atomic for Stats.
	balloonF      *os.File
	balloonTarget int64
	balloon       atomic.Int64

	reqs          chan *request // Apply → committer; unbuffered
	stop          chan struct{} // closed by Close
	committerDone chan struct{}
	zero          *zeroer // writes zeros ahead of small commits (zero.go)
	closeOnce     sync.Once
	closeErr      error

	head      *segment // owned by the committer once Open returns
	groupBuf  []byte   // owned by the committer (writeAt to a test wrapper)
	groupBufs [][]byte // owned by the committer: the batches of a group commit
	headID    atomic.Uint64
	used      atomic.Int64          // bytes of all segment files
	broken    atomic.Pointer[error] // set once; then every Apply fails with it
	// version is the format version of the index's version key: 1 until
	// the first ref is written (or replayed), then 2 (record.go). Set by
	// Open, then only by the committer (upgradeFormat).
	version atomic.Uint32

	cleanMu sync.Mutex // one cleaner pass at a time

	mu struct {
		sync.RWMutex // held (R) across every use of db or a segment file
		closed       bool
		segs         map[uint64]*segment // every segment file, head included
	}
	acct struct {
		sync.Mutex
		live    map[uint64]int64 // segment id → bytes of indexed records
		entries int64
	}
	stats struct {
		commits, batches, corruptReads, cleanedBytes atomic.Int64
		commitNanos                                  atomic.Int64
	}
}

// Stats is a snapshot of the store's counters.
type Stats struct {
	UsedBytes, LiveBytes, CapacityBytes int64 // segment bytes on disk, bytes of live records, capacity
	Segments                            int
	Entries                             int64
	Commits, Batches                    int64         // fsyncs performed, Apply batches committed (Batches/Commits = batching factor)
	CommitTime                          time.Duration // spent writing and fsyncing group commits
	CorruptReads                        int64
	CleanedBytes                        int64
	BalloonBytes, BalloonTarget         int64 // the metadata balloon's size and target (balloon.go)
	ZeroedBytes                         int64 // zeros written ahead of small commits (zero.go)
}

// IndexMemory reports the index's memory: blocks in pebble's cache (at
// most Options.IndexCacheBytes) and its memtables (a few of
// Options.IndexMemTableBytes). 0 after Close.
func (s *Store) IndexMemory() (cache, memtables int64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return 0, 0
	}
	m := s.db.Metrics()
	return m.BlockCache.Size, int64(m.MemTable.Size)
}

// Stats returns the store's counters. It works after Close too.
func (s *Store) Stats() Stats {
	st := Stats{
		UsedBytes:     s.used.Load(),
		CapacityBytes: s.capacity,
		Commits:       s.stats.commits.Load(),
		Batches:       s.stats.batches.Load(),
		CommitTime:    time.Duration(s.stats.commitNanos.Load()),
		CorruptReads:  s.stats.corruptReads.Load(),
		CleanedBytes:  s.stats.cleanedBytes.Load(),
		BalloonBytes:  s.balloon.Load(),
		BalloonTarget: s.balloonTarget,
		ZeroedBytes:   s.zero.zeroedBytes(),
	}
	s.mu.RLock()
	st.Segments = len(s.mu.segs)
	s.mu.RUnlock()
	s.acct.Lock()
	for _, n := range s.acct.live {
		st.LiveBytes += n
	}
	st.Entries = s.acct.entries
	s.acct.Unlock()
	return st
}

// Close waits for the batch being committed, fails queued ones with
// ErrClosed, makes the index durable and closes the files. Later calls
// return the first call's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.committerDone
		s.zero.close()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.mu.closed = true
		err := s.db.LogData(nil, pebble.Sync)
		s.closeErr = errors.Join(err, s.db.Close(), s.closeFilesLocked())
	})
	return s.closeErr
}

func (s *Store) closeFilesLocked() error {
	var err error
	for _, seg := range s.mu.segs {
		err = errors.Join(err, seg.f.Close())
	}
	return errors.Join(err, s.closeBalloon())
}

// setBroken records an error after which the store cannot promise that
// what it writes matches what it acknowledges; it must be reopened.
func (s *Store) setBroken(err error) {
	err = fmt.Errorf("store unusable, reopen it: %w", err)
	if s.broken.CompareAndSwap(nil, &err) {
		s.log.Error("store broken", "err", err)
	}
}

func (s *Store) brokenErr() error {
	if p := s.broken.Load(); p != nil {
		return *p
	}
	return nil
}

// addDelta merges committed index changes into the accounting.
func (s *Store) addDelta(d *delta) {
	s.acct.Lock()
	defer s.acct.Unlock()
	for id, n := range d.live {
		s.acct.live[id] += n
	}
	s.acct.entries += d.entries
}

func (s *Store) liveBytes(id uint64) int64 {
	s.acct.Lock()
	defer s.acct.Unlock()
	return s.acct.live[id]
}
