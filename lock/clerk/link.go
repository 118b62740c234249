package clerk

import (
	"context"
	"errors"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/plumeria-fs/plumeria/lock"
	"github.com/plumeria-fs/plumeria/lock/lockpb"
)

// OutboxMessagesMax bounds the messages queued for one lock server; more
// are dropped (the protocol resends what matters).
const OutboxMessagesMax = 1 << 16

// link is the clerk's connection to one lock server: an outbox filled
// under the clerk's mutex and a goroutine that keeps a stream open and
// drains it. Messages queued while the stream is down wait for the next
// one (they may be stale by then: the protocol tolerates that).
type link struct {
	addr   string             // immutable
	notify chan struct{}      // capacity 1: the outbox became non-empty
	cancel context.CancelFunc // ends the link's goroutine
	mu     struct {
		sync.Mutex
		out []lock.Message
	}
}

func (l *link) enqueue(m lock.Message) {
	l.mu.Lock()
	full := len(l.mu.out) >= OutboxMessagesMax
	if !full {
		l.mu.out = append(l.mu.out, m)
	}
	l.mu.Unlock()
	if !full {
		select {
		case l.notify <- struct{}{}:
		default:
		}
	}
}

func (l *link) take(n int) []lock.Message {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := min(n, len(l.mu.out))
	if k == 0 {
		return nil
	}
	batch := l.mu.out[:k:k]
	if k == len(l.mu.out) {
		l.mu.out = nil
	} else {
		l.mu.out = l.mu.out[k:]
	}
	return batch
}

// resolve keeps the owners map and the links current until ctx ends.
func (c *Clerk) resolve(ctx context.Context, wg *sync.WaitGroup) {
	backoff := backoffMin
	for {
		owners, epoch, err := c.cfg.Servers.Owners(ctx)
		var changed <-chan struct{}
		wait := resolveInterval
		if err != nil {
			c.log.Warn("cannot resolve lock group owners", "err", err)
			wait = jitter(backoff)
			backoff = min(2*backoff, backoffMax)
		} else {
			backoff = backoffMin
			c.setOwners(ctx, wg, owners)
			changed = c.cfg.Servers.Changed(epoch)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-changed:
		case <-c.kick:
		case <-timer.C:
		}
		timer.Stop()
		if ctx.Err() != nil {
			return
		}
	}
}

// setOwners installs a new owners map: links to new servers start, links
// to servers that own nothing any more end.
func (c *Clerk) setOwners(ctx context.Context, wg *sync.WaitGroup, owners map[int]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.owners = maps.Clone(owners)
	want := map[string]bool{}
	for _, a := range owners {
		want[a] = true
	}
	for _, a := range slices.Sorted(maps.Keys(c.mu.links)) {
		if !want[a] {
			c.mu.links[a].cancel()
			delete(c.mu.links, a)
		}
	}
	for _, a := range slices.Sorted(maps.Keys(want)) {
		if c.mu.links[a] != nil {
			continue
		}
		lctx, cancel := context.WithCancel(ctx)
		ln := &link{addr: a, notify: make(chan struct{}, 1), cancel: cancel}
		c.mu.links[a] = ln
		if c.mu.renew != nil {
			// Tell the new server of this session and its tables now, not
			// at the next renewal. Its acknowledgement counts from when the
			// renewal was made, which is earlier than sent: the safe side.
			ln.enqueue(*c.mu.renew)
		}
		wg.Add(1)
		go func() { defer wg.Done(); c.serve(lctx, ln) }()
	}
}

func (c *Clerk) kickResolver() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// serve keeps a stream to ln's server open until ctx ends, with backoff
// between attempts.
func (c *Clerk) serve(ctx context.Context, ln *link) {
	conn, err := c.cfg.Dial(ln.addr)
	if err != nil {
		c.log.Error("cannot dial lock server", "server", ln.addr, "err", err)
		return
	}
	defer conn.Close()
	client := lockpb.NewLockClient(conn)
	backoff := backoffMin
	for {
		heard, err := c.session(ctx, client, ln)
		if ctx.Err() != nil {
			return
		}
		c.log.Debug("lock server stream ended", "server", ln.addr, "err", err)
		c.kickResolver() // the server may have lost its groups or died
		if heard {
			backoff = backoffMin
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(jitter(backoff)):
		}
		backoff = min(2*backoff, backoffMax)
	}
}

// session runs one stream: a hello naming the session, then the outbox out
// and the server's frames in, until either side fails. heard reports
// whether the server sent anything.
func (c *Clerk) session(ctx context.Context, client lockpb.LockClient, ln *link) (heard bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Session(ctx)
	if err != nil {
		return false, err
	}
	if err := stream.Send(lockpb.EncodeClerk(c.cfg.ID, c.cfg.Session, nil)); err != nil {
		return false, err
	}
	var rerr error
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		heard, rerr = c.read(stream, ln)
	}()
	werr := c.write(stream, ln, readDone)
	cancel() // ends the reader if the writer failed first
	<-readDone
	if werr != nil {
		return heard, werr
	}
	return heard, rerr
}

// write sends the outbox in frames until the reader is done or a send
// fails.
func (c *Clerk) write(stream lockpb.Lock_SessionClient, ln *link, readDone <-chan struct{}) error {
	for {
		for {
			batch := ln.take(lockpb.FrameMessagesMax)
			if batch == nil {
				break
			}
			if err := stream.Send(lockpb.EncodeClerk(c.cfg.ID, c.cfg.Session, batch)); err != nil {
				return err
			}
		}
		select {
		case <-ln.notify:
		case <-readDone:
			return nil
		}
	}
}

// read steps the server's frames into the clerk until the stream ends.
func (c *Clerk) read(stream lockpb.Lock_SessionClient, ln *link) (heard bool, err error) {
	for {
		f, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return heard, errors.New("lock server closed the stream")
		}
		if err != nil {
			return heard, err
		}
		heard = true
		msgs, err := lockpb.DecodeServer(f, c.cfg.ID, c.cfg.Session)
		if err != nil {
			return heard, err // a broken server: reconnect, maybe to another
		}
		c.receive(ln.addr, msgs)
	}
}

// jitter returns a duration in [d/2, d).
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}
