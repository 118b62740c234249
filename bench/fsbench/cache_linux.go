package fsbench

import (
	"os"

	"golang.org/x/sys/unix"
)

// dropCache asks the kernel to evict f's clean cached pages
// (posix_fadvise POSIX_FADV_DONTNEED). Dirty pages stay: sync first.
func dropCache(f *os.File) error { return fadvise(f, unix.FADV_DONTNEED) }

// adviseRandom turns read-ahead off for f (POSIX_FADV_RANDOM).
func adviseRandom(f *os.File) error { return fadvise(f, unix.FADV_RANDOM) }

func fadvise(f *os.File, advice int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = unix.Fadvise(int(fd), 0, 0, advice) }); err != nil {
		return err
	}
	if ferr != nil {
		return &os.PathError{Op: "fadvise", Path: f.Name(), Err: ferr}
	}
	return nil
}

// syncFS writes back every dirty page of the file system holding dir
// (syncfs(2)), so that dropCache can evict them.
func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Syncfs(int(fd)) }); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "syncfs", Path: dir, Err: serr}
	}
	return nil
}

// rmdir removes an empty directory with rmdir(2) alone (os.Remove tries
// unlink(2) first).
func rmdir(path string) error {
	if err := unix.Rmdir(path); err != nil {
		return &os.PathError{Op: "rmdir", Path: path, Err: err}
	}
	return nil
}

// fdatasync makes f's data durable, and the metadata needed to read it
// back (its size), but not its timestamps (fdatasync(2)).
func fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Fdatasync(int(fd)) }); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: serr}
	}
	return nil
}
