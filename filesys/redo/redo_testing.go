package redo

import (
	"context"
	"fmt"
	"sync"
)

// MemDevice is an in-memory Device for tests, here and in the packages that
// use the log. It is safe for concurrent use.
type MemDevice struct {
	mu   sync.Mutex
	data []byte
}

var _ Device = (*MemDevice)(nil)

// NewMemDevice returns a zeroed device of size bytes.
func NewMemDevice(size uint64) *MemDevice {
	return &MemDevice{data: make([]byte, size)}
}

// ReadAt copies the device's bytes at off into p.
func (d *MemDevice) ReadAt(ctx context.Context, p []byte, off uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(len(p), off); err != nil {
		return err
	}
	copy(p, d.data[off:])
	return nil
}

// WriteAt copies p to the device at off.
func (d *MemDevice) WriteAt(ctx context.Context, p []byte, off uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(len(p), off); err != nil {
		return err
	}
	copy(d.data[off:], p)
	return nil
}

func (d *MemDevice) check(n int, off uint64) error {
	if off > uint64(len(d.data)) || uint64(n) > uint64(len(d.data))-off {
		return fmt.Errorf("redo: mem device: [%d,+%d) beyond size %d", off, n, len(d.data))
	}
	return nil
}

// Bytes returns a copy of the device's contents.
func (d *MemDevice) Bytes() []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]byte(nil), d.data...)
}

// SetBytes replaces the device's contents from b (truncated or zero-filled
// to the device's size).
func (d *MemDevice) SetBytes(b []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.data[copy(d.data, b):])
}
