package nfs

import (
	"context"
	"fmt"

	"github.com/plumeria-fs/plumeria/filesys"
)

// unavailable is the file system of a suspended server: every call is
// filesys.ErrWouldBlock (NFS3ERR_JUKEBOX: "try again later"), so each
// procedure answers in its own shape and the client retries.
type unavailable struct{ why error }

func (u unavailable) err() error {
	return fmt.Errorf("%w: the gateway is mounting the file system again (%v)", filesys.ErrWouldBlock, u.why)
}

func (u unavailable) Lookup(context.Context, uint64, string) (filesys.Attr, error) {
	return filesys.Attr{}, u.err()
}
func (u unavailable) Parent(context.Context, uint64) (filesys.Attr, error) {
	return filesys.Attr{}, u.err()
}
func (u unavailable) Getattr(context.Context, uint64) (filesys.Attr, error) {
	return filesys.Attr{}, u.err()
}
func (u unavailable) Setattr(context.Context, uint64, filesys.SetAttr) (filesys.Attr, error) {
	return filesys.Attr{}, u.err()
}
func (u unavailable) Create(context.Context, uint64, string, uint32, filesys.Caller, bool) (filesys.Attr, error) {
	return filesys.Attr{}, u.err()
}
func (u unavailable) Mknod(context.Context, uint64, string, uint32, uint32, filesys.Caller) (filesys.Attr, error) {
	return filesys.Attr{}, u.err()
}
func (u unavailable) Mkdir(context.Context, uint64, string, uint32, filesys.Caller) (filesys.Attr, error) {
	return filesys.Attr{}, u.err()
}
func (u unavailable) Symlink(context.Context, uint64, string, string, filesys.Caller) (filesys.Attr, error) {
	return filesys.Attr{}, u.err()
}
func (u unavailable) Link(context.Context, uint64, uint64, string) (filesys.Attr, error) {
	return filesys.Attr{}, u.err()
}
func (u unavailable) Unlink(context.Context, uint64, string) error { return u.err() }
func (u unavailable) Rmdir(context.Context, uint64, string) error  { return u.err() }
func (u unavailable) Rename(context.Context, uint64, string, uint64, string, uint32) error {
	return u.err()
}
func (u unavailable) Readlink(context.Context, uint64) (string, error) { return "", u.err() }
func (u unavailable) Read(context.Context, uint64, uint64, []byte, uint64) (int, error) {
	return 0, u.err()
}
func (u unavailable) Write(context.Context, uint64, uint64, []byte, uint64, bool) (int, error) {
	return 0, u.err()
}
func (u unavailable) Fsync(context.Context, uint64, bool) error { return u.err() }
func (u unavailable) Flush(context.Context, uint64) error       { return u.err() }
func (u unavailable) Sync(context.Context) error                { return u.err() }
func (u unavailable) ReadDir(context.Context, uint64, uint64, int) ([]filesys.DirEntry, bool, error) {
	return nil, false, u.err()
}
func (u unavailable) Statfs(context.Context) (filesys.Statfs, error) {
	return filesys.Statfs{}, u.err()
}
