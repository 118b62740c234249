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

// Options tune a mount. The zero value caches nothing in the kernel
// across calls (every lookup and stat reaches FileSystem); CacheTimeout
// turns on the coherent kernel caches a cluster mount uses.
type Options struct {
	Volume string // shown as "plumeria:<Volume>" in /proc/mounts and df

	// CacheTimeout, if above 0, lets the kernel cache names (also names
	// that were not found) and the attributes of every inode for this
	// long, relying on FileSystem to call the invalidator before it lets
	// another node change what they cover (the lock that covers them
	// leaves this node): see invalidator for how each cache is dropped
	// without a race against replies in flight. Names are cached only
	// where the kernel takes dentry epochs (FUSE 7.44, Linux 6.16;
	// epoch.go); attributes everywhere. With it the kernel also keeps
	// file pages across opens (Server.openFlags), directory listings
	// (Server.dirFlags) and symlink targets. It overrides the three
	// timeouts below.
	CacheTimeout time.Duration

	// EntryTimeout and AttrTimeout let the kernel reuse a looked-up name or
	// attributes for this long without asking; NegativeTimeout does the
	// same for names that were not found. Without CacheTimeout, anything
	// above 0 trades coherence across nodes for fewer requests (tests).
	EntryTimeout, AttrTimeout, NegativeTimeout time.Duration

	// DirAttrTimeout is AttrTimeout for directories (0: AttrTimeout, and
	// at least DirAttrTimeoutDefault): the kernel checks search permission
	// on every directory of every path it walks, and with no cached
	// attributes each check is a GETATTR. Coherent for the same reason as
	// CacheTimeout.
	DirAttrTimeout time.Duration

	// ReadAhead is how far ahead of a sequential reader the kernel reads
	// (the mount's backing device's read_ahead_kb; 0: ReadAheadDefault,
	// below 0: the kernel's 128 KiB). The kernel sends a read-ahead as
	// READs of up to 1 MiB, several in flight (MaxBackground), so a
	// streaming read keeps the volume busy instead of waiting a round trip
	// per 128 KiB. Set as root only (sysfs).
	ReadAhead int

	// KeepCache keeps a file's cached pages across every open
	// (FOPEN_KEEP_CACHE); then only the invalidator drops them. With
	// CacheTimeout alone an open keeps them only while no page
	// invalidation of the file is queued or running (Server.openFlags),
	// and directories' listings are cached (Server.dirFlags).
	KeepCache bool

	// ReadOnly mounts read-only ("ro"): the kernel refuses every change
	// with EROFS before it reaches FileSystem (a snapshot).
	ReadOnly bool

	Debug  bool         // log every FUSE request (go-fuse's debug output)
	Logger *slog.Logger // nil: slog.Default()
	// Registerer receives the metrics (frontend/fuse/metrics.go); nil
	// means prometheus.DefaultRegisterer. Mounts of one process that use
	// the same registry share the series.
	Registerer prometheus.Registerer
}

// ttls are the timeouts replies carry, set once at Mount.
type ttls struct {
	entry, negative, attr, dirAttr time.Duration
}

// Server is a FileSystem served on a mount point; Mount makes one.
type Server struct {
	dir  string
	fsys FileSystem
	// uncached is fsys if it has directories whose names the kernel must
	// not cache (UncachedNames), else nil.
	uncached UncachedNames
	opts     Options
	log      *slog.Logger
	srv      *fuse.Server
	stats    *stats

	inval  invalidator
	locks  posixLocks
	extras extras
	refs   kernelRefs
	ep     epochs
	ttl    ttls

	mu struct {
		sync.Mutex
		unmounted bool
	}
}

// DirAttrTimeoutDefault is the default Options.DirAttrTimeout.
const DirAttrTimeoutDefault = time.Second

// ReadAheadDefault is the default Options.ReadAhead: 8 READs of 1 MiB.
const ReadAheadDefault = 8 << 20

// maxBackground bounds the kernel's asynchronous requests (read-ahead
// READs among them) in flight on the mount (go-fuse's default is 12).
const maxBackground = 32

// Mount mounts fsys on mountpoint and serves it until Unmount (or an
// outside umount). As root it mounts with mount(2) itself; otherwise it
// needs fusermount, and allow_other needs user_allow_other in
// /etc/fuse.conf.
func Mount(mountpoint string, fsys FileSystem, opts Options) (*Server, error) {
	if opts.CacheTimeout > 0 {
		opts.EntryTimeout, opts.NegativeTimeout = opts.CacheTimeout, opts.CacheTimeout
		opts.AttrTimeout, opts.DirAttrTimeout = opts.CacheTimeout, opts.CacheTimeout
	}
	if opts.DirAttrTimeout == 0 {
		opts.DirAttrTimeout = max(DirAttrTimeoutDefault, opts.AttrTimeout)
	}
	m := &Server{dir: mountpoint, fsys: fsys, opts: opts, log: opts.Logger, stats: newStats(opts.Registerer)}
	m.uncached, _ = fsys.(UncachedNames)
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

	// Replies carry their timeouts (m.ttl, set once epochs are known);
	// these are go-fuse's fallbacks, and NegativeTimeout being set makes
	// go-fuse answer a name not found as a negative entry.
	var entry, attr, negative time.Duration
	fo := &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName:     "plumeria:" + opts.Volume,
			Name:       "plumeria",
			AllowOther: true,
			// The kernel checks permissions against the attributes we
			// return, so the file system needs no permission code.
			Options:       []string{"default_permissions"},
			MaxWrite:      maxWriteBytes,
			MaxReadAhead:  maxWriteBytes,
			MaxBackground: maxBackground,
			// Replies to READ carry bytes (fuse.ReadResultData), never a
			// file descriptor, so splicing cannot apply: with it on,
			// go-fuse still takes a pipe, grows it and writes the reply's
			// header into it for every READ before it falls back, and a
			// 1 MiB reply does not fit a pipe at all (pipe-max-size) and
			// logs "trySplice: ..." each time.
			DisableSplice: true,
			// mount(2) directly as root: the fusermount path can deadlock
			// (go-fuse #506).
			DirectMountStrict: os.Geteuid() == 0,
			EnableLocks:       true,
			// O_TRUNC arrives in OPEN instead of a SETATTR before it.
			// HANDLE_KILLPRIV_V2: the file system clears setuid, setgid
			// and security.capability on write and truncate itself
			// (filesys killPriv), so the kernel does not ask for
			// security.capability before every write.
			//
			// POSIX ACLs (docs/acls.md): the kernel enforces them with
			// default_permissions, caching each inode's lists until an
			// invalidation of the inode (or its own change) drops them.
			// DONT_MASK: the kernel sends the mode unmasked with the
			// umask beside it (Server.extras), and filesys applies the
			// umask only where no default ACL decides instead.
			// SETXATTR_EXT: the kernel says when setting an access ACL
			// must clear setgid (the setter is outside the file's group
			// and lacks CAP_FSETID, posix_acl_update_mode).
			EnableAcl:         true,
			ExtraCapabilities: fuse.CAP_ATOMIC_O_TRUNC | fuse.CAP_HANDLE_KILLPRIV_V2 | fuse.CAP_DONT_MASK | fuse.CAP_SETXATTR_EXT,
			// READDIRPLUS stays off: the kernel (fs/fuse/readdir.c,
			// fuse_direntplus_link, Linux 6.16 and later) stamps each
			// name it caches from a READDIRPLUS reply with the epoch it
			// reads while *processing* the reply, not the one from before
			// the request as LOOKUP does; an epoch bump (a directory's
			// lock leaving this node) that lands while a reply is in
			// flight would leave names from before the other node's
			// change cached as valid. Names would have to come with no
			// entry timeout, and then `ls -l` saves nothing over READDIR
			// plus LOOKUPs.
			DisableReadDirPlus: true,
			// A symlink's target never changes while its inode number
			// and generation stay (a new target is a new inode, renamed
			// over the old), so the kernel may keep it like a page.
			EnableSymlinkCaching: opts.CacheTimeout > 0,
			Debug:                opts.Debug,
		},
		EntryTimeout:    &entry,
		AttrTimeout:     &attr,
		NegativeTimeout: &negative,
		// Mode 0 means mode 0, not "fill in 0644".
		NullPermissions: true,
		// FUSE node IDs are our inode numbers, so the invalidator can name
		// a node to the kernel without a table of our own, and hard links
		// are one kernel inode.
		ExternalNodeID: true,
		RootStableAttr: &fs.StableAttr{Ino: filesys.RootIno, Gen: root.Gen},
		Logger:         slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
	}
	if opts.ReadOnly {
		fo.MountOptions.Options = append(fo.MountOptions.Options, "ro")
	}
	if opts.Debug {
		fo.MountOptions.Logger = log.New(os.Stderr, "fuse: ", log.Lmicroseconds)
	}
	bridge := fs.NewNodeFS(&node{m: m}, fo)
	mountMu.Lock()
	before := fuseFDs()
	srv, err := fuse.NewServer(&rawFS{RawFileSystem: bridge, m: m}, mountpoint, &fo.MountOptions)
	if err != nil {
		mountMu.Unlock()
		return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	m.srv = srv
	// The kernel has answered INIT; nothing is served before Serve.
	m.ttl = ttls{attr: opts.AttrTimeout, dirAttr: opts.DirAttrTimeout}
	if opts.EntryTimeout > 0 || opts.NegativeTimeout > 0 {
		if err := m.ep.setup(srv, before); err != nil && opts.CacheTimeout > 0 {
			m.log.Info("fuse: names are not cached in the kernel", "err", err)
		}
		if m.ep.ok() || opts.CacheTimeout == 0 {
			m.ttl.entry, m.ttl.negative = opts.EntryTimeout, opts.NegativeTimeout
		}
		negative = m.ttl.negative // go-fuse's, for negative entries
	} else {
		m.ep.fd = -1
	}
	mountMu.Unlock()
	m.inval.start(srv, m.log, &m.ep, &m.refs)
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	fsys.SetInvalidator(m.inval.add)
	if err := setReadAhead(mountpoint, opts.ReadAhead); err != nil {
		m.log.Info("fuse: kernel read-ahead left at its default", "err", err)
	}
	return m, nil
}

// setReadAhead sets the read-ahead of the mount's backing device (the
// kernel gives every FUSE mount one, named after its device number) to
// bytes (0: ReadAheadDefault; below 0: leave it).
func setReadAhead(mountpoint string, bytes int) error {
	if bytes < 0 {
		return nil
	}
	if bytes == 0 {
		bytes = ReadAheadDefault
	}
	var st unix.Stat_t
	if err := unix.Stat(mountpoint, &st); err != nil {
		return fmt.Errorf("stat %s: %w", mountpoint, err)
	}
	path := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	if err := os.WriteFile(path, []byte(fmt.Sprintf("%d\n", bytes>>10)), 0); err != nil {
		return fmt.Errorf("set read-ahead: %w", err)
	}
	return nil
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
		m.ep.close()
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
//
// It also keeps what the fs package does not pass on to the node, for
// the node's call (Server.extras): the umask of CREATE, MKDIR and MKNOD,
// the SetXAttrFlags of SETXATTR.
type rawFS struct {
	fuse.RawFileSystem
	m *Server
}

func (r *rawFS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	defer r.m.extras.put(cancel, in.SetXAttrFlags)()
	return r.RawFileSystem.SetXAttr(cancel, in, attr, data)
}

// extras holds one argument of each request in progress that the fs
// package does not pass to the node (the umask of CREATE, MKDIR and
// MKNOD; the SetXAttrFlags of SETXATTR), keyed by the request's cancel
// channel: go-fuse gives each request in flight its own, and hands it to
// the node as the Context's Cancel.
type extras struct{ m sync.Map }

// put records v for the request of cancel; the returned func forgets it.
func (u *extras) put(cancel <-chan struct{}, v uint32) func() {
	u.m.Store(cancel, v)
	return func() { u.m.Delete(cancel) }
}

// of returns the value recorded for the request of ctx (0: none).
func (u *extras) of(ctx context.Context) uint32 {
	if c, ok := ctx.(*fuse.Context); ok {
		if v, ok := u.m.Load(c.Cancel); ok {
			return v.(uint32)
		}
	}
	return 0
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
