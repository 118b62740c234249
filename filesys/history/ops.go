package history

import (
	"context"
	"fmt"
	"syscall"

	"github.com/plumeria-fs/plumeria/filesys"
)

// The calls below route by inode number (history.go). A change outside
// the live file system, or of the name .plumeria in the root, is
// filesys.ErrReadOnly; making that name is filesys.ErrExists.

// liveIno returns ino's inode number in the live file system, or ErrReadOnly.
func (h *FS) liveIno(ino uint64) (uint64, error) {
	if ino < liveMax {
		return ino, nil
	}
	if _, _, err := h.route(ino); err != nil {
		return 0, err
	}
	return 0, filesys.ErrReadOnly
}

// newName checks that a name may be made in dir: dir is live and name is
// not the history directory (which exists).
func (h *FS) newName(dir uint64, name string) error { return h.liveName(dir, name, filesys.ErrExists) }

// oldName checks that a name of dir may be changed or removed: dir is
// live and name is not the history directory (read-only).
func (h *FS) oldName(dir uint64, name string) error {
	return h.liveName(dir, name, filesys.ErrReadOnly)
}

func (h *FS) liveName(dir uint64, name string, ifHistory error) error {
	if _, err := h.liveIno(dir); err != nil {
		return err
	}
	if dir == filesys.RootIno && name == Name {
		return ifHistory
	}
	return nil
}

func (h *FS) Setattr(ctx context.Context, ino uint64, set filesys.SetAttr) (filesys.Attr, error) {
	if _, err := h.liveIno(ino); err != nil {
		return filesys.Attr{}, err
	}
	return h.live.Setattr(ctx, ino, set)
}

func (h *FS) Create(ctx context.Context, dir uint64, name string, mode uint32, c filesys.Caller, excl bool) (filesys.Attr, error) {
	if err := h.newName(dir, name); err != nil {
		return filesys.Attr{}, err
	}
	return h.live.Create(ctx, dir, name, mode, c, excl)
}

func (h *FS) Mknod(ctx context.Context, dir uint64, name string, mode, rdev uint32, c filesys.Caller) (filesys.Attr, error) {
	if err := h.newName(dir, name); err != nil {
		return filesys.Attr{}, err
	}
	return h.live.Mknod(ctx, dir, name, mode, rdev, c)
}

func (h *FS) Mkdir(ctx context.Context, dir uint64, name string, mode uint32, c filesys.Caller) (filesys.Attr, error) {
	if err := h.newName(dir, name); err != nil {
		return filesys.Attr{}, err
	}
	return h.live.Mkdir(ctx, dir, name, mode, c)
}

func (h *FS) Symlink(ctx context.Context, dir uint64, name, target string, c filesys.Caller) (filesys.Attr, error) {
	if err := h.newName(dir, name); err != nil {
		return filesys.Attr{}, err
	}
	return h.live.Symlink(ctx, dir, name, target, c)
}

func (h *FS) Link(ctx context.Context, ino, dir uint64, name string) (filesys.Attr, error) {
	if _, err := h.liveIno(ino); err != nil {
		return filesys.Attr{}, err
	}
	if err := h.newName(dir, name); err != nil {
		return filesys.Attr{}, err
	}
	return h.live.Link(ctx, ino, dir, name)
}

func (h *FS) Unlink(ctx context.Context, dir uint64, name string) error {
	if err := h.oldName(dir, name); err != nil {
		return err
	}
	return h.live.Unlink(ctx, dir, name)
}

func (h *FS) Rmdir(ctx context.Context, dir uint64, name string) error {
	if err := h.oldName(dir, name); err != nil {
		return err
	}
	return h.live.Rmdir(ctx, dir, name)
}

func (h *FS) Rename(ctx context.Context, dir uint64, name string, newDir uint64, newName string, flags uint32) error {
	if err := h.oldName(dir, name); err != nil {
		return err
	}
	if err := h.oldName(newDir, newName); err != nil {
		return err
	}
	return h.live.Rename(ctx, dir, name, newDir, newName, flags)
}

func (h *FS) Readlink(ctx context.Context, ino uint64) (string, error) {
	fs, in, err := h.route(ino)
	if err != nil {
		return "", err
	}
	if fs == nil {
		if target, ok := h.linkTarget(in); ok {
			return target, nil
		}
		return "", filesys.ErrInvalid
	}
	return fs.Readlink(ctx, in)
}

func (h *FS) Open(ctx context.Context, ino, gen uint64) error {
	fs, in, err := h.route(ino)
	if err != nil || fs == nil {
		return err
	}
	return fs.Open(ctx, in, gen)
}

func (h *FS) Hold(ino uint64) {
	if fs, in, err := h.route(ino); err == nil && fs != nil {
		fs.Hold(in)
	}
}

func (h *FS) Unhold(ctx context.Context, ino uint64) {
	if fs, in, err := h.route(ino); err == nil && fs != nil {
		fs.Unhold(ctx, in)
	}
}

func (h *FS) Release(ctx context.Context, ino uint64) {
	if fs, in, err := h.route(ino); err == nil && fs != nil {
		fs.Release(ctx, in)
	}
}

func (h *FS) Read(ctx context.Context, ino, gen uint64, p []byte, off uint64) (int, error) {
	fs, in, err := h.route(ino)
	if err != nil {
		return 0, err
	}
	if fs == nil {
		return 0, filesys.ErrIsDir
	}
	return fs.Read(ctx, in, gen, p, off)
}

func (h *FS) Write(ctx context.Context, ino, gen uint64, p []byte, off uint64, appendMode bool) (int, error) {
	if _, err := h.liveIno(ino); err != nil {
		return 0, err
	}
	return h.live.Write(ctx, ino, gen, p, off, appendMode)
}

func (h *FS) Fsync(ctx context.Context, ino uint64, dataOnly bool) error {
	fs, in, err := h.route(ino)
	if err != nil || fs == nil {
		return err
	}
	return fs.Fsync(ctx, in, dataOnly)
}

func (h *FS) Flush(ctx context.Context, ino uint64) error {
	fs, in, err := h.route(ino)
	if err != nil || fs == nil {
		return err
	}
	return fs.Flush(ctx, in)
}

func (h *FS) Fallocate(ctx context.Context, ino uint64, off, length uint64, mode uint32) error {
	if _, err := h.liveIno(ino); err != nil {
		return err
	}
	return h.live.Fallocate(ctx, ino, off, length, mode)
}

func (h *FS) Getxattr(ctx context.Context, ino uint64, name string) ([]byte, error) {
	fs, in, err := h.route(ino)
	if err != nil {
		return nil, err
	}
	if fs == nil {
		return nil, filesys.ErrNoAttr
	}
	if name == VersionsXattr {
		return h.versionsXattr(ctx, fs, in)
	}
	return fs.Getxattr(ctx, in, name)
}

func (h *FS) Setxattr(ctx context.Context, ino uint64, name string, value []byte, flags uint32) error {
	if _, err := h.liveIno(ino); err != nil {
		return err
	}
	if name == VersionsXattr {
		return fmt.Errorf("%w: %s is made by the file system", filesys.ErrNotPermitted, name)
	}
	return h.live.Setxattr(ctx, ino, name, value, flags)
}

func (h *FS) Listxattr(ctx context.Context, ino uint64) ([]string, error) {
	fs, in, err := h.route(ino)
	if err != nil || fs == nil {
		return nil, err
	}
	return fs.Listxattr(ctx, in)
}

func (h *FS) Removexattr(ctx context.Context, ino uint64, name string) error {
	if _, err := h.liveIno(ino); err != nil {
		return err
	}
	if name == VersionsXattr {
		return fmt.Errorf("%w: %s is made by the file system", filesys.ErrNotPermitted, name)
	}
	return h.live.Removexattr(ctx, ino, name)
}

func (h *FS) Getlk(ctx context.Context, ino uint64, owner uint64, lk filesys.FileLock) (filesys.FileLock, error) {
	fs, in, err := h.route(ino)
	if err != nil {
		return filesys.FileLock{}, err
	}
	if fs == nil {
		return filesys.FileLock{Type: syscall.F_UNLCK}, nil
	}
	return fs.Getlk(ctx, in, owner, lk)
}

func (h *FS) Setlk(ctx context.Context, ino uint64, owner uint64, lk filesys.FileLock, flock, wait bool) error {
	fs, in, err := h.route(ino)
	if err != nil {
		return err
	}
	if fs == nil {
		if lk.Type == syscall.F_UNLCK {
			return nil
		}
		return filesys.ErrNotSupported
	}
	return fs.Setlk(ctx, in, owner, lk, flock, wait)
}
