package fuse

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/plumeria-fs/plumeria/filesys"
)

// maxWriteBytes is the largest READ or WRITE the kernel sends: 1 MiB, the
// kernel's limit, halves the requests of a streaming write (DEPENDENCIES.md).
const maxWriteBytes = 1 << 20

// Options tune a mount. The zero value is right for a cluster: the kernel
// caches nothing across calls, so every node sees every other node's
// changes as soon as the file system does.
type Options struct {
	Volume string // shown as "plumeria:<Volume>" in /proc/mounts and df

	// EntryTimeout and AttrTimeout let the kernel reuse a looked-up name or
	// attributes for this long without asking; NegativeTimeout does the
	// same for names that were not found. Anything above 0 trades
	// coherence across nodes for fewer requests.
	EntryTimeout, AttrTimeout, NegativeTimeout time.Duration

	// DirAttrTimeout is AttrTimeout for directories (0: AttrTimeout).
	// Mount sets it to DirAttrTimeoutDefault: the kernel checks search
	// permission on every directory of every path it walks, and with no
	// cached attributes each check is a GETATTR. It stays coherent: a
	// directory's attributes are cached only while this node holds its
	// inode lock, and the lock leaves only after the invalidator has
	// dropped them (synchronously: an attribute-only invalidation takes no
	// lock in the kernel that a request could hold). A reply already in
	// flight for an inode the kernel did not know yet can still install
	// attributes that are older than such an invalidation, for at most
	// DirAttrTimeout; regular files keep AttrTimeout (0), since a stale
	// size would shorten reads.
	DirAttrTimeout time.Duration

	// KeepCache keeps a file's cached pages across opens (FOPEN_KEEP_CACHE);
	// then only the invalidator drops them.
	KeepCache bool

	Debug  bool         // log every FUSE request (go-fuse's debug output)
	Logger *slog.Logger // nil: slog.Default()
	// Registerer receives the metrics (frontend/fuse/metrics.go); nil
	// means prometheus.DefaultRegisterer. Mounts of one process that use
	// the same registry share the series.
	Registerer prometheus.Registerer
}

// Server is a FileSystem served on a mount point; Mount makes one.
type Server struct {
	dir   string
	fsys  FileSystem
	opts  Options
	log   *slog.Logger
	srv   *fuse.Server
	stats *stats

	inval invalidator
	locks posixLocks
	refs  kernelRefs

	mu struct {
		sync.Mutex
		unmounted bool
	}
}

// DirAttrTimeoutDefault is the default Options.DirAttrTimeout.
const DirAttrTimeoutDefault = time.Second

// Mount mounts fsys on mountpoint and serves it until Unmount (or an
// outside umount). As root it mounts with mount(2) itself; otherwise it
// needs fusermount, and allow_other needs user_allow_other in
// /etc/fuse.conf.
func Mount(mountpoint string, fsys FileSystem, opts Options) (*Server, error) {
	if opts.DirAttrTimeout == 0 {
		opts.DirAttrTimeout = max(DirAttrTimeoutDefault, opts.AttrTimeout)
	}
	m := &Server{dir: mountpoint, fsys: fsys, opts: opts, log: opts.Logger, stats: newStats(opts.Registerer)}
	if m.log == nil {
		m.log = slog.Default()
	}
	root, err := fsys.Getattr(context.Background(), filesys.RootIno)
	if err != nil {
		return nil, fmt.Errorf("mount %s: root inode: %w", mountpoint, err)
	}
	if root.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return nil, fmt.Errorf("mount %s: root inode has mode %o, not a directory", mountpoint, root.Mode)
	}
	m.locks.init()
	m.refs.init()

	entry, attr := opts.EntryTimeout, opts.AttrTimeout
	fo := &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName:     "plumeria:" + opts.Volume,
			Name:       "plumeria",
			AllowOther: true,
			// The kernel checks permissions against the attributes we
			// return, so the file system needs no permission code.
			Options:  []string{"default_permissions"},
			MaxWrite: maxWriteBytes,
			// mount(2) directly as root: the fusermount path can deadlock
			// (go-fuse #506).
			DirectMountStrict: os.Geteuid() == 0,
			EnableLocks:       true,
			// O_TRUNC arrives in OPEN instead of a SETATTR before it.
			ExtraCapabilities: fuse.CAP_ATOMIC_O_TRUNC,
			// READDIRPLUS entries would add to the kernel's lookup counts
			// without passing through kernelRefs; with no entry cache it
			// would only double the work anyway.
			DisableReadDirPlus: true,
			Debug:              opts.Debug,
		},
		EntryTimeout: &entry,
		AttrTimeout:  &attr,
		// Mode 0 means mode 0, not "fill in 0644".
		NullPermissions: true,
		// FUSE node IDs are our inode numbers, so the invalidator can name
		// a node to the kernel without a table of our own, and hard links
		// are one kernel inode.
		ExternalNodeID: true,
		RootStableAttr: &fs.StableAttr{Ino: filesys.RootIno, Gen: root.Gen},
		Logger:         slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
	}
	if opts.Debug {
		fo.MountOptions.Logger = log.New(os.Stderr, "fuse: ", log.Lmicroseconds)
	}
	if opts.NegativeTimeout > 0 {
		neg := opts.NegativeTimeout
		fo.NegativeTimeout = &neg
	}
	bridge := fs.NewNodeFS(&node{m: m}, fo)
	srv, err := fuse.NewServer(&rawFS{RawFileSystem: bridge, m: m}, mountpoint, &fo.MountOptions)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	m.srv = srv
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	m.inval.start(srv, m.log)
	fsys.SetInvalidator(m.inval.add)
	return m, nil
}

// Unmount unmounts. If files are still open (EBUSY) it detaches the mount
// (MNT_DETACH): the name disappears now, and the open files are served
// until they are closed; Wait returns after that. The kernel sends all
// writes synchronously (no writeback cache), so nothing is left to flush.
func (m *Server) Unmount() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.unmounted {
		return nil
	}
	err := m.srv.Unmount()
	if err != nil {
		m.log.Info("fuse: unmount busy, detaching", "dir", m.dir, "err", err)
		err = detach(m.dir)
	}
	if err != nil {
		return fmt.Errorf("unmount %s: %w", m.dir, err)
	}
	m.mu.unmounted = true
	go func() { // stop the invalidator once the kernel is gone
		m.srv.Wait()
		m.inval.stop()
	}()
	return nil
}

// Wait returns when the kernel is done with the mount: after Unmount, or
// after a detached mount's last open file was closed, or after an outside
// umount.
func (m *Server) Wait() {
	m.srv.Wait()
}

// detach lazily unmounts dir (umount -l).
func detach(dir string) error {
	err := unix.Unmount(dir, unix.MNT_DETACH)
	if !errors.Is(err, unix.EPERM) {
		return err
	}
	for _, bin := range []string{"fusermount3", "fusermount"} {
		path, lerr := exec.LookPath(bin)
		if lerr != nil {
			continue
		}
		out, xerr := exec.Command(path, "-u", "-z", dir).CombinedOutput()
		if xerr != nil {
			return fmt.Errorf("%s -u -z: %w: %s", bin, xerr, out)
		}
		return nil
	}
	return err
}

// rawFS wraps go-fuse's bridge for the requests whose lock owner the fs
// package drops: FLUSH (close(2) ends the closing process's POSIX locks on
// the file) and RELEASE/RELEASEDIR (the last close of an open file ends its
// flock). The kernel sends no explicit unlock for either. RELEASE is
// asynchronous to close(2), so a flock can outlive the close by a moment.
type rawFS struct {
	fuse.RawFileSystem
	m *Server
}

func (r *rawFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	if r.m.locks.forget(in.NodeId, in.LockOwner) {
		r.m.unlock(in.NodeId, in.LockOwner, false)
	}
	return r.RawFileSystem.Flush(cancel, in)
}

func (r *rawFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	if in.ReleaseFlags&fuse.FUSE_RELEASE_FLOCK_UNLOCK != 0 {
		r.m.unlock(in.NodeId, in.LockOwner, true)
	}
	r.RawFileSystem.Release(cancel, in)
}

func (r *rawFS) ReleaseDir(in *fuse.ReleaseIn) {
	if in.ReleaseFlags&fuse.FUSE_RELEASE_FLOCK_UNLOCK != 0 {
		r.m.unlock(in.NodeId, in.LockOwner, true)
	}
	r.RawFileSystem.ReleaseDir(in)
}

// unlock drops owner's locks on ino for a close, which cannot fail or be
// interrupted: an error is only logged.
func (m *Server) unlock(ino, owner uint64, flock bool) {
	lk := filesys.FileLock{Type: syscall.F_UNLCK, Start: 0, End: ^uint64(0)}
	if err := m.fsys.Setlk(context.Background(), ino, owner, lk, flock, false); err != nil {
		m.log.Error("fuse: unlock on close", "ino", ino, "owner", owner, "flock", flock, "err", err)
	}
}

// posixLocks remembers which (inode, owner) pairs took a POSIX lock, so
// that FLUSH, which comes with every close(2), calls Setlk only for them.
type posixLocks struct {
	mu   sync.Mutex
	held map[[2]uint64]struct{}
}

func (p *posixLocks) init() { p.held = make(map[[2]uint64]struct{}) }

func (p *posixLocks) add(ino, owner uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held[[2]uint64{ino, owner}] = struct{}{}
}

// forget reports whether owner may hold POSIX locks on ino, and forgets it.
func (p *posixLocks) forget(ino, owner uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := [2]uint64{ino, owner}
	_, ok := p.held[k]
	delete(p.held, k)
	return ok
}
