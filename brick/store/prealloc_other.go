//go:build !linux

package store

import (
	"errors"
	"os"
)

func fallocate(f *os.File, size int64) error {
	return errors.New("preallocation not implemented on this OS")
}

func fdatasync(f *os.File) error { return f.Sync() }
