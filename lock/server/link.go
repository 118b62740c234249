package server

import (
	"sync"
	"sync/atomic"

	"github.com/plumeria-fs/plumeria/lock"
	"github.com/plumeria-fs/plumeria/lock/lockpb"
)

// link is one clerk session's stream as the loop sees it: an outbox the
// loop fills without blocking and the stream's writer drains.
type link struct {
	key    sessionKey    // immutable
	seq    uint64        // immutable: order of creation; the newest stream of a session wins
	notify chan struct{} // capacity 1: the outbox became non-empty
	mu     struct {
		sync.Mutex
		out []lock.Message // bounded by OutboxMessagesMax
	}
}

var linkSeq atomic.Uint64

func newLink(key sessionKey) *link {
	return &link{key: key, seq: linkSeq.Add(1), notify: make(chan struct{}, 1)}
}

// enqueue adds m to the outbox; false if the outbox is full.
func (l *link) enqueue(m lock.Message) bool {
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
	return !full
}

// take removes and returns up to n messages from the outbox.
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

// write sends the outbox in frames until quit is closed or a send fails.
func (l *link) write(stream lockpb.Lock_SessionServer, quit <-chan struct{}) error {
	for {
		select {
		case <-l.notify:
		case <-quit:
			return nil
		}
		for {
			batch := l.take(lockpb.FrameMessagesMax)
			if batch == nil {
				break
			}
			if err := stream.Send(lockpb.EncodeServer(batch)); err != nil {
				return err
			}
		}
	}
}
