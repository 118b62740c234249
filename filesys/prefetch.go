package filesys

import (
	"context"
	"sync"
	"time"

	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// Inode lock prefetch. A new file's inode lock is almost never cached (the
// number was free), so every create waited for a lock-server round trip.
// After a create takes inode i of a group, the next few free numbers of
// that group are locked in write mode in the background (inode and open
// locks) and their inode blocks read; the creates that follow find both cached. The locks stay cached (sticky) like any
// other; the clerk gives unused ones back after its idle time. Only free
// inodes are asked for, so this takes nothing another node is using.
type prefetcher struct {
	mu      sync.Mutex
	pending map[uint64]bool // inode numbers asked for, not yet answered
	wg      sync.WaitGroup
}

const (
	prefetchAhead   = 8 // free inode numbers locked ahead of the last create
	prefetchPending = 32
	prefetchWait    = 10 * time.Second
)

func (p *prefetcher) init() { p.pending = map[uint64]bool{} }

// after asks for the locks of the free inodes of group g after index i.
func (fs *FS) prefetchAfter(g int, rg *layout.RG, i int) {
	p := &fs.prefetch
	for n, j := 0, i+1; n < prefetchAhead; n++ {
		j = rg.FindFree(j)
		if j < 0 {
			return
		}
		ino := uint64(g)*layout.InodesPerRG + uint64(j)
		j++
		p.mu.Lock()
		skip := p.pending[ino] || len(p.pending) >= prefetchPending
		if !skip {
			p.pending[ino] = true
			p.wg.Add(1)
		}
		p.mu.Unlock()
		if skip {
			continue
		}
		go func() {
			defer p.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), prefetchWait)
			defer cancel()
			// The local lock too (fs.acquire): the inode block is read
			// into the cache under it, and a create may be taking this
			// inode meanwhile. Holding only this lock, it cannot deadlock.
			// Its open lock too (iopen.go): removing the file then asks
			// nobody whether another node has it open.
			if h, err := fs.acquire(ctx, w(inodeLock(ino)), w(iopenLock(ino))); err == nil {
				fs.load(ctx, layout.InodeAddr(ino), inodeLock(ino)) // a failure only leaves it uncached
				h.release()
			}
			p.mu.Lock()
			delete(p.pending, ino)
			p.mu.Unlock()
		}()
	}
}
