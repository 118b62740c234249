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

func rmdir(path string) error { return os.Remove(path) }
