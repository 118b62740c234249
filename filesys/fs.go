// Package filesys is the file system every fs node runs over one shared
// volume (DESIGN.md §4, Frangipani §3-5, GFS, Calaveras §3-6): inodes in
// one block each at fixed addresses, data in one sparse extent per inode,
// hashed directories (filesys/dir), resource groups for allocation, and a
// redo log per node (filesys/redo) that any node replays after a crash.
//
// Nodes never talk to each other: they share blocks through the volume and
// keep their caches coherent with the lock service. A read lock lets a node
// cache what the lock covers; a write lock lets it change it. When another
// node needs a lock, Revoke writes the node's changes back (after their log
// records are durable) and drops the cache.
//
// Guarantee: a call that returned is visible to every node; after fsync
// (or Sync) returns, every change made before it survives a crash of this
// node; file data reach the volume before the metadata that makes them
// visible. The API is by inode number; the FUSE adapter (frontend/fuse)
// maps it to the kernel's, and errno values never appear here.
package filesys

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumeria-fs/plumeria/filesys/layout"
	"github.com/plumeria-fs/plumeria/filesys/redo"
	"github.com/plumeria-fs/plumeria/lock"
)

// Device is the shared volume, as the volume client provides it (package
// node adapts it). A write is durable on every replica when it returns
// nil. Writes come in three kinds, one method each, which differ in what a
// brick lets them do:
//
//   - WriteData: file data. A brick refuses it for lack of space once only
//     the space it keeps back for metadata is left. Format and fsck, which
//     run with nothing mounted, write everything this way.
//   - WriteMeta: the redo log. It may use the space bricks keep for
//     metadata, so that a volume full of file data still lets nodes
//     commit, delete and free space instead of failing.
//   - WriteMetaBlocks: whole metadata blocks (metadata write-back, log slot
//     headers, recovery), which carry their version (layout.Version, at
//     byte layout.VersionStart of each block). Like WriteMeta they may use
//     the reserve, and they are versioned: a brick keeps a stored block
//     whose version is not below the one written, so a write that
//     reaches a brick late (it sat in a TCP buffer while this node gave
//     up, retried and gave the lock away) never overwrites a newer
//     version. Not for the redo log, whose blocks carry no such version.
//
// Besides its own errors a Device reports, wrapped so that errors.Is finds
// them, ErrDeviceFenced when it refuses this node's writes and ErrNoSpace
// when a brick refuses a write for lack of space.
type Device interface {
	ReadAt(ctx context.Context, p []byte, off uint64) error          // never-written bytes read as zeros
	WriteData(ctx context.Context, p []byte, off uint64) error       // file data: no reserve
	WriteMeta(ctx context.Context, p []byte, off uint64) error       // the redo log: may use the reserve
	WriteMetaBlocks(ctx context.Context, p []byte, off uint64) error // whole versioned metadata blocks: may use the reserve
	Decommit(ctx context.Context, off, n uint64) error               // the range reads as zeros afterwards
}

// VersionDevice is what a Device of a volume that keeps file versions
// (clustermap.Volume.FileVersions) adds: a write tagged with file version
// f (> 0) keeps the blocks written at lower versions, and a read at f
// sees, per block, the newest bytes written at a version at or below f.
// Untagged writes are newer than any tagged one. A block's versions must
// not decrease (an inode's fver never does, versions.go).
type VersionDevice interface {
	KeepsVersions() bool
	WriteDataVersion(ctx context.Context, p []byte, off uint64, fver uint32) error
	ReadAtVersion(ctx context.Context, p []byte, off uint64, fver uint32) error
	DecommitVersion(ctx context.Context, off, n uint64, fver uint32) error
	// BlockVersions lists the file versions (ascending) at which the
	// block at off holds bytes (not a decommit).
	BlockVersions(ctx context.Context, off uint64) ([]uint32, error)
}

// ErrDeviceFenced is what a Device reports when it refuses this node's
// writes: its lock session was fenced (another node replays its log). The
// file system stops; a remount is needed.
var ErrDeviceFenced = errors.New("device: this node's writes are fenced")

// logDevice is the device as the redo log uses it: its writes are
// WriteMeta.
type logDevice struct{ dev Device }

func (d logDevice) ReadAt(ctx context.Context, p []byte, off uint64) error {
	return d.dev.ReadAt(ctx, p, off)
}

func (d logDevice) WriteAt(ctx context.Context, p []byte, off uint64) error {
	return d.dev.WriteMeta(ctx, p, off)
}

// Locker is the lock service's clerk, as lock/clerk provides it: Acquire
// pins a lock in a mode until Unpin; the clerk calls back Revoke (through
// the owner's wiring) before it gives a lock up.
type Locker interface {
	Acquire(ctx context.Context, table string, l uint64, mode lock.Mode) error
	Unpin(table string, l uint64, mode lock.Mode)
}

// Config configures an FS.
type Config struct {
	Dev     Device
	Locker  Locker
	Table   string // lock table: one per volume
	ID      string // this node's clerk id (the volume's writer id)
	Session uint64 // this node's lock session
	// FlushInterval bounds how long a change stays only in memory: the log
	// is written and dirty blocks written back at least this often.
	// 0: one second.
	FlushInterval time.Duration
	// Capacity reports the volume's usable bytes and free bytes for statfs.
	Capacity func(ctx context.Context) (total, free uint64, err error)
	Logger   *slog.Logger
	Now      func() time.Time // nil: time.Now
	// Registerer receives the metrics (filesys/metrics.go), labelled with
	// Table as the volume; nil means prometheus.DefaultRegisterer.
	Registerer prometheus.Registerer
	// DataCacheBytes bounds the clean file data the node caches
	// (pagecache.go); 0: DataCacheDefault, below 0: none.
	DataCacheBytes int64
	// StreamReads: the reader keeps a page cache of its own (a FUSE
	// mount's kernel), so a read of streamPages or more whole pages this
	// node lacks goes straight into the reader's buffer, not cached here.
	// Without it (an NFS gateway, whose clients may read a file over and
	// over) every page read is cached.
	StreamReads bool
	// ReadOnly opens a device nothing changes (a snapshot): no log slot,
	// no locks from the lock service (Locker is not used), and every
	// change is ErrReadOnly (readonly.go).
	ReadOnly bool
	// OnFail, if set, is called once (on a goroutine of its own) when the
	// file system stops: its lock session must end so that another node
	// replays its log before anyone gets its locks (a failed node never
	// gives up a lock whose changes are only in its log). Nil: the session
	// ends when its lease runs out or the node remounts.
	OnFail func(err error)
	// CleanInterval is how often the node tries a pass of the version
	// cleaner (cleaner.go) on a volume that keeps file versions: 0
	// CleanInterval, below 0 never.
	CleanInterval time.Duration
	// Policies, if set, gives directories availability policies
	// (policy.go): the mover (mover.go) moves data into the policies'
	// profiles and LayoutXattr reports where data is. Nil: neither.
	Policies PolicyDevice
	// MoveInterval is how often the node tries a full mover pass: 0
	// MoveInterval, below 0 never (passes woken by policy changes and
	// renames still run).
	MoveInterval time.Duration
	// MoveQuiet is how long a file stays unchanged before the mover moves
	// it: 0 MoveQuietDefault, below 0 no wait.
	MoveQuiet time.Duration
}

// FS is one node's file system. Safe for concurrent use.
type FS struct {
	cfg      Config
	log      *slog.Logger
	super    layout.Super
	slot     int
	rlog     *redo.Log
	cache    *cache
	data     dataWriter    // file data written behind
	vdev     VersionDevice // nil: the volume keeps no file versions (versions.go)
	modified modifiedSet   // files changed here since their newest version (versions.go)
	pages    pageCache     // clean file data
	mover    mover         // availability policies (mover.go)

	prefetch prefetcher // inode locks taken ahead of creates
	locks    *localLocks
	rg       int // the resource group this node allocates from first
	stats    *stats

	mu struct {
		sync.Mutex
		failed     error             // sticky: lease lost, fenced, log failed
		halted     bool              // Halt: fail without OnFail
		opens      map[uint64]int    // local opens and holds (kernel references) by inode
		orphans    map[uint64]uint64 // unlinked while open or held here, with their generation: freed on last Release
		pinned     map[uint64]int    // local Opens by inode, covered by one pin of its open lock (iopen.go)
		reaping    map[uint64]bool   // orphans a reaper waits to free (iopen.go)
		invalidate func(ino uint64, dir bool, name string)
		statfs     statfsCache
	}
	lease struct { // CacheFor's last answer
		mu        sync.Mutex
		at, until time.Time
	}
	flocks    *fileLocks
	orph      orphanTable // this node's slot's orphan table (orphans.go)
	freer     freer       // orphans the kernel forgot, freed in batches (freer.go)
	janitorMu sync.Mutex  // one pass over recovered slots at a time
	kick      chan struct{}
	stop      chan struct{}
	flusher   sync.WaitGroup
	pressed   chan struct{} // capacity 1: the log asks for write-back
}

// Lock ids within the volume's table. Ids below inodeLockBase are global
// locks; an inode's lock covers the inode, its data and, for a directory,
// its hash table. Operations acquire their locks in increasing id order.
const (
	barrierLock   = 0  // held shared by every change; exclusive for snapshots
	renameLock    = 1  // serialises moves of directories between parents (cycle checks)
	slotTableLock = 2  // log slot headers
	inodeLockBase = 16 // + inode number
	rgLockBase    = 1 << 32
	flockLockBase = 1 << 40 // + inode number: BSD flocks across nodes
	posixLockBase = 1 << 41 // + inode number: POSIX record locks across nodes
	// iopenLockBase (1 << 42) + inode number: open locks (iopen.go)
)

// BarrierLock is the barrier's lock id in the volume's table: a snapshot
// holds it in write mode while the volume snapshot is taken (every node
// settles first: settleAll).
const BarrierLock uint64 = barrierLock

func inodeLock(ino uint64) uint64 { return inodeLockBase + ino }
func rgLock(g int) uint64         { return rgLockBase + uint64(g) }

// DataCacheDefault is Config.DataCacheBytes's default: 256 MiB.
const DataCacheDefault = 256 << 20

// ErrNotFormatted means the volume holds no file system.
var ErrNotFormatted = layout.ErrNoFS

// Open mounts the file system of cfg.Dev on this node: it reads the
// superblock, claims a free log slot and starts the log. The caller has
// opened cfg.Table on the clerk; Revoke and Recover must be routed here.
func Open(ctx context.Context, cfg Config) (*FS, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = time.Second
	}
	switch {
	case cfg.DataCacheBytes == 0:
		cfg.DataCacheBytes = DataCacheDefault
	case cfg.DataCacheBytes < 0:
		cfg.DataCacheBytes = 0
	}
	fs := &FS{cfg: cfg, log: cfg.Logger, cache: newCache(), locks: newLocalLocks(), flocks: newFileLocks(),
		stop: make(chan struct{}), pressed: make(chan struct{}, 1), kick: make(chan struct{}, 1), stats: newStats(cfg.Registerer, cfg.Table)}
	fs.mu.opens = map[uint64]int{}
	fs.mu.orphans = map[uint64]uint64{}
	fs.mu.pinned = map[uint64]int{}
	fs.mu.reaping = map[uint64]bool{}
	b := make([]byte, layout.BlockBytes)
	if err := cfg.Dev.ReadAt(ctx, b, layout.SuperAddr); err != nil {
		return nil, fmt.Errorf("read superblock: %w", err)
	}
	s, err := layout.DecodeSuper(b)
	if err != nil {
		return nil, err
	}
	fs.super = s
	if v, ok := cfg.Dev.(VersionDevice); ok && v.KeepsVersions() {
		fs.vdev = v
	}
	fs.rg = int(hashString(cfg.ID) % layout.RGsMax)
	fs.data.init(fs)
	fs.pages.init(cfg.DataCacheBytes, fs.stats)
	fs.prefetch.init()
	fs.freer.init(fs.stats.orphansQueued)
	fs.mover.init(cfg.Registerer, cfg.Table)
	if cfg.ReadOnly {
		fs.cfg.Locker = readOnlyLocker{}
		return fs, nil
	}
	if fs.slot, err = fs.claimSlot(ctx); err != nil {
		return nil, err
	}
	fs.rlog, err = redo.Open(ctx, logDevice{cfg.Dev}, fs.logOptions(fs.slot))
	if err != nil {
		return nil, fmt.Errorf("open log slot %d: %w", fs.slot, err)
	}
	fs.flusher.Add(1)
	go fs.flushLoop()
	if err := fs.loadOwnTable(ctx); err != nil {
		fs.Halt()
		return nil, err
	}
	fs.flusher.Add(2)
	go fs.janitorLoop()
	go fs.freerLoop()
	if fs.vdev != nil && cfg.CleanInterval >= 0 {
		interval := cfg.CleanInterval
		if interval == 0 {
			interval = CleanInterval
		}
		fs.flusher.Add(1)
		go func() {
			defer fs.flusher.Done()
			ctx, cancel := fs.untilStop(context.Background())
			defer cancel()
			fs.CleanLoop(ctx, interval)
		}()
	}
	if cfg.Policies != nil {
		interval := cfg.MoveInterval
		switch {
		case interval == 0:
			interval = MoveInterval
		case interval < 0:
			interval = 1<<63 - 1 // woken passes only
		}
		fs.flusher.Add(1)
		go func() {
			defer fs.flusher.Done()
			ctx, cancel := fs.untilStop(context.Background())
			defer cancel()
			fs.MoveLoop(ctx, interval)
		}()
	}
	return fs, nil
}

func (fs *FS) logOptions(slot int) redo.Options {
	return redo.Options{Base: layout.LogAddr(slot), Size: layout.LogBytes,
		FlushInterval: fs.cfg.FlushInterval / 4,
		BeforeWrite: func() error {
			if err := fs.data.barrier(); err != nil {
				return err
			}
			fs.stats.beforeWrite() // the device write is timed from here
			return nil
		},
		AfterWrite: fs.stats.afterWrite,
		OnPressure: func() {
			select {
			case fs.pressed <- struct{}{}:
			default:
			}
		}}
}

// Close writes everything back, leaves an empty log, frees the log slot
// and stops. The caller then closes the clerk session (releasing locks).
func (fs *FS) Close(ctx context.Context) error {
	if fs.cfg.ReadOnly {
		fs.mu.Lock()
		fs.mu.halted = true
		if fs.mu.failed == nil {
			fs.mu.failed = fmt.Errorf("%w: unmounted", ErrIO)
		}
		fs.mu.Unlock()
		fs.stopLoops()
		return nil
	}
	if fs.failed() == nil {
		fs.drainFreer(ctx)
	}
	fs.stopLoops()
	fs.prefetch.wg.Wait()
	if err := fs.failed(); err != nil {
		// Nothing more is written: the log is another node's to replay.
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		fs.rlog.Close(cctx)
		cancel()
		return fmt.Errorf("unmount: %w (the log is left for recovery)", err)
	}
	// The last node to leave frees what crashed nodes left.
	jctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if err := fs.cleanRecovered(jctx); err != nil {
		fs.log.Warn("unmount: the orphans of crashed nodes are left for the next node", "err", err)
	}
	cancel()
	fs.freeOrphans(ctx)
	fs.data.drain()
	err := fs.writeBackAll(ctx)
	if err == nil {
		err = fs.rlog.Close(ctx)
	} else {
		fs.rlog.Close(ctx)
	}
	if err == nil {
		// Orphans that could not be freed stay listed: the slot is left
		// as recovered for another node's janitor.
		err = fs.freeSlot(ctx, fs.slot, fs.cfg.ID, fs.cfg.Session, fs.orph.Len() > 0)
	}
	if err != nil {
		return fmt.Errorf("unmount: %w", err)
	}
	return nil
}

// Sync makes every change made so far durable (the log), as fsync does.
func (fs *FS) Sync(ctx context.Context) error {
	if err := fs.failed(); err != nil {
		return err
	}
	if fs.cfg.ReadOnly {
		return nil
	}
	if err := fs.rlog.Sync(ctx); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// The caller gave up waiting (an interrupted fsync, a janitor
			// stopped by the unmount): the log goes on writing, nothing failed.
			return err
		}
		return fs.fail(fmt.Errorf("sync log: %w", err))
	}
	return nil
}

// SetInvalidator registers the callback told when a lock leaves this node:
// the kernel must drop what it cached under it (ino 0: everything, the
// file system stopped).
func (fs *FS) SetInvalidator(fn func(ino uint64, dir bool, name string)) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.mu.invalidate = fn
}

// LogStats reports the redo log's counters (the batching factor of group
// commit is Records/Batches).
func (fs *FS) LogStats() redo.Stats {
	if fs.rlog == nil {
		return redo.Stats{} // read-only: no log
	}
	return fs.rlog.Stats()
}

// fail records a fatal error (lease lost, fenced, log failed): every later
// call returns ErrIO until the node remounts.
// The kernel is told to drop everything it cached: this node can vouch for
// nothing once its locks may be gone.
func (fs *FS) fail(err error) error {
	fs.mu.Lock()
	first := fs.mu.failed == nil
	if first {
		fs.log.Error("file system stops: remount needed", "err", err)
		fs.mu.failed = err
		if fs.cfg.OnFail != nil && !fs.mu.halted {
			go fs.cfg.OnFail(err)
		}
	}
	invalidate := fs.mu.invalidate
	fs.mu.Unlock()
	if first && invalidate != nil {
		// On a goroutine of its own: fail runs under the cache's mutex
		// (commit) and in the log writer, and telling the kernel may wait
		// for an inode being evicted, whose eviction may wait for a request
		// that waits for that mutex. The kernel's caches expire within the
		// lease anyway (CacheFor is 0 from now on).
		go invalidate(0, false, "")
	}
	return fmt.Errorf("%w: %v", ErrIO, err)
}

func (fs *FS) failed() error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.mu.failed != nil {
		return fmt.Errorf("%w: %v", ErrIO, fs.mu.failed)
	}
	return nil
}

// LeaseLost tells the file system its lock session ended.
func (fs *FS) LeaseLost() { fs.fail(errors.New("lock lease lost")) }

func (fs *FS) now() layout.Time {
	t := fs.cfg.Now()
	return layout.Time{Sec: t.Unix(), Nsec: uint32(t.Nanosecond())}
}

func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// Halt stops the node at once without writing anything back, as a crash
// would (for tests): its log is left for another node to replay.
func (fs *FS) Halt() {
	fs.mu.Lock()
	fs.mu.halted = true // a crash ends nothing: the lease runs out
	fs.mu.Unlock()
	fs.fail(errors.New("halted"))
	fs.stopLoops()
}

// stopLoops stops the background loops (flusher, janitor, freer) and
// waits for them; calling it again does nothing.
func (fs *FS) stopLoops() {
	select {
	case <-fs.stop:
	default:
		close(fs.stop)
	}
	fs.flusher.Wait()
}

// untilStop returns a context of parent that is also cancelled when the
// file system stops; call cancel when done with it.
func (fs *FS) untilStop(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-fs.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// Identity is the file system's UUID and the secret NFS gateways MAC
// their file handles with (layout.Super; ok false when the file system
// predates handle keys: plumeria fsck --upgrade adds one).
func (fs *FS) Identity() (uuid [16]byte, handleKey [32]byte, ok bool) {
	return fs.super.UUID, fs.super.HandleKey, fs.super.HasHandleKey()
}
