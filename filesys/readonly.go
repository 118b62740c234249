package filesys

import (
	"context"

	"github.com/plumeria-fs/plumeria/lock"
)

// A read-only file system (Config.ReadOnly) serves a device that nothing
// changes: a volume snapshot taken through the barrier (snapshot.go), in
// which every node's log was written and every dirty block written back.
// It claims no log slot, writes nothing, frees no orphan and takes no lock
// from the lock service: its locks are local (readOnlyLocker). Every
// change is ErrReadOnly before it touches anything.

// readOnlyLocker grants every read lock at once and refuses write locks:
// each change takes a write lock first (acquire), so it fails there.
type readOnlyLocker struct{}

func (readOnlyLocker) Acquire(_ context.Context, _ string, _ uint64, mode lock.Mode) error {
	if mode == lock.Write {
		return ErrReadOnly
	}
	return nil
}

func (readOnlyLocker) Unpin(string, uint64, lock.Mode) {}
