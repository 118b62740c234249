package filesys

import (
	"errors"
	"time"

	"github.com/plumeria-fs/plumeria/filesys/acl"
)

// RootIno is the inode number of the root directory.
const RootIno = 1

// Errors returned by FS methods (wrapped with what failed); test with
// errors.Is. The FUSE adapter maps each to one errno; nothing below it
// knows errno values.
var (
	ErrNotFound     = errors.New("no such file or directory")        // ENOENT
	ErrExists       = errors.New("file exists")                      // EEXIST
	ErrNotEmpty     = errors.New("directory not empty")              // ENOTEMPTY
	ErrIsDir        = errors.New("is a directory")                   // EISDIR
	ErrNotDir       = errors.New("not a directory")                  // ENOTDIR
	ErrNameTooLong  = errors.New("file name too long")               // ENAMETOOLONG
	ErrNoSpace      = errors.New("no space left on device")          // ENOSPC
	ErrNotPermitted = errors.New("operation not permitted")          // EPERM
	ErrAccess       = errors.New("permission denied")                // EACCES
	ErrInvalid      = errors.New("invalid argument")                 // EINVAL
	ErrFileTooBig   = errors.New("file too large")                   // EFBIG
	ErrNoAttr       = errors.New("no such attribute")                // ENODATA
	ErrRange        = errors.New("result too large")                 // ERANGE
	ErrAttrTooBig   = errors.New("attribute list too long")          // E2BIG
	ErrTooManyLinks = errors.New("too many links")                   // EMLINK
	ErrWouldBlock   = errors.New("resource temporarily unavailable") // EAGAIN
	ErrDeadlock     = errors.New("resource deadlock avoided")        // EDEADLK
	ErrNotSupported = errors.New("operation not supported")          // EOPNOTSUPP
	ErrStale        = errors.New("stale file handle")                // ESTALE
	ErrIO           = errors.New("input/output error")               // EIO: lease lost, fenced, data lost
	ErrReadOnly     = errors.New("read-only file system")            // EROFS
	ErrInterrupted  = errors.New("interrupted")                      // EINTR
)

// Attr is an inode's attributes as stat shows them.
type Attr struct {
	Ino                 uint64
	Gen                 uint64 // bumped each time the inode number is reused
	Mode                uint32 // file type bits and permissions, as syscall.S_IF* | 0o7777
	Nlink               uint32
	Uid, Gid            uint32
	Rdev                uint32
	Size                uint64
	Blocks              uint64 // 512-byte units in use
	Atime, Mtime, Ctime time.Time
	// ACL is the inode's access ACL (acl.XattrAccess) when the mode does
	// not say it all, else nil; Mode's group bits are its mask. Only
	// Caller.Permits reads it: the kernel fetches the list itself.
	ACL acl.ACL
}

// SetAttr lists the attributes Setattr changes; nil fields stay.
type SetAttr struct {
	Mode         *uint32 // permission bits only (0o7777)
	Uid, Gid     *uint32
	Size         *uint64
	Atime, Mtime *time.Time
	// TimesNow says Atime and Mtime (those set) are the server's clock
	// (NFS SET_TO_SERVER_TIME, utimes(NULL)), not times the caller chose.
	// Only CheckSetattr reads it: such a change needs write permission
	// instead of ownership. When one is now and the other a chosen time,
	// leave it false (ownership is needed, as utimensat(2) asks).
	// Setattr applies Atime and Mtime as given.
	TimesNow bool
	// KillPriv clears setuid and setgid (of a group-executable file) and
	// drops security.capability, as a chown of a regular file does.
	KillPriv bool
}

// Caller is who asks: new inodes take its ids. FS methods check no
// permissions: for FUSE callers the kernel checks them
// (default_permissions) against the attributes it got; for callers no
// kernel checked (the NFS gateway) the methods in access.go decide them.
type Caller struct {
	Uid, Gid uint32
	Groups   []uint32 // supplementary groups (AUTH_SYS gids); nil for FUSE callers
	// Umask is cleared from the mode of an inode it creates (Create,
	// Mkdir, Mknod) unless the parent has a default ACL, which then
	// decides instead (posix_acl_create). The kernel leaves it to us over
	// FUSE with POSIX ACLs on; NFS clients apply it themselves (0).
	Umask uint32
}

// DirEntry is one name in a directory listing.
type DirEntry struct {
	Name   string
	Ino    uint64
	Mode   uint32 // file type bits only
	Cookie uint64 // resume a listing after this entry
}

// Statfs describes the volume's capacity in Bsize units.
type Statfs struct {
	Bsize                 uint32
	Blocks, Bfree, Bavail uint64
	Files, Ffree          uint64
	NameLen               uint32
}

// FileLock is a POSIX record lock or a BSD flock (the whole file).
type FileLock struct {
	Type       int16  // syscall.F_RDLCK, F_WRLCK, F_UNLCK
	Start, End uint64 // inclusive byte range; End = ^uint64(0) for "to EOF"
	Pid        uint32 // owner's pid, reported by Getlk
}

// Rename flags, as renameat2.
const (
	RenameNoReplace = 1 << 0
	RenameExchange  = 1 << 1
)

// Setxattr flags, as setxattr(2); XattrACLKillSGID is ours.
const (
	XattrCreate  = 1
	XattrReplace = 2
	// XattrACLKillSGID, with an access ACL being set, clears S_ISGID
	// too (posix_acl_update_mode: the setter is outside the file's group
	// and lacks CAP_FSETID; over FUSE the kernel decides it).
	XattrACLKillSGID = 1 << 16
)
