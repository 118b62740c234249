//go:build linux

package store

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// fallocate allocates the first size bytes of f (its size becomes size).
func fallocate(f *os.File, size int64) error {
	return unix.Fallocate(int(f.Fd()), 0, 0, size)
}

func fdatasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

// pwritev writes bufs to f at off in order with as few pwritev(2) calls
// as it takes (IOV_MAX buffers each, and again after a short write). It
// may reslice bufs' elements.
func pwritev(f *os.File, bufs [][]byte, off int64) error {
	const iovMax = 1024
	for len(bufs) > 0 {
		n, err := unix.Pwritev(int(f.Fd()), bufs[:min(len(bufs), iovMax)], off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "pwritev", Path: f.Name(), Err: err}
		}
		if n == 0 {
			return &os.PathError{Op: "pwritev", Path: f.Name(), Err: io.ErrShortWrite}
		}
		off += int64(n)
		for n > 0 {
			if n < len(bufs[0]) {
				bufs[0] = bufs[0][n:]
				break
			}
			n -= len(bufs[0])
			bufs = bufs[1:]
		}
	}
	return nil
}
