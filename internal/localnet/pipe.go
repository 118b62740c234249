package localnet

import (
	"io"
	"os"
	"sync"
	"time"
)

// pipe is one direction of a connection: a ring buffer written by one end
// and read by the other, from pipeBytesMin (at the first write) growing to
// PipeBytes while the reader lags. A writer waits while
// it is full and a reader while it is empty, as a socket's would; each end
// may set a deadline for its own side.
type pipe struct {
	mu    sync.Mutex
	cond  sync.Cond // signalled when data, room, a close or a deadline comes
	buf   []byte    // allocated at the first write (an idle conn holds none), grown when full
	r, n  int       // read offset and bytes buffered
	rdead deadline
	wdead deadline
	// closedR: the reader closed (writes fail, reads fail); closedW: the
	// writer closed (reads drain what is left, then io.EOF).
	closedR, closedW bool
}

func newPipe() *pipe {
	p := &pipe{}
	p.cond.L = &p.mu
	return p
}

// Read copies what is buffered into b, waiting for data.
func (p *pipe) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.n == 0 {
		switch {
		case p.closedR:
			return 0, io.ErrClosedPipe
		case p.closedW:
			return 0, io.EOF
		case p.rdead.passed():
			return 0, os.ErrDeadlineExceeded
		}
		p.cond.Wait()
	}
	if p.closedR { // this end closed with bytes still buffered
		return 0, io.ErrClosedPipe
	}
	total := 0
	for total < len(b) && p.n > 0 {
		end := min(p.r+p.n, len(p.buf))
		c := copy(b[total:], p.buf[p.r:end])
		total += c
		p.r = (p.r + c) % len(p.buf)
		p.n -= c
	}
	if p.n == 0 {
		p.r = 0
	}
	p.cond.Broadcast()
	return total, nil
}

// Write copies b into the buffer, waiting for room as the reader drains it.
func (p *pipe) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.buf == nil && len(b) > 0 {
		p.buf = make([]byte, pipeBytesMin)
	}
	done := 0
	for done < len(b) {
		if p.n == len(p.buf) && len(p.buf) < PipeBytes {
			p.grow()
		}
		for p.n == len(p.buf) {
			switch {
			case p.closedR || p.closedW:
				return done, io.ErrClosedPipe
			case p.wdead.passed():
				return done, os.ErrDeadlineExceeded
			}
			p.cond.Wait()
		}
		switch {
		case p.closedR || p.closedW:
			return done, io.ErrClosedPipe
		case p.wdead.passed():
			return done, os.ErrDeadlineExceeded
		}
		w := (p.r + p.n) % len(p.buf)
		end := len(p.buf)
		if w < p.r {
			end = p.r
		}
		c := copy(p.buf[w:end], b[done:])
		done += c
		p.n += c
		p.cond.Broadcast()
	}
	return done, nil
}

// grow doubles the buffer (at most PipeBytes), its bytes moved to the
// start: a connection that carries bulk data gets the room a socket
// would have, an idle or chatty one keeps a small buffer.
func (p *pipe) grow() {
	nb := make([]byte, min(2*len(p.buf), PipeBytes))
	c := copy(nb, p.buf[p.r:min(p.r+p.n, len(p.buf))])
	copy(nb[c:], p.buf[:p.n-c])
	p.buf, p.r = nb, 0
}

// closeRead is the reading end's close: both directions of use fail.
func (p *pipe) closeRead() {
	p.mu.Lock()
	p.closedR = true
	p.cond.Broadcast()
	p.mu.Unlock()
}

// closeWrite is the writing end's close: the reader gets what is left, then
// io.EOF.
func (p *pipe) closeWrite() {
	p.mu.Lock()
	p.closedW = true
	p.cond.Broadcast()
	p.mu.Unlock()
}

// setReadDeadline and setWriteDeadline wake the waiters of their side
// when t passes (zero t: none).
func (p *pipe) setReadDeadline(t time.Time)  { p.set(&p.rdead, t) }
func (p *pipe) setWriteDeadline(t time.Time) { p.set(&p.wdead, t) }

func (p *pipe) set(d *deadline, t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	d.at = t
	if t.IsZero() {
		return
	}
	wait := time.Until(t)
	if wait <= 0 {
		p.cond.Broadcast()
		return
	}
	d.timer = time.AfterFunc(wait, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
}

// deadline is one side's deadline; guarded by the pipe's mu.
type deadline struct {
	at    time.Time
	timer *time.Timer
}

func (d *deadline) passed() bool { return !d.at.IsZero() && !time.Now().Before(d.at) }
