package filesys

import (
	"container/list"
	"math"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// pageCache keeps clean file data in the fs node, in pages of pageBytes
// of an inode's extent, least recently used first out past its byte
// bound. The kernel drops its own page cache of a file at every open (the
// mount does not use FOPEN_KEEP_CACHE: its pages cannot be dropped
// synchronously on a revoke), so without this every open and read of a
// file already read or written here went to the volume.
//
// Coherence: a page of inode ino is read, filled and changed only by an
// operation that holds ino's lock (Read in read mode, Write in write mode),
// and every page of ino is dropped before that lock leaves the node (Revoke
// to None), and when ino's bytes change other than through Write:
// truncate, zeroing and hole punching, freeing or reusing the inode, a
// data write that failed. A Write updates the pages it covers that are
// cached (the bytes also go to the volume, written behind), so reads here
// see it at once. Nothing dirty is kept: write-behind (data.go) owns the
// bytes until the volume has them.
//
// A Read gives up the local side of ino's lock during its volume read
// (FS.Read), so that this node's writes to the file do not wait for it;
// the node keeps the cluster lock pinned (no revoke meanwhile). A Write or
// a drop may then change ino's pages while the read's bytes are on their
// way: the read registers the pages it may fetch (beginFill, while it
// still holds the lock) and they are cached only if nothing changed those
// pages here since (putFilled); otherwise they are returned to the caller
// and not cached. Changes to other pages of the file do not count: with
// reads and writes of one file at random places, nearly every read would
// overlap some write.
type pageCache struct {
	mu    sync.Mutex
	max   int64 // bytes; 0: no cache
	bytes int64
	pages map[pageKey]*list.Element // of *cpage
	lru   list.List                 // front: most recently used
	byIno map[uint64]map[uint64]*list.Element
	fills map[uint64][]*pageFill // reads from the volume under way, by inode

	hits, misses prometheus.Counter
	size         prometheus.Gauge
}

// pageBytes is the size of a cached page. A read fills every page it
// needs that is missing with one volume read (readPages).
const pageBytes = 64 << 10

// streamPages: a read that needs this many missing whole pages in a row
// (256 KiB: the kernel's read-ahead of a sequential reader) reads them
// straight into the reader's buffer and does not cache them (readPages),
// if Config.StreamReads.
const streamPages = 4

type pageKey struct{ ino, idx uint64 }

// pageFill is a read from the volume under way: the pages it may fetch
// and whether any of them changed here meanwhile.
type pageFill struct {
	ino, lo, hi uint64 // pages [lo, hi]
	changed     bool
}

type cpage struct {
	key  pageKey
	data []byte // pageBytes
}

func (c *pageCache) init(max int64, s *stats) {
	c.max = max
	c.pages = map[pageKey]*list.Element{}
	c.byIno = map[uint64]map[uint64]*list.Element{}
	c.fills = map[uint64][]*pageFill{}
	c.hits, c.misses, c.size = s.pageHits, s.pageMisses, s.pageBytes
}

// get copies page (ino, idx) from off within it into p, if cached.
func (c *pageCache) get(ino, idx uint64, off int, p []byte) bool {
	if c.max == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.pages[pageKey{ino, idx}]
	if e == nil {
		c.misses.Inc()
		return false
	}
	c.hits.Inc()
	c.lru.MoveToFront(e)
	copy(p, e.Value.(*cpage).data[off:])
	return true
}

// has reports whether page (ino, idx) is cached.
func (c *pageCache) has(ino, idx uint64) bool {
	if c.max == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pages[pageKey{ino, idx}] != nil
}

// beginFill registers a read of ino's pages [lo, hi] from the volume; the
// caller holds ino's lock, and calls endFill when done (nil: no cache).
func (c *pageCache) beginFill(ino, lo, hi uint64) *pageFill {
	if c.max == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f := &pageFill{ino: ino, lo: lo, hi: hi}
	c.fills[ino] = append(c.fills[ino], f)
	return f
}

// endFill ends what beginFill began.
func (c *pageCache) endFill(f *pageFill) {
	if f == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	fs := slices.DeleteFunc(c.fills[f.ino], func(g *pageFill) bool { return g == f })
	if len(fs) == 0 {
		delete(c.fills, f.ino)
	} else {
		c.fills[f.ino] = fs
	}
}

// changedLocked notes a change to ino's pages [lo, hi] for the reads
// under way.
func (c *pageCache) changedLocked(ino, lo, hi uint64) {
	for _, f := range c.fills[ino] {
		if f.lo <= hi && lo <= f.hi {
			f.changed = true
		}
	}
}

// putFilled caches data (pageBytes, owned by the cache from now on) as
// page idx of the read f, unless it is cached already or a page of f
// changed here since beginFill (the data may be older than the change).
func (c *pageCache) putFilled(f *pageFill, idx uint64, data []byte) {
	if f == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.changed {
		return
	}
	ino := f.ino
	k := pageKey{ino, idx}
	if c.pages[k] != nil {
		return
	}
	e := c.lru.PushFront(&cpage{key: k, data: data})
	c.pages[k] = e
	m := c.byIno[ino]
	if m == nil {
		m = map[uint64]*list.Element{}
		c.byIno[ino] = m
	}
	m[idx] = e
	c.bytes += pageBytes
	for c.bytes > c.max {
		c.removeLocked(c.lru.Back())
	}
	c.size.Set(float64(c.bytes))
}

// write copies p, written at extent offset off of ino, into the cached
// pages it covers.
func (c *pageCache) write(ino uint64, p []byte, off uint64) {
	if c.max == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(p) > 0 {
		c.changedLocked(ino, off/pageBytes, (off+uint64(len(p))-1)/pageBytes)
	}
	m := c.byIno[ino]
	if len(m) == 0 {
		return
	}
	for len(p) > 0 {
		idx, in := off/pageBytes, int(off%pageBytes)
		n := min(len(p), pageBytes-in)
		if e := m[idx]; e != nil {
			copy(e.Value.(*cpage).data[in:], p[:n])
		}
		p, off = p[n:], off+uint64(n)
	}
}

// drop forgets every page of ino.
func (c *pageCache) drop(ino uint64) {
	if c.max == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.changedLocked(ino, 0, math.MaxUint64)
	for _, e := range c.byIno[ino] {
		c.removeLocked(e)
	}
	c.size.Set(float64(c.bytes))
}

func (c *pageCache) removeLocked(e *list.Element) {
	pg := c.lru.Remove(e).(*cpage)
	delete(c.pages, pg.key)
	if m := c.byIno[pg.key.ino]; m != nil {
		delete(m, pg.key.idx)
		if len(m) == 0 {
			delete(c.byIno, pg.key.ino)
		}
	}
	c.bytes -= pageBytes
}
