package filesys

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/plumeria-fs/plumeria/filesys/layout"
	"github.com/plumeria-fs/plumeria/filesys/redo"
	"github.com/plumeria-fs/plumeria/lock"
)

// cblock is a cached metadata block. Invariant: it is only read or changed
// by an operation that holds (pinned) the lock covering it, and it leaves
// the cache only when that lock leaves the node.
type cblock struct {
	addr     uint64
	lock     uint64
	data     []byte // committed content, version included
	dirty    bool   // changed since it was last written in place
	firstLSN redo.LSN
	lastLSN  redo.LSN
	// exposeLSN: the last change by a transaction that may make file data
	// visible (not tx.hidesData); fdatasync of an inode whose block has
	// none above the log's durable LSN needs no log write (FS.Fsync).
	exposeLSN redo.LSN
	gen       uint64 // bumped on every change: write-back marks clean only an unchanged block
}

// cache holds this node's metadata blocks, by address and by lock.
type cache struct {
	mu       sync.Mutex
	blocks   map[uint64]*cblock
	byLock   map[uint64]map[uint64]*cblock
	inflight map[*tx]redo.LSN // commits between Append and install, with a floor of their LSN
	lastLSN  redo.LSN
}

func newCache() *cache {
	return &cache{blocks: map[uint64]*cblock{}, byLock: map[uint64]map[uint64]*cblock{}, inflight: map[*tx]redo.LSN{}}
}

func (c *cache) insertLocked(b *cblock) {
	c.blocks[b.addr] = b
	m := c.byLock[b.lock]
	if m == nil {
		m = map[uint64]*cblock{}
		c.byLock[b.lock] = m
	}
	m[b.addr] = b
}

// load returns the committed content of the block at addr, covered by
// lockID, reading it from the volume if it is not cached.
func (fs *FS) load(ctx context.Context, addr, lockID uint64) ([]byte, error) {
	c := fs.cache
	c.mu.Lock()
	if b := c.blocks[addr]; b != nil {
		data := b.data
		c.mu.Unlock()
		return data, nil
	}
	c.mu.Unlock()
	data := make([]byte, layout.BlockBytes)
	if err := fs.cfg.Dev.ReadAt(ctx, data, addr); err != nil {
		return nil, fs.ioError("read metadata block", addr, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.blocks[addr]; b != nil {
		return b.data, nil
	}
	c.insertLocked(&cblock{addr: addr, lock: lockID, data: data})
	return data, nil
}

// tx gathers the block changes of one operation; commit logs them as one
// redo record and installs them in the cache.
type tx struct {
	fs      *FS
	ctx     context.Context
	staged  map[uint64]*stage
	orphans []orphanChange // changes to this node's orphan table (orphans.go)
	// hidesData: the transaction makes no file data visible that was not
	// visible before (an overwrite inside a file's size: only times and
	// mode bits change), so its record need not wait for data writes
	// (dataWriter.barrier). Set by the caller that knows; false is safe.
	hidesData bool
}

type stage struct {
	lock     uint64
	old, new []byte
}

func (fs *FS) newTx(ctx context.Context) *tx {
	return &tx{fs: fs, ctx: ctx, staged: map[uint64]*stage{}}
}

// read returns the block's content as this transaction sees it. Read only.
func (t *tx) read(addr, lockID uint64) ([]byte, error) {
	if s := t.staged[addr]; s != nil {
		return s.new, nil
	}
	return t.fs.load(t.ctx, addr, lockID)
}

// write returns a private copy of the block to change; commit logs it.
func (t *tx) write(addr, lockID uint64) ([]byte, error) {
	if s := t.staged[addr]; s != nil {
		return s.new, nil
	}
	old, err := t.fs.load(t.ctx, addr, lockID)
	if err != nil {
		return nil, err
	}
	s := &stage{lock: lockID, old: old, new: append([]byte(nil), old...)}
	t.staged[addr] = s
	return s.new, nil
}

// commit appends the transaction's changes to the log (not waiting for
// them to be durable) and installs them in the cache.
func (t *tx) commit() (err error) {
	fs := t.fs
	if len(t.orphans) > 0 {
		done, err := fs.stageOrphans(t)
		if err != nil {
			return err
		}
		defer func() { done(err == nil) }()
	}
	addrs := make([]uint64, 0, len(t.staged))
	for a := range t.staged {
		addrs = append(addrs, a)
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i] < addrs[j] })
	var ups []redo.Update
	var changed []uint64
	for _, a := range addrs {
		s := t.staged[a]
		v := layout.Version(s.old) + 1
		spans := diff(s.old, s.new)
		if len(spans) == 0 {
			continue
		}
		layout.SetVersion(s.new, v)
		for _, sp := range spans {
			ups = append(ups, redo.Update{Addr: a, Version: v, Off: uint16(sp[0]), Data: s.new[sp[0]:sp[1]]})
		}
		changed = append(changed, a)
	}
	if len(ups) == 0 {
		return nil
	}
	if !t.hidesData {
		fs.data.exposing() // before Append: the batch taking it must wait
	}
	c := fs.cache
	c.mu.Lock()
	c.inflight[t] = c.lastLSN + 1
	c.mu.Unlock()
	start := time.Now()
	lsn, err := fs.rlog.Append(ups)
	if err == nil {
		fs.stats.appended(lsn, start)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.inflight, t)
	if err != nil {
		return fs.fail(fmt.Errorf("append to log: %w", err))
	}
	if lsn > c.lastLSN {
		c.lastLSN = lsn
	}
	for _, a := range changed {
		s := t.staged[a]
		b := c.blocks[a]
		if b == nil {
			b = &cblock{addr: a, lock: s.lock}
			c.insertLocked(b)
		}
		b.data = s.new
		if !b.dirty {
			b.dirty, b.firstLSN = true, lsn
		}
		b.lastLSN = lsn
		if !t.hidesData {
			b.exposeLSN = lsn
		}
		b.gen++
	}
	return nil
}

// exposeLSN returns the last change to the block at addr that may have
// made file data visible (0: none this cache holds). A block not cached is
// clean on the volume: every change to it is durable.
func (c *cache) exposeLSN(addr uint64) redo.LSN {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.blocks[addr]; b != nil {
		return b.exposeLSN
	}
	return 0
}

// diff returns the byte ranges [start, end) where a and b differ, leaving
// out the version field, merging ranges closer than 32 bytes.
func diff(a, b []byte) [][2]int {
	var spans [][2]int
	const gap = 32
	const word = 64 // equal runs are skipped a word at a time
	for i := 0; i < len(a); i++ {
		if i == layout.VersionStart {
			i = layout.VersionEnd - 1
			continue
		}
		if i%word == 0 && i+word <= len(a) && (i+word <= layout.VersionStart || i >= layout.VersionEnd) &&
			bytes.Equal(a[i:i+word], b[i:i+word]) {
			i += word - 1
			continue
		}
		if a[i] == b[i] {
			continue
		}
		if n := len(spans); n > 0 && i-spans[n-1][1] < gap && !(spans[n-1][1] <= layout.VersionStart && i >= layout.VersionEnd) {
			spans[n-1][1] = i + 1
		} else {
			spans = append(spans, [2]int{i, i + 1})
		}
	}
	return spans
}

// writeBack writes the given dirty blocks in place once their log records
// are durable, and marks them clean if nothing changed them meanwhile.
func (fs *FS) writeBack(ctx context.Context, blocks []*cblock, reason wbReason) error {
	type snap struct {
		b       *cblock
		data    []byte
		gen     uint64
		lastLSN redo.LSN // the newest record the snapshot holds
	}
	c := fs.cache
	var snaps []snap
	var upTo redo.LSN
	c.mu.Lock()
	for _, b := range blocks {
		if b.dirty {
			snaps = append(snaps, snap{b, append([]byte(nil), b.data...), b.gen, b.lastLSN})
			upTo = max(upTo, b.lastLSN)
		}
	}
	c.mu.Unlock()
	if len(snaps) == 0 {
		return nil
	}
	start := time.Now()
	if err := fs.rlog.Wait(ctx, upTo); err != nil {
		if ctx.Err() != nil {
			// Only this write-back gave up waiting (a slow volume); the
			// log goes on, and a later write-back retries.
			return fmt.Errorf("%w: write back: log not durable in time: %v", ErrIO, err)
		}
		return fs.fail(fmt.Errorf("write log: %w", err))
	}
	// Runs of consecutive blocks (a batch of new inodes, a directory's
	// hash blocks) go out as one write each: the volume splits it by
	// chunk, and a brick checks each block's version on its own.
	sort.Slice(snaps, func(i, j int) bool { return snaps[i].b.addr < snaps[j].b.addr })
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := 0; i < len(snaps); {
		n := 1
		for i+n < len(snaps) && n < writeBackRunMax && snaps[i+n].b.addr == snaps[i].b.addr+uint64(n)*layout.BlockBytes {
			n++
		}
		run := snaps[i : i+n]
		i += n
		g.Go(func() error {
			buf := run[0].data
			if len(run) > 1 {
				buf = make([]byte, 0, len(run)*layout.BlockBytes)
				for _, s := range run {
					buf = append(buf, s.data...)
				}
			}
			if err := fs.cfg.Dev.WriteMetaBlocks(gctx, buf, run[0].b.addr); err != nil {
				return fs.ioError(fmt.Sprintf("write back %d metadata blocks", len(run)), run[0].b.addr, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	c.mu.Lock()
	for _, s := range snaps {
		switch {
		case s.b.gen == s.gen:
			s.b.dirty = false
		case s.b.firstLSN <= s.lastLSN:
			// Changed again meanwhile: still dirty, but the volume now
			// holds every record up to the snapshot's. Without this a
			// block changed by every operation (a busy directory, the
			// group bitmap) would keep its first record forever and pin
			// the log's tail until the log filled and operations stalled.
			s.b.firstLSN = s.lastLSN + 1
		}
	}
	c.mu.Unlock()
	fs.stats.wroteBack(reason, len(snaps), start)
	return nil
}

// writeBackRunMax bounds the blocks of one write-back write (256 KiB).
const writeBackRunMax = 64

// writeBackAll writes every dirty block back and releases the log space
// they held.
func (fs *FS) writeBackAll(ctx context.Context) error {
	c := fs.cache
	c.mu.Lock()
	var dirty []*cblock
	for _, b := range c.blocks {
		if b.dirty {
			dirty = append(dirty, b)
		}
	}
	c.mu.Unlock()
	if err := fs.writeBack(ctx, dirty, wbFlush); err != nil {
		return err
	}
	fs.releaseLog()
	return nil
}

// settleAll puts everything this node changed in place on the volume:
// its file data, its log, and every dirty block, written back after its
// records. The barrier's revoke calls it: a node gives the barrier up
// only once nothing of it is left in memory or only in its log, so that a
// volume snapshot taken under the barrier in write mode holds a complete
// file system that needs no log replay (Frangipani §8). No operation of
// this node holds the barrier meanwhile, so nothing new is dirtied.
func (fs *FS) settleAll(ctx context.Context) error {
	start := time.Now()
	fs.data.drain()
	if err := fs.writeBackAll(ctx); err != nil {
		return err
	}
	fs.log.Info("barrier: everything written back", "took", time.Since(start))
	return nil
}

// releaseLog tells the log which records are installed in place: all
// before the oldest record of a dirty block or of a commit in flight.
func (fs *FS) releaseLog() {
	c := fs.cache
	c.mu.Lock()
	upTo := c.lastLSN
	for _, b := range c.blocks {
		if b.dirty && b.firstLSN-1 < upTo {
			upTo = b.firstLSN - 1
		}
	}
	for _, floor := range c.inflight {
		if floor-1 < upTo {
			upTo = floor - 1
		}
	}
	c.mu.Unlock()
	if upTo > 0 {
		fs.rlog.Release(upTo)
	}
}

// flushLoop writes dirty blocks back periodically and when the log fills.
func (fs *FS) flushLoop() {
	defer fs.flusher.Done()
	t := newTicker(fs.cfg.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-fs.stop:
			return
		case <-t.C:
		case <-fs.pressed:
		}
		if fs.failed() != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), fs.cfg.FlushInterval*30)
		if err := fs.writeBackAll(ctx); err != nil {
			fs.log.Warn("background write-back failed", "err", err)
		}
		cancel()
	}
}

// Revoke is the clerk's callback when lock l must go down to mode to: the
// blocks it covers are written back, and dropped for None; the kernel is
// told to drop what it cached. The clerk calls it only while no operation
// of this node uses the lock.
func (fs *FS) Revoke(ctx context.Context, table string, l uint64, to lock.Mode) error {
	if isIopenLock(l) {
		return nil // covers no cached state; pinned while the file is open here
	}
	if l >= flockLockBase {
		return fs.flocks.revoke(ctx, l, to)
	}
	if l == barrierLock {
		return fs.settleAll(ctx)
	}
	if l >= inodeLockBase && l < rgLockBase {
		fs.data.settle(l - inodeLockBase) // other nodes read the data from the volume
		if to == lock.None {
			fs.pages.drop(l - inodeLockBase) // they may change it next
		}
	}
	c := fs.cache
	c.mu.Lock()
	var blocks []*cblock
	for _, b := range c.byLock[l] {
		blocks = append(blocks, b)
	}
	c.mu.Unlock()
	if err := fs.writeBack(ctx, blocks, wbRevoke); err != nil {
		// Never let a lock go over changes that are only in the log: the
		// next holder would read the blocks without them. A failed node
		// keeps the lock until its session ends (OnFail) and another
		// node has replayed its log.
		return err
	}
	if to == lock.None {
		c.mu.Lock()
		for a, b := range c.byLock[l] {
			if !b.dirty {
				delete(c.blocks, a)
				delete(c.byLock[l], a)
			}
		}
		if len(c.byLock[l]) == 0 {
			delete(c.byLock, l)
		}
		c.mu.Unlock()
	}
	if l >= inodeLockBase && l < rgLockBase {
		fs.invalidate(l-inodeLockBase, to)
	}
	return nil
}

func (fs *FS) invalidate(ino uint64, to lock.Mode) {
	fs.mu.Lock()
	fn := fs.mu.invalidate
	fs.mu.Unlock()
	if fn != nil && to == lock.None {
		fn(ino, false, "")
	}
}

// ioError wraps a device error (a full brick is ErrNoSpace); a fenced or
// lost node stops.
func (fs *FS) ioError(what string, addr uint64, err error) error {
	switch {
	case isFatal(err):
		return fs.fail(fmt.Errorf("%s at %#x: %w", what, addr, err))
	case errors.Is(err, ErrNoSpace):
		return fmt.Errorf("%w: %s at %#x: %v", ErrNoSpace, what, addr, err)
	}
	return fmt.Errorf("%w: %s at %#x: %v", ErrIO, what, addr, err)
}
