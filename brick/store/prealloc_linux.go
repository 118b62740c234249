//go:build linux

package store

import (
	"os"

	"golang.org/x/sys/unix"
)

// fallocate allocates the first size bytes of f (its size becomes size).
func fallocate(f *os.File, size int64) error {
	return unix.Fallocate(int(f.Fd()), 0, 0, size)
}

func fdatasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
