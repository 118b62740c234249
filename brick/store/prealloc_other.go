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

func pwritev(f *os.File, bufs [][]byte, off int64) error {
	for _, b := range bufs {
		if _, err := f.WriteAt(b, off); err != nil {
			return err
		}
		off += int64(len(b))
	}
	return nil
}
