// Package fuse serves a Plumeria file system to the local kernel through
// FUSE (go-fuse v2, package fs). It is a thin adapter: it turns FUSE
// requests into calls on FileSystem, which speaks inode numbers and
// filesys errors, and it is the only place where errno values appear.
//
// It does not check permissions (the kernel does, with
// default_permissions), cache anything itself, or know about other
// nodes: the file system tells it through the invalidator when another
// node changed something the kernel may have cached.
//
// Guarantee: a change made on another node is seen by the next call here
// once FileSystem has seen it. With the zero Options every lookup and stat
// reaches FileSystem; with Options.CacheTimeout the kernel caches names
// and attributes, and FileSystem calls the invalidator before it lets
// another node change what they cover (docs/caching.md says how each
// cache is dropped without racing replies in flight).
package fuse

import (
	"context"
	"time"

	"github.com/plumeria-fs/plumeria/filesys"
)

// FileSystem is what the adapter needs from the file system; *filesys.FS
// implements it. Methods are called concurrently. Errors are filesys
// sentinels (tested with errors.Is); anything else becomes EIO. A method
// whose ctx is cancelled (the caller was interrupted) may return
// ctx.Err(), which becomes EINTR. Byte slices passed in are valid only
// during the call.
type FileSystem interface {
	Lookup(ctx context.Context, dir uint64, name string) (filesys.Attr, error)
	Getattr(ctx context.Context, ino uint64) (filesys.Attr, error)
	Setattr(ctx context.Context, ino uint64, set filesys.SetAttr) (filesys.Attr, error)
	// Create makes a regular file, or returns the existing one when the name exists and excl is false.
	Create(ctx context.Context, dir uint64, name string, mode uint32, c filesys.Caller, excl bool) (filesys.Attr, error)
	Mknod(ctx context.Context, dir uint64, name string, mode, rdev uint32, c filesys.Caller) (filesys.Attr, error)
	Mkdir(ctx context.Context, dir uint64, name string, mode uint32, c filesys.Caller) (filesys.Attr, error)
	Symlink(ctx context.Context, dir uint64, name, target string, c filesys.Caller) (filesys.Attr, error)
	Link(ctx context.Context, ino, dir uint64, name string) (filesys.Attr, error)
	Unlink(ctx context.Context, dir uint64, name string) error
	Rmdir(ctx context.Context, dir uint64, name string) error
	Rename(ctx context.Context, dir uint64, name string, newDir uint64, newName string, flags uint32) error
	Readlink(ctx context.Context, ino uint64) (string, error)
	// Open counts one more local open of ino (it keeps an unlinked file
	// alive); gen is the generation the kernel knows (0: any): a freed inode,
	// or its number reused by a newer file, is ErrStale.
	Open(ctx context.Context, ino, gen uint64) error
	Hold(ino uint64)                         // the kernel learned ino: keep it (even unlinked) until Unhold
	Unhold(ctx context.Context, ino uint64)  // one Hold ended
	Release(ctx context.Context, ino uint64) // one Open ended
	// Read and Write take the generation the kernel knows (0: any): a freed
	// inode, or its number reused by a newer file, is ErrStale.
	Read(ctx context.Context, ino, gen uint64, p []byte, off uint64) (int, error) // short only at EOF
	// Write writes p at off; appendMode: write at the current end of file, whatever off says.
	Write(ctx context.Context, ino, gen uint64, p []byte, off uint64, appendMode bool) (n int, err error)
	Fsync(ctx context.Context, ino uint64, dataOnly bool) error
	Flush(ctx context.Context, ino uint64) error
	Fallocate(ctx context.Context, ino uint64, off, length uint64, mode uint32) error
	// ReadDir returns up to max entries with cookies > after, in cookie
	// order; "." and ".." are NOT included (the adapter adds them). Cookies
	// are the telldir/seekdir offsets: they must lie in [1, 2^63-3] (the
	// kernel's offsets are signed; the adapter keeps the top two for "."
	// and ".."). ents is empty only when done.
	ReadDir(ctx context.Context, dir uint64, after uint64, max int) (ents []filesys.DirEntry, done bool, err error)
	Statfs(ctx context.Context) (filesys.Statfs, error)
	Getxattr(ctx context.Context, ino uint64, name string) ([]byte, error)
	Setxattr(ctx context.Context, ino uint64, name string, value []byte, flags uint32) error
	Listxattr(ctx context.Context, ino uint64) ([]string, error)
	Removexattr(ctx context.Context, ino uint64, name string) error
	// Record locks (POSIX, per owner) and flock (whole file, flock=true), coherent across nodes.
	Getlk(ctx context.Context, ino uint64, owner uint64, lk filesys.FileLock) (filesys.FileLock, error)
	Setlk(ctx context.Context, ino uint64, owner uint64, lk filesys.FileLock, flock, wait bool) error
	// SetInvalidator registers the callback the file system calls before
	// the lock covering ino leaves this node (or with a name, when another
	// node changed that entry of directory ino; ino 0: everything, the
	// file system stopped): the adapter drops the kernel's cached
	// attributes and names under it before the callback returns, and its
	// pages in the background. The callback never waits for a kernel lock
	// (see invalidator), so it may be called with locks held.
	SetInvalidator(func(ino uint64, dir bool, name string))
	// CacheFor bounds how long the kernel may keep what it learns now:
	// the file system's locks may go to other nodes without an
	// invalidation after that (its lease ran out while it was stopped or
	// paused). Timeouts of replies are cut to it.
	CacheFor() time.Duration
}

// UncachedNames is an optional method of a FileSystem: the kernel caches
// no name of a directory for which it reports true, nor the absence of
// one (negative entries), nor the attributes such a lookup returns. For
// directories whose names change without the invalidator being told, such
// as the list of a volume's snapshots (filesys/history).
type UncachedNames interface {
	UncachedNames(dir uint64) bool
}
