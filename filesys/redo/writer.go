package redo

import (
	"context"
	"fmt"
	"time"
)

// job is one batch for the writer: its header and its encoded sectors.
type job struct {
	h     header
	buf   []byte
	final bool // the close marker: the writer exits after it
}

type action int

const (
	actIdle action = iota
	actWrite
	actExit
)

// run is the writer goroutine: it alone writes to the device, one batch at
// a time. Records appended while a write is in flight gather in pending and
// go out together in the next batch (group commit, Calaveras §5).
func (l *Log) run(ctx context.Context) {
	defer close(l.done)
	timer := time.NewTimer(l.opts.FlushInterval)
	timer.Stop()
	armed := false
	for {
		l.mu.Lock()
		j, act := l.planLocked()
		pending := len(l.mu.pending) > 0
		l.mu.Unlock()
		switch act {
		case actExit:
			timer.Stop()
			return
		case actWrite:
			if l.opts.BeforeWrite != nil {
				if err := l.opts.BeforeWrite(); err != nil {
					l.fail(fmt.Errorf("redo: before writing %s: %w", j.describe(), err))
					continue
				}
			}
			if err := l.writeJob(ctx, j); err != nil {
				l.fail(fmt.Errorf("redo: write %s: %w", j.describe(), err))
				continue
			}
			if l.opts.AfterWrite != nil {
				l.opts.AfterWrite(j.written())
			}
			l.mu.Lock()
			l.completeLocked(j)
			l.mu.Unlock()
			continue
		}
		// Idle: records nobody waits for go out within FlushInterval.
		if pending && !armed {
			timer.Reset(l.opts.FlushInterval)
			armed = true
		} else if !pending && armed {
			timer.Stop()
			armed = false
		}
		select {
		case <-l.kick:
		case <-timer.C:
			armed = false
			l.mu.Lock()
			l.mu.flushDue = len(l.mu.pending) > 0
			l.mu.Unlock()
		}
	}
}

// planLocked decides the writer's next step.
func (l *Log) planLocked() (job, action) {
	if l.mu.err != nil || l.mu.finished {
		return job{}, actExit
	}
	urgent := l.mu.want > l.mu.durable || l.mu.flushDue || l.mu.closing
	if len(l.mu.pending) > 0 && urgent {
		if j, ok := l.batchLocked(); ok {
			return j, actWrite
		}
		// Full as far as the disk knows. If Release freed space since the
		// last batch, a one-sector marker tells the disk, and frees it.
		if l.tailPosLocked() > l.mu.diskTail {
			return l.markerLocked(0), actWrite
		}
		// Unreachable while the invariant of batchLocked holds.
		l.mu.err = fmt.Errorf("redo: internal error: %d pending records do not fit: head %d, disk tail %d, reserved %d", len(l.mu.pending), l.mu.head, l.mu.diskTail, l.mu.reserved)
		l.wakeAllLocked()
		return job{}, actExit
	}
	if l.mu.closing && len(l.mu.pending) == 0 {
		var flags uint16
		if l.mu.released+1 == l.mu.nextLSN {
			flags = flagClean
		}
		j := l.markerLocked(flags)
		j.final = true
		return j, actWrite
	}
	return job{}, actIdle
}

// batchLocked takes the longest prefix of pending that fits in one batch
// (at most half the log) and in the space free on disk, keeping one sector
// free for a marker. The space free on disk ends at diskTail, not at the
// released tail: until a durable header says so, Recover still starts at
// diskTail, and a torn batch must not have overwritten what it reads.
//
// Append keeps head-tailPos+reserved+2 sectors <= Size, and a batch of
// records takes no more than their charges (a batch packs at least as well
// as one batch per record), so at most one marker (which moves diskTail up
// to tailPos) stands between the writer and room for every pending record:
// Invariant: head-diskTail+reserved+1 sector <= Size, or it holds once a
// marker is written.
func (l *Log) batchLocked() (job, bool) {
	free := l.opts.Size - (l.mu.head - l.mu.diskTail)
	n, payload, charged := 0, 0, uint64(0)
	for n < len(l.mu.pending) {
		p := payload + len(l.mu.pending[n].enc)
		b := uint64(batchBytes(p))
		if b > l.opts.Size/2 || b+sectorBytes > free {
			break
		}
		payload = p
		charged += l.mu.pending[n].charge
		n++
	}
	if n == 0 {
		return job{}, false
	}
	buf := make([]byte, 0, payload)
	for _, p := range l.mu.pending[:n] {
		buf = append(buf, p.enc...)
	}
	h := header{
		pos:      l.mu.head,
		firstLSN: l.mu.pending[0].lsn,
		count:    uint32(n),
		tailPos:  l.tailPosLocked(),
	}
	h.tailLSN = min(l.mu.released+1, h.next())
	clear(l.mu.pending[:n])
	l.mu.pending = l.mu.pending[n:]
	l.mu.reserved -= charged
	if len(l.mu.pending) == 0 {
		l.mu.pending = nil
		l.mu.flushDue = false
	}
	j := job{h: h, buf: encodeBatch(h, buf)}
	l.mu.head += uint64(len(j.buf))
	l.mu.batches = append(l.mu.batches, span{pos: h.pos, end: l.mu.head, first: h.firstLSN, next: h.next()})
	return j, true
}

// markerLocked makes a batch without records that records the current tail.
// It is one sector: a crash writes it whole or not at all.
func (l *Log) markerLocked(flags uint16) job {
	h := header{
		flags:    flags,
		pos:      l.mu.head,
		firstLSN: l.mu.durable + 1,
		tailPos:  l.tailPosLocked(),
	}
	h.tailLSN = min(l.mu.released+1, h.next())
	j := job{h: h, buf: encodeBatch(h, nil)}
	l.mu.head += uint64(len(j.buf))
	return j
}

// completeLocked records that j is durable and wakes its waiters.
func (l *Log) completeLocked(j job) {
	l.mu.durable = max(l.mu.durable, j.h.next()-1)
	l.mu.diskTail = j.h.tailPos
	l.mu.stats.Bytes += uint64(len(j.buf))
	if j.h.count > 0 {
		l.mu.stats.Batches++
		l.mu.stats.Records += uint64(j.h.count)
	} else {
		l.mu.stats.Markers++
	}
	if j.final {
		l.mu.finished = true
	}
	if l.mu.blocked > 0 || l.usedLocked() > l.opts.Size/2 {
		l.signal(l.pressure)
	}
	close(l.mu.durableCh)
	l.mu.durableCh = make(chan struct{})
}

// writeJob writes j's sectors: one WriteAt, or two where the batch wraps.
func (l *Log) writeJob(ctx context.Context, j job) error {
	off := j.h.pos % l.opts.Size
	first, second := j.buf, []byte(nil)
	if off+uint64(len(j.buf)) > l.opts.Size {
		n := l.opts.Size - off
		first, second = j.buf[:n], j.buf[n:]
	}
	if err := l.dev.WriteAt(ctx, first, l.opts.Base+off); err != nil {
		return err
	}
	if len(second) > 0 {
		return l.dev.WriteAt(ctx, second, l.opts.Base)
	}
	return nil
}

func (j job) written() Written {
	return Written{Records: int(j.h.count), First: j.h.firstLSN, Last: j.h.next() - 1, Bytes: len(j.buf)}
}

func (j job) describe() string {
	if j.h.count == 0 {
		return fmt.Sprintf("marker at log position %d", j.h.pos)
	}
	return fmt.Sprintf("batch at log position %d (LSN %d..%d)", j.h.pos, j.h.firstLSN, j.h.next()-1)
}

// fail makes err sticky, unless an error already is, and wakes every waiter.
func (l *Log) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.err == nil {
		l.mu.err = err
	}
	l.wakeAllLocked()
}

// wakeAllLocked wakes every Wait and Append.
func (l *Log) wakeAllLocked() {
	close(l.mu.durableCh)
	l.mu.durableCh = make(chan struct{})
	close(l.mu.spaceCh)
	l.mu.spaceCh = make(chan struct{})
}
