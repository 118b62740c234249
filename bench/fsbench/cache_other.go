//go:build !linux

package fsbench

import (
	"errors"
	"os"
)

var errNoFadvise = errors.New("posix_fadvise is not used on this platform")

func dropCache(*os.File) error    { return errNoFadvise }
func adviseRandom(*os.File) error { return nil }
func syncFS(string) error         { return nil }

// fdatasync falls back to fsync(2) (File.Sync).
func fdatasync(f *os.File) error { return f.Sync() }

func rmdir(path string) error { return os.Remove(path) }
