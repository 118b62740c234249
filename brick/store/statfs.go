//go:build linux || darwin

package store

import (
	"fmt"
	"syscall"
)

// freeBytes returns the bytes available to unprivileged users on the file
// system holding dir.
func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
