//go:build !linux && !darwin

package store

import "errors"

// freeBytes is not implemented here: set Options.CapacityBytes.
func freeBytes(dir string) (int64, error) {
	return 0, errors.New("free space unknown on this OS: set Options.CapacityBytes")
}
