package redo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Device is where the log lives: the caller gives the log a byte range
// [Base, Base+Size) of a volume.
type Device interface {
	// ReadAt fills p from off. Bytes never written read as zeros.
	ReadAt(ctx context.Context, p []byte, off uint64) error
	// WriteAt writes p at off; the bytes are durable when it returns nil.
	WriteAt(ctx context.Context, p []byte, off uint64) error
}

// Update replaces bytes [Off, Off+len(Data)) of the metadata block at Addr
// (a multiple of 4096), whose version becomes Version.
type Update struct {
	Addr    uint64
	Version uint64
	Off     uint16
	Data    []byte
}

// LSN is the log sequence number of a record (one Append). LSNs increase by
// one per record and are never reused over the life of the log region; the
// first is 1.
type LSN uint64

// Options configure a log region.
type Options struct {
	// Base and Size delimit the log region; multiples of 4096; Size is at
	// least 64 KiB and at most 1 GiB (Open and Recover read it whole).
	Base, Size uint64
	// FlushInterval bounds how long an appended record waits to be written
	// when nobody Waits for it (0: 100ms).
	FlushInterval time.Duration
	// OnPressure is called when more than half of the log is unreleased,
	// or an Append waits for space: the owner should write blocks back and
	// Release. Records whose blocks it may write are those <= Durable; it
	// may also Sync first. It runs on a goroutine
	// of its own, one call at a time, with no lock of the log held, again
	// and again while the pressure lasts. It must not call Close.
	OnPressure func()
	// BeforeWrite, if set, is called before each write to the log region
	// and may block: the owner waits there for data that must be on the
	// device before the records being written (ordered data).
	// An error fails the log instead (nothing more is written).
	BeforeWrite func() error
	// AfterWrite, if set, is called with what was written once a batch or
	// marker is durable, before the waiters of its records are woken.
	// Both hooks run on the writer goroutine with no lock of the log held,
	// and come in pairs around each write (none for the open marker Open
	// writes, no AfterWrite for a write that failed), so the owner may
	// time the device write between them. AfterWrite must not block.
	AfterWrite func(Written)
}

// Written describes one write of the log: a batch of records, or a marker.
type Written struct {
	Records     int // 0 for a marker
	First, Last LSN // the records' LSNs; Last = First-1 for a marker
	Bytes       int // bytes written to the region
}

// FlushIntervalDefault is the FlushInterval used when Options leave it 0.
const FlushIntervalDefault = 100 * time.Millisecond

// Sentinel errors. Errors returned by Log and Recover wrap these, or the
// Device's error, with what failed.
var (
	// ErrTooBig: Append of a record bigger than half the log.
	ErrTooBig = errors.New("redo: record too big for the log")
	// ErrBadUpdate: an Update whose address or byte range does not fit a
	// 4096-byte metadata block.
	ErrBadUpdate = errors.New("redo: bad update")
	// ErrClosed: the log was closed (Append, Wait) or Close gave up.
	ErrClosed = errors.New("redo: log closed")
	// ErrCorrupt: Recover found a broken chain of batches between the
	// tail and the end of the log, which no crash can leave.
	ErrCorrupt = errors.New("redo: log corrupt")
	// ErrOptions: Options that Open or Recover cannot use.
	ErrOptions = errors.New("redo: bad options")
)

// Stats count the log's work since Open.
type Stats struct {
	Batches uint64 // writes carrying records
	Records uint64 // records written
	Bytes   uint64 // bytes written, markers included
	Waits   uint64 // Wait and Sync calls that had to block
	Markers uint64 // batches without records: open, tail and close markers
}

// BatchingFactor is Records/Batches: records per log write (Calaveras §7
// calls it batching efficiency).
func (s Stats) BatchingFactor() float64 {
	if s.Batches == 0 {
		return 0
	}
	return float64(s.Records) / float64(s.Batches)
}

// Log is an open redo log region. One writer goroutine owns the device; see
// the package doc for the guarantees.
type Log struct {
	dev      Device
	opts     Options       // immutable after Open
	kick     chan struct{} // cap 1: something for the writer to look at
	pressure chan struct{} // cap 1: wakes the OnPressure goroutine
	quit     chan struct{} // closed by Close: the OnPressure goroutine exits
	done     chan struct{} // closed when the writer goroutine has exited
	cancel   context.CancelFunc
	once     sync.Once
	closeErr error

	mu struct {
		sync.Mutex
		err      error // sticky: the first device error, or ErrClosed if Close gave up
		closing  bool  // Close was called: no more Appends
		finished bool  // the writer wrote the close marker and exited
		nextLSN  LSN   // LSN of the next Append
		pending  []pendingRecord
		blocked  int    // Appends waiting for space
		reserved uint64 // bytes charged to pending: each record as a batch of its own
		want     LSN    // highest LSN a Wait asked for
		flushDue bool   // the flush timer fired with records pending
		durable  LSN    // every record <= durable is on disk
		released LSN    // every record <= released is installed (Release)
		head     uint64 // log position of the next batch
		batches  []span // batches written or in flight with unreleased records, oldest first
		diskTail uint64 // tailPos of the newest durable batch: bytes from here on are Recover's
		// durableCh and spaceCh are closed and replaced to wake every waiter:
		// durableCh when durable or err changes, spaceCh on Release, err or Close.
		durableCh chan struct{}
		spaceCh   chan struct{}
		stats     Stats
	}
}

type pendingRecord struct {
	lsn    LSN
	enc    []byte
	charge uint64 // batchBytes(len(enc)): what it may take on disk
}

// span is the place and records of a written batch: [pos,end), [first,next).
type span struct {
	pos, end    uint64
	first, next LSN
}

func (o *Options) check() error {
	switch {
	case o.Base%regionAlignBytes != 0 || o.Size%regionAlignBytes != 0:
		return fmt.Errorf("region [%d,+%d) not aligned to %d: %w", o.Base, o.Size, regionAlignBytes, ErrOptions)
	case o.Size < regionBytesMin || o.Size > regionBytesMax:
		return fmt.Errorf("region size %d outside [%d,%d]: %w", o.Size, regionBytesMin, regionBytesMax, ErrOptions)
	case o.Base+o.Size < o.Base:
		return fmt.Errorf("region [%d,+%d) overflows: %w", o.Base, o.Size, ErrOptions)
	case o.FlushInterval < 0:
		return fmt.Errorf("negative flush interval %v: %w", o.FlushInterval, ErrOptions)
	}
	if o.FlushInterval == 0 {
		o.FlushInterval = FlushIntervalDefault
	}
	return nil
}

// Open opens the log region for writing. It finds the end of whatever the
// region holds and writes an open marker there that releases every earlier
// record: call Recover first if the log may hold records of a crash. Records
// appended afterwards get LSNs above any in the region.
func Open(ctx context.Context, dev Device, opts Options) (*Log, error) {
	if err := opts.check(); err != nil {
		return nil, fmt.Errorf("redo: open: %w", err)
	}
	region, err := readRegion(ctx, dev, opts)
	if err != nil {
		return nil, err
	}
	s := scanRegion(region, false)
	if s.end >= positionMax/2 || s.nextLSN >= positionMax/2 {
		return nil, fmt.Errorf("redo: open: log position %d or LSN %d near the format's limit %d: %w", s.end, s.nextLSN, uint64(positionMax), ErrCorrupt)
	}
	l := &Log{
		dev:      dev,
		opts:     opts,
		kick:     make(chan struct{}, 1),
		pressure: make(chan struct{}, 1),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	l.mu.nextLSN = s.nextLSN
	l.mu.durable = s.nextLSN - 1
	l.mu.released = s.nextLSN - 1
	l.mu.head = s.end
	l.mu.diskTail = s.tailPos
	l.mu.durableCh = make(chan struct{})
	l.mu.spaceCh = make(chan struct{})
	// The open marker is one sector, which a crash writes whole or not at
	// all, so it may overwrite the oldest bytes of an unreleased tail.
	j := l.markerLocked(0)
	if err := l.writeJob(ctx, j); err != nil {
		return nil, fmt.Errorf("redo: open: write marker at position %d: %w", j.h.pos, err)
	}
	l.completeLocked(j)
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel = cancel
	go l.run(wctx)
	if opts.OnPressure != nil {
		go l.pressureLoop()
	}
	return l, nil
}

// Append queues one record and returns its LSN; the record is replayed
// whole or not at all. It copies ups. It does not wait for I/O unless the
// log is full, in which case it waits until Release frees space or Close.
// A record Append accepted needs no further Release to become durable: an
// OnPressure handler may Sync before it writes blocks back.
// Errors: ErrBadUpdate, ErrTooBig, ErrClosed, or the sticky device error.
func (l *Log) Append(ups []Update) (LSN, error) {
	for _, u := range ups {
		if err := checkUpdate(u); err != nil {
			return 0, err
		}
	}
	n := recordBytes(ups)
	charge := uint64(batchBytes(n))
	if charge > l.opts.Size/2 {
		return 0, fmt.Errorf("redo: append of %d updates: %d bytes on disk, half the log is %d: %w", len(ups), charge, l.opts.Size/2, ErrTooBig)
	}
	enc := appendRecord(make([]byte, 0, n), ups)
	l.mu.Lock()
	for {
		if err := l.mu.err; err != nil {
			l.mu.Unlock()
			return 0, err
		}
		if l.mu.closing {
			l.mu.Unlock()
			return 0, fmt.Errorf("redo: append: %w", ErrClosed)
		}
		// Room for the record, one marker and the sector batchLocked keeps
		// free: then the writer can write every accepted record with no
		// further Release (see batchLocked).
		if l.usedLocked()+charge+2*sectorBytes <= l.opts.Size {
			break
		}
		ch := l.mu.spaceCh
		l.mu.blocked++
		l.mu.Unlock()
		l.signal(l.pressure)
		<-ch
		l.mu.Lock()
		l.mu.blocked--
	}
	lsn := l.mu.nextLSN
	l.mu.nextLSN++
	l.mu.pending = append(l.mu.pending, pendingRecord{lsn: lsn, enc: enc, charge: charge})
	l.mu.reserved += charge
	first := len(l.mu.pending) == 1
	over := l.usedLocked() > l.opts.Size/2
	l.mu.Unlock()
	if first {
		l.signal(l.kick) // the writer arms the flush timer
	}
	if over {
		l.signal(l.pressure)
	}
	return lsn, nil
}

// usedLocked is the unreleased bytes of the log: from the oldest batch with
// an unreleased record to the head, plus what pending records may take.
func (l *Log) usedLocked() uint64 {
	return l.mu.head - l.tailPosLocked() + l.mu.reserved
}

// tailPosLocked is the position of the oldest batch with an unreleased
// record, or the head if there is none. It forgets released batches.
func (l *Log) tailPosLocked() uint64 {
	i := 0
	for i < len(l.mu.batches) && l.mu.batches[i].next <= l.mu.released+1 {
		i++
	}
	l.mu.batches = l.mu.batches[i:]
	if len(l.mu.batches) == 0 {
		return l.mu.head
	}
	return l.mu.batches[0].pos
}

// Wait returns when record lsn and all before it are durable. Errors: the
// sticky device error, ErrClosed, ctx's error, or an lsn never appended.
func (l *Log) Wait(ctx context.Context, lsn LSN) error {
	l.mu.Lock()
	if lsn >= l.mu.nextLSN {
		next := l.mu.nextLSN
		l.mu.Unlock()
		return fmt.Errorf("redo: wait for LSN %d: only %d appended", lsn, next-1)
	}
	counted := false
	for l.mu.durable < lsn {
		if err := l.mu.err; err != nil {
			l.mu.Unlock()
			return err
		}
		if l.mu.want < lsn {
			l.mu.want = lsn
			l.signal(l.kick)
		}
		if !counted {
			l.mu.stats.Waits++
			counted = true
		}
		ch := l.mu.durableCh
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("redo: wait for LSN %d: %w", lsn, ctx.Err())
		}
		l.mu.Lock()
	}
	l.mu.Unlock()
	return nil
}

// Sync returns when everything appended so far is durable.
func (l *Log) Sync(ctx context.Context) error {
	l.mu.Lock()
	last := l.mu.nextLSN - 1
	l.mu.Unlock()
	return l.Wait(ctx, last)
}

// Durable is the highest LSN such that it and every record before it are
// durable: the records whose blocks the owner may write in place.
func (l *Log) Durable() LSN {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.durable
}

// Release declares every record <= lsn installed in place: its space may be
// reused and Recover will not return it. Releasing less than before does
// nothing; lsn beyond the last appended record means the last appended.
func (l *Log) Release(lsn LSN) {
	l.mu.Lock()
	lsn = min(lsn, l.mu.nextLSN-1)
	if lsn <= l.mu.released {
		l.mu.Unlock()
		return
	}
	l.mu.released = lsn
	close(l.mu.spaceCh)
	l.mu.spaceCh = make(chan struct{})
	l.mu.Unlock()
	l.signal(l.kick)
}

// Stats returns the counters since Open.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.stats
}

// Close writes every appended record, then a close marker, and stops the
// writer. If every record was released, a later Recover finds nothing to
// replay (a clean unmount leaves an empty log). If ctx ends first, Close
// stops the writer where it is, with ErrClosed for later calls. Close
// returns the sticky device error if there was one; calling it again
// returns the same result.
func (l *Log) Close(ctx context.Context) error {
	l.once.Do(func() { l.closeErr = l.close(ctx) })
	return l.closeErr
}

func (l *Log) close(ctx context.Context) error {
	l.mu.Lock()
	l.mu.closing = true
	close(l.mu.spaceCh) // blocked Appends return ErrClosed
	l.mu.spaceCh = make(chan struct{})
	l.mu.Unlock()
	l.signal(l.kick)
	defer close(l.quit)
	defer l.cancel()
	select {
	case <-l.done:
	case <-ctx.Done():
		select {
		case <-l.done: // finished after all
		default:
			l.fail(fmt.Errorf("redo: close gave up before the log was written: %w", ErrClosed))
			l.cancel()
			<-l.done
			return fmt.Errorf("redo: close: %w", ctx.Err())
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.err // already says what failed
}

// signal wakes the goroutine reading ch without blocking.
func (l *Log) signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (l *Log) pressureLoop() {
	for {
		select {
		case <-l.pressure:
			l.opts.OnPressure()
		case <-l.quit:
			return
		}
	}
}
