package nfs

import (
	"hash/maphash"
	"net/netip"
	"sync"
	"time"
)

// The duplicate request cache (as knfsd's): a client that lost its
// connection sends its calls again with the same xid, and a change made
// the first time must not be made, or refused, a second time (a resent
// REMOVE would answer NFS3ERR_NOENT for a file it removed). The replies
// of changes are kept for drcTTL, keyed by the client's address (not its
// port: it reconnects from another), the xid and a hash of the rest of
// the call; a resend finds the reply, or, while the first is still
// running, is dropped (the client sends it again).
const (
	drcTTL     = 2 * time.Minute
	drcEntries = 8192
)

// nonIdempotent are the NFS procedures whose replies are kept.
var nonIdempotent = map[uint32]bool{2: true, 8: true, 9: true, 10: true, 11: true, 12: true, 13: true, 14: true, 15: true}

type drcKey struct {
	addr netip.Addr
	xid  uint32
	sum  uint64
}

type drcEntry struct {
	reply []byte // nil while the first call runs
	at    time.Time
}

type drc struct {
	mu    sync.Mutex
	seed  maphash.Seed
	m     map[drcKey]*drcEntry
	order []drcKey // insertion order, for eviction
}

func newDRC() *drc { return &drc{seed: maphash.MakeSeed(), m: map[drcKey]*drcEntry{}} }

// key names call rec (the whole record) from addr.
func (c *drc) key(addr netip.Addr, xid uint32, rec []byte) drcKey {
	return drcKey{addr: addr, xid: xid, sum: maphash.Bytes(c.seed, rec[4:])}
}

// begin looks k up: a kept reply to send again, or running (drop the
// call); otherwise k is recorded as running and the caller serves it.
func (c *drc) begin(k drcKey, now time.Time) (reply []byte, running bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok && now.Sub(e.at) < drcTTL {
		return e.reply, e.reply == nil
	}
	c.evict(now)
	c.m[k] = &drcEntry{at: now}
	c.order = append(c.order, k)
	return nil, false
}

// finish keeps the reply to k (a copy).
func (c *drc) finish(k drcKey, reply []byte, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok {
		e.reply, e.at = append([]byte(nil), reply...), now
	}
}

// evict drops expired entries, and the oldest beyond the bound (a
// running one dropped is only not kept: its resend runs again).
func (c *drc) evict(now time.Time) {
	n := 0
	for ; n < len(c.order); n++ {
		k := c.order[n]
		if e, ok := c.m[k]; ok && now.Sub(e.at) < drcTTL && len(c.order)-n < drcEntries {
			break
		}
		if e, ok := c.m[k]; ok && now.Sub(e.at) >= drcTTL || len(c.order)-n >= drcEntries {
			delete(c.m, k)
		}
	}
	c.order = c.order[n:]
}
