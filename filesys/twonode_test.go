package filesys

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/lock"
)

// lockHub is an in-process lock service for nodes sharing one device in
// a test: sticky reader/writer locks, a holder's Revoke called (with no
// local user of the lock) before a conflicting grant, and dead nodes
// whose locks stay held until dropped (after their log is replayed).
type lockHub struct {
	mu    sync.Mutex
	cond  *sync.Cond
	nodes map[string]*FS
	held  map[uint64]map[string]lock.Mode
	pins  map[uint64]map[string]int
	wait  map[uint64]int // acquirers waiting for a lock
	dead  map[string]bool
}

func newLockHub() *lockHub {
	h := &lockHub{nodes: map[string]*FS{}, held: map[uint64]map[string]lock.Mode{},
		pins: map[uint64]map[string]int{}, wait: map[uint64]int{}, dead: map[string]bool{}}
	h.cond = sync.NewCond(&h.mu)
	return h
}

// hubLocker is one node's clerk of a lockHub.
type hubLocker struct {
	hub *lockHub
	id  string
}

func (h *lockHub) locker(id string) hubLocker { return hubLocker{h, id} }

// open mounts a node of dev on the hub.
func (h *lockHub) open(t *testing.T, dev *memDevice, id string, session uint64) *FS {
	t.Helper()
	fs, err := Open(context.Background(), Config{Dev: dev, Locker: h.locker(id), Table: "v", ID: id, Session: session, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.nodes[id] = fs
	h.mu.Unlock()
	return fs
}

// crash marks node id dead: it keeps its locks until drop.
func (h *lockHub) crash(id string) {
	h.mu.Lock()
	fs := h.nodes[id]
	h.dead[id] = true
	h.mu.Unlock()
	fs.Halt()
}

// drop releases a dead node's locks (its log was replayed).
func (h *lockHub) drop(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for l, m := range h.held {
		delete(m, id)
		delete(h.pins[l], id)
	}
	delete(h.nodes, id)
	h.cond.Broadcast()
}

func (c hubLocker) Acquire(ctx context.Context, table string, l uint64, mode lock.Mode) error {
	h := c.hub
	stop := context.AfterFunc(ctx, func() {
		h.mu.Lock()
		h.cond.Broadcast()
		h.mu.Unlock()
	})
	defer stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held[l] == nil {
		h.held[l], h.pins[l] = map[string]lock.Mode{}, map[string]int{}
	}
	waiting := false
	defer func() {
		if waiting {
			h.wait[l]--
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		mine := h.held[l][c.id]
		if !waiting && h.wait[l] > 0 && h.pins[l][c.id] == 0 {
			waiting = true // others wait for it: after them
			h.wait[l]++
			h.cond.Wait()
			continue
		}
		if mine >= mode {
			h.pins[l][c.id]++
			return nil
		}
		blocked := false
		for other, m := range h.held[l] {
			if other == c.id || m == lock.None || (mode == lock.Read && m == lock.Read) {
				continue
			}
			if h.pins[l][other] > 0 || h.dead[other] {
				blocked = true
				continue
			}
			to := lock.None
			if mode == lock.Read {
				to = lock.Read
			}
			if err := h.nodes[other].Revoke(ctx, table, l, to); err != nil {
				return err
			}
			h.held[l][other] = to
		}
		if !blocked {
			h.held[l][c.id] = max(mine, mode)
			h.pins[l][c.id]++
			return nil
		}
		if !waiting {
			waiting = true
			h.wait[l]++
		}
		h.cond.Wait()
	}
}

func (c hubLocker) Unpin(table string, l uint64, mode lock.Mode) {
	h := c.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pins[l][c.id]--
	h.cond.Broadcast()
}
