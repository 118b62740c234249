package timetravel

import (
	"errors"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// copyXattrs copies the user.* extended attributes of src to dst (others
// need privileges or are the file system's own); failures are ignored, as
// cp -a does.
func copyXattrs(src, dst string) {
	sz, err := unix.Llistxattr(src, nil)
	if err != nil || sz <= 0 {
		return
	}
	buf := make([]byte, sz)
	n, err := unix.Llistxattr(src, buf)
	if err != nil {
		return
	}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		if !strings.HasPrefix(name, "user.") {
			continue
		}
		vs, err := unix.Lgetxattr(src, name, nil)
		if err != nil || vs < 0 {
			continue
		}
		v := make([]byte, vs)
		vn, err := unix.Lgetxattr(src, name, v)
		if err != nil {
			continue
		}
		unix.Lsetxattr(dst, name, v[:vn], 0)
	}
}

// utimesNoFollow sets the access and modification times of path itself.
func utimesNoFollow(path string, ts []syscall.Timespec) error {
	return unix.UtimesNanoAt(unix.AT_FDCWD, path, []unix.Timespec{unix.Timespec(ts[0]), unix.Timespec(ts[1])}, unix.AT_SYMLINK_NOFOLLOW)
}

// getxattr reads extended attribute name of path (not following a final
// symlink).
func getxattr(path, name string) ([]byte, error) {
	for size := 4096; ; size *= 2 {
		b := make([]byte, size)
		n, err := unix.Lgetxattr(path, name, b)
		if errors.Is(err, syscall.ERANGE) && size < 1<<20 {
			continue
		}
		if err != nil {
			return nil, err
		}
		return b[:n], nil
	}
}
