package fuse

import (
	"context"
	"errors"
	"log/slog"
	"syscall"

	"github.com/plumeria-fs/plumeria/filesys"
)

// errnos maps each filesys sentinel to the errno the kernel sees. Order
// matters only if an error wraps two sentinels: the first match wins.
var errnos = []struct {
	err   error
	errno syscall.Errno
}{
	{filesys.ErrNotFound, syscall.ENOENT},
	{filesys.ErrExists, syscall.EEXIST},
	{filesys.ErrNotEmpty, syscall.ENOTEMPTY},
	{filesys.ErrIsDir, syscall.EISDIR},
	{filesys.ErrNotDir, syscall.ENOTDIR},
	{filesys.ErrNameTooLong, syscall.ENAMETOOLONG},
	{filesys.ErrNoSpace, syscall.ENOSPC},
	{filesys.ErrQuota, syscall.EDQUOT},
	{filesys.ErrCrossDevice, syscall.EXDEV},
	{filesys.ErrNotPermitted, syscall.EPERM},
	{filesys.ErrAccess, syscall.EACCES},
	{filesys.ErrInvalid, syscall.EINVAL},
	{filesys.ErrFileTooBig, syscall.EFBIG},
	{filesys.ErrNoAttr, syscall.ENODATA},
	{filesys.ErrRange, syscall.ERANGE},
	{filesys.ErrAttrTooBig, syscall.E2BIG},
	{filesys.ErrTooManyLinks, syscall.EMLINK},
	{filesys.ErrWouldBlock, syscall.EAGAIN},
	{filesys.ErrDeadlock, syscall.EDEADLK},
	{filesys.ErrNotSupported, syscall.EOPNOTSUPP},
	{filesys.ErrStale, syscall.ESTALE},
	{filesys.ErrIO, syscall.EIO},
	{filesys.ErrReadOnly, syscall.EROFS},
	{filesys.ErrInterrupted, syscall.EINTR},
	{context.Canceled, syscall.EINTR}, // the FUSE request was interrupted
}

// toErrno translates err from FileSystem. Errors that are no filesys
// sentinel are logged and become EIO: they are bugs or lost data, and the
// kernel can say no more than EIO about either.
func toErrno(log *slog.Logger, op string, ino uint64, err error) syscall.Errno {
	if err == nil {
		return 0
	}
	for _, e := range errnos {
		if errors.Is(err, e.err) {
			return e.errno
		}
	}
	log.Error("fuse: unexpected error", "op", op, "ino", ino, "err", err)
	return syscall.EIO
}
