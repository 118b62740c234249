package filesys

import (
	"math"
	"time"
)

// leaser is a Locker that knows how long its locks stay good: lock/clerk
// does (LeaseLeft).
type leaser interface {
	LeaseLeft() time.Duration
}

// cacheSafety is kept off the lease for caches this node cannot drop by
// itself: a reply may reach the kernel a little after it was made.
const cacheSafety = time.Second

// cacheRefresh: how often CacheFor asks the Locker again (between asks
// the answer counts down with the clock).
const cacheRefresh = 50 * time.Millisecond

// CacheFor bounds how long a cache that this node cannot drop when its
// lease runs out (the kernel's entries and attributes, which the FUSE
// adapter gives timeouts) may keep what it learns now: the lease left on
// every lock this node holds, less cacheSafety. A node stopped or paused
// past its lease (its locks then go to other nodes without a revoke) thus
// has no kernel cache left to answer from. Unbounded if the Locker knows
// no leases; 0 once the file system stopped.
func (fs *FS) CacheFor() time.Duration {
	l, ok := fs.cfg.Locker.(leaser)
	if !ok {
		return math.MaxInt64
	}
	if fs.failed() != nil {
		return 0
	}
	now := time.Now()
	fs.lease.mu.Lock()
	defer fs.lease.mu.Unlock()
	if now.Sub(fs.lease.at) > cacheRefresh || now.Before(fs.lease.at) {
		fs.lease.at, fs.lease.until = now, now.Add(l.LeaseLeft()-cacheSafety)
	}
	return max(fs.lease.until.Sub(now), 0)
}
