package filesys

import (
	"context"
	"sync"
	"time"

	"github.com/plumeria-fs/plumeria/filesys/layout"
	"github.com/plumeria-fs/plumeria/lock"
)

// Inode prefetch: new inodes are taken in batches. A new file's inode lock
// is almost never cached (the number was free), so every create would wait
// for a lock-server round trip for it and another for its open lock, and a
// volume read of its inode block. Instead, when a create takes inode i of
// group g and fewer than prefetchLow free inodes past i are ready, one
// batch in the background takes the next prefetchBatch free numbers of the
// group: it asks for all their inode and open locks at once (write mode;
// the clerk keeps them cached, sticky, like any other, and gives unused ones
// back after its idle time), and while it holds them pinned reads their
// inode blocks with one volume read per run of consecutive numbers into the
// block cache (only where no block is cached: this node's own newer one
// wins). The creates that follow find locks and blocks cached: memory work
// and the log, no round trip. Only numbers free in the group's bitmap are
// asked for, so this takes nothing another node is using; taking the
// cluster locks pinned and no local lock, it cannot deadlock with local
// operations (which take local locks after cluster locks).
type prefetcher struct {
	mu      sync.Mutex
	ahead   map[int]int        // by group: the highest inode index of the last batch
	running map[int]bool       // by group: a batch is under way
	last    map[int]int        // by group: the index the last create took
	bitmap  map[int]*layout.RG // by group: the bitmap as the last create left it (read only)
	wg      sync.WaitGroup
}

const (
	prefetchBatch = 64 // free inodes per batch
	prefetchLow   = 24 // a batch starts when fewer indexes than this are ready past a create
	prefetchWait  = 10 * time.Second
)

func (p *prefetcher) init() {
	p.ahead = map[int]int{}
	p.running = map[int]bool{}
	p.last = map[int]int{}
	p.bitmap = map[int]*layout.RG{}
}

// prefetchAfter notes that a create took index i of group g and starts a
// batch if the inodes ready past it run low. The caller holds g's lock;
// rg is its bitmap, which nobody changes any more.
func (fs *FS) prefetchAfter(g int, rg *layout.RG, i int) {
	p := &fs.prefetch
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last[g], p.bitmap[g] = i, rg
	if p.running[g] {
		return // the batch looks again when it is done
	}
	inos, upTo := p.nextLocked(g)
	if len(inos) == 0 {
		return
	}
	p.running[g] = true
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for len(inos) > 0 {
			fs.prefetchInodes(inos)
			p.mu.Lock()
			p.ahead[g] = upTo
			// Creates may have overtaken the batch meanwhile.
			if inos, upTo = p.nextLocked(g); len(inos) == 0 {
				p.running[g] = false
			}
			p.mu.Unlock()
		}
	}()
}

// nextLocked returns the next batch of free inodes of group g and its
// highest index, or nothing if enough are ready past the last create.
func (p *prefetcher) nextLocked(g int) ([]uint64, int) {
	i, rg := p.last[g], p.bitmap[g]
	front, ok := p.ahead[g]
	if ok && front >= i && front-i >= prefetchLow {
		return nil, 0
	}
	from := i + 1
	if ok && front > i {
		from = front + 1
	}
	var inos []uint64
	upTo := -1
	for j := from; len(inos) < prefetchBatch && j < layout.InodesPerRG; j++ {
		if j = rg.FindFree(j); j < from {
			break // wrapped, or full
		}
		inos = append(inos, uint64(g)*layout.InodesPerRG+uint64(j))
		upTo = j
	}
	return inos, upTo
}

// prefetchInodes takes the inode and open locks of inos in write mode, all
// requests at once, and reads the inode blocks of those it got into the
// cache while it holds them pinned.
func (fs *FS) prefetchInodes(inos []uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), prefetchWait)
	defer cancel()
	table := fs.cfg.Table
	got := make([]bool, len(inos))
	var wg sync.WaitGroup
	for k, ino := range inos {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if fs.cfg.Locker.Acquire(ctx, table, inodeLock(ino), lock.Write) != nil {
				return
			}
			if fs.cfg.Locker.Acquire(ctx, table, iopenLock(ino), lock.Write) != nil {
				fs.cfg.Locker.Unpin(table, inodeLock(ino), lock.Write)
				return
			}
			got[k] = true
		}()
	}
	wg.Wait()
	defer func() {
		for k, ino := range inos {
			if got[k] {
				fs.cfg.Locker.Unpin(table, iopenLock(ino), lock.Write)
				fs.cfg.Locker.Unpin(table, inodeLock(ino), lock.Write)
			}
		}
	}()
	// Runs of consecutive numbers are consecutive blocks: one read each.
	for k := 0; k < len(inos); {
		if !got[k] {
			k++
			continue
		}
		n := 1
		for k+n < len(inos) && got[k+n] && inos[k+n] == inos[k]+uint64(n) {
			n++
		}
		buf := make([]byte, n*layout.BlockBytes)
		if err := fs.cfg.Dev.ReadAt(ctx, buf, layout.InodeAddr(inos[k])); err == nil {
			for x := range n {
				ino := inos[k+x]
				b := buf[x*layout.BlockBytes : (x+1)*layout.BlockBytes : (x+1)*layout.BlockBytes]
				fs.cache.insertClean(layout.InodeAddr(ino), inodeLock(ino), b)
			}
		} // a failure only leaves them uncached
		k += n
	}
}

// insertClean caches data as the committed content of the block at addr
// unless a block is cached there already (it is as new or newer). The
// caller holds lockID pinned.
func (c *cache) insertClean(addr, lockID uint64, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.blocks[addr] == nil {
		c.insertLocked(&cblock{addr: addr, lock: lockID, data: data})
	}
}
