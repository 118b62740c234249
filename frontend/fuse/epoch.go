package fuse

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Dentry epochs (FUSE_NOTIFY_INC_EPOCH, protocol 7.44, Linux 6.16).
//
// The kernel caches a name (positive or negative) for its entry timeout.
// Invalidating one name (NOTIFY_INVAL_ENTRY) takes the directory's i_rwsem
// in the kernel, and a request holding it (a lookup or create in that
// directory) may itself be waiting for the very cluster lock whose revoke
// must first invalidate: the invalidation cannot be synchronous, and an
// asynchronous one leaves a window where the kernel answers from a name
// another node already changed. The epoch notification has neither
// problem: it increments the connection's epoch, takes no lock, and every
// dentry made under an older epoch is looked up again at its next use.
// The kernel samples the epoch *before* it sends a LOOKUP (or CREATE,
// MKDIR, ...), so a reply computed before a revoke and delivered after it
// carries the old epoch and is not trusted either: no race with replies
// in flight.
//
// go-fuse has no call for it, so the adapter writes the message on its
// own duplicate of the mount's /dev/fuse descriptor, found by comparing
// the process's descriptors before and after the mount (mounts of one
// process are serialized by mountMu for that).
type epochs struct {
	mu sync.RWMutex // inc holds it in read mode, close in write mode
	fd int          // duplicate of the mount's /dev/fuse descriptor; -1: none
}

// fuseNotifyIncEpoch is FUSE_NOTIFY_INC_EPOCH (include/uapi/linux/fuse.h).
const fuseNotifyIncEpoch = 8

// mountMu serializes Mount within the process, so that the /dev/fuse
// descriptor a mount adds is known (fuseFDs before and after).
var mountMu sync.Mutex

// fuseFDs returns the process's open descriptors of /dev/fuse.
func fuseFDs() map[int]bool {
	out := map[int]bool{}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return out
	}
	for _, e := range ents {
		var fd int
		if _, err := fmt.Sscan(e.Name(), &fd); err != nil {
			continue
		}
		if t, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && t == "/dev/fuse" {
			out[fd] = true
		}
	}
	return out
}

// setup finds the descriptor the mount added (before: fuseFDs before the
// mount) and checks that the kernel takes epoch notifications. It reports
// whether epochs work; without them names are not cached.
func (e *epochs) setup(srv *fuse.Server, before map[int]bool) error {
	e.fd = -1
	if k := srv.KernelSettings(); k == nil || !k.SupportsVersion(7, 44) {
		return fmt.Errorf("kernel FUSE protocol below 7.44 (Linux 6.16): no dentry epochs")
	}
	var added []int
	for fd := range fuseFDs() {
		if !before[fd] {
			added = append(added, fd)
		}
	}
	if len(added) != 1 {
		return fmt.Errorf("cannot tell the mount's /dev/fuse descriptor (%d new ones)", len(added))
	}
	fd, err := syscall.Dup(added[0])
	if err != nil {
		return fmt.Errorf("dup /dev/fuse descriptor: %w", err)
	}
	syscall.CloseOnExec(fd)
	e.mu.Lock()
	e.fd = fd
	e.mu.Unlock()
	if err := e.inc(); err != nil {
		e.close()
		return fmt.Errorf("kernel refused an epoch notification: %w", err)
	}
	return nil
}

// ok reports whether epochs are in use.
func (e *epochs) ok() bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.fd >= 0
}

// inc makes every dentry the kernel holds for this mount (made before the
// call) stale: the next use looks the name up again. It never blocks on
// the kernel's locks.
func (e *epochs) inc() error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.fd < 0 {
		return nil
	}
	// struct fuse_out_header: len, error (here the notify code), unique 0.
	var h struct {
		len    uint32
		error  int32
		unique uint64
	}
	h.len = uint32(unsafe.Sizeof(h))
	h.error = fuseNotifyIncEpoch // a notification carries its code as is
	b := unsafe.Slice((*byte)(unsafe.Pointer(&h)), unsafe.Sizeof(h))
	_, err := syscall.Write(e.fd, b)
	if err == syscall.ENOENT {
		return nil // the connection is being torn down
	}
	return err
}

func (e *epochs) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fd >= 0 {
		syscall.Close(e.fd)
		e.fd = -1
	}
}
