package nfs

import (
	"context"
	"errors"
	"log/slog"

	"github.com/plumeria-fs/plumeria/filesys"
)

// NFSv3 status codes (nfsstat3).
const (
	nfsOK            = 0
	nfsErrPerm       = 1
	nfsErrNoEnt      = 2
	nfsErrIO         = 5
	nfsErrAcces      = 13
	nfsErrExist      = 17
	nfsErrXDev       = 18
	nfsErrNotDir     = 20
	nfsErrIsDir      = 21
	nfsErrInval      = 22
	nfsErrFBig       = 27
	nfsErrNoSpc      = 28
	nfsErrROFS       = 30
	nfsErrMLink      = 31
	nfsErrNameTooLng = 63
	nfsErrDQuot      = 69
	nfsErrNotEmpty   = 66
	nfsErrStale      = 70
	nfsErrBadHandle  = 10001
	nfsErrNotSync    = 10002
	nfsErrBadCookie  = 10003
	nfsErrNotSupp    = 10004
	nfsErrTooSmall   = 10005
	nfsErrServerFlt  = 10006
	nfsErrBadType    = 10007
	nfsErrJukebox    = 10008
)

// statuses maps each filesys sentinel to the status a client sees. Order
// matters only if an error wraps two sentinels: the first match wins.
var statuses = []struct {
	err  error
	stat uint32
}{
	{errBadHandle, nfsErrBadHandle},
	{errForged, nfsErrBadHandle},
	{errOtherFS, nfsErrStale},
	{filesys.ErrNotFound, nfsErrNoEnt},
	{filesys.ErrExists, nfsErrExist},
	{filesys.ErrNotEmpty, nfsErrNotEmpty},
	{filesys.ErrIsDir, nfsErrIsDir},
	{filesys.ErrNotDir, nfsErrNotDir},
	{filesys.ErrNameTooLong, nfsErrNameTooLng},
	{filesys.ErrNoSpace, nfsErrNoSpc},
	{filesys.ErrQuota, nfsErrDQuot},
	{filesys.ErrCrossDevice, nfsErrXDev},
	{filesys.ErrNotPermitted, nfsErrPerm},
	{filesys.ErrAccess, nfsErrAcces},
	{filesys.ErrInvalid, nfsErrInval},
	{filesys.ErrFileTooBig, nfsErrFBig},
	{filesys.ErrTooManyLinks, nfsErrMLink},
	{filesys.ErrWouldBlock, nfsErrJukebox},
	{filesys.ErrInterrupted, nfsErrJukebox},
	{filesys.ErrNotSupported, nfsErrNotSupp},
	{filesys.ErrStale, nfsErrStale},
	{filesys.ErrIO, nfsErrIO},
	{filesys.ErrReadOnly, nfsErrROFS},
	{filesys.ErrRange, nfsErrInval},
	{context.Canceled, nfsErrJukebox}, // the gateway is stopping
}

// toStatus translates err from FileSystem. Failures of the file system
// itself (lease lost, fenced, data lost) are filesys.ErrIO: NFS3ERR_IO.
// Errors that are no filesys sentinel are bugs: they are logged and
// become NFS3ERR_SERVERFAULT.
func toStatus(log *slog.Logger, op string, err error) uint32 {
	if err == nil {
		return nfsOK
	}
	for _, s := range statuses {
		if errors.Is(err, s.err) {
			return s.stat
		}
	}
	log.Error("nfs: unexpected error", "op", op, "err", err)
	return nfsErrServerFlt
}
