package node

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/plumeria-fs/plumeria/lock"
	lockserver "github.com/plumeria-fs/plumeria/lock/server"
)

// cutCoord is a coordinator whose event stream can be cut, as when no
// heartbeat reaches the real coordinator for a lease.
type cutCoord struct {
	lockserver.Coordinator
	cut    chan struct{}
	events *atomic.Int32
}

func (c cutCoord) Events(ctx context.Context) (<-chan lock.Message, error) {
	c.events.Add(1)
	in, err := c.Coordinator.Events(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan lock.Message)
	go func() {
		defer close(out)
		for {
			select {
			case m, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- m:
				case <-c.cut:
					return
				}
			case <-c.cut:
				return
			}
		}
	}()
	return out, nil
}

// TestLockRoleReincarnates: a lock server that lost its coordinator starts
// a new incarnation, which subscribes again, instead of leaving the node
// without a lock service.
func TestLockRoleReincarnates(t *testing.T) {
	mem := lockserver.NewMemCoordinator(4)
	var events atomic.Int32
	cuts := make(chan chan struct{}, 4)
	r := &lockRole{name: "l1", addr: "127.0.0.1:1", log: slog.New(slog.DiscardHandler)}
	r.coord = func() lockserver.Coordinator {
		cut := make(chan struct{})
		cuts <- cut
		return cutCoord{Coordinator: mem.Server("l1", "127.0.0.1:1"), cut: cut, events: &events}
	}
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	first := r.cur.Load()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, func() bool { return events.Load() == 1 })
	close(<-cuts)
	waitFor(t, func() bool { return events.Load() == 2 })
	if r.cur.Load() == first {
		t.Fatal("the stopped incarnation still serves")
	}
}
