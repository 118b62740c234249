package pki

import (
	"sync"
	"sync/atomic"
)

// The process's list of revoked nodes, from the newest cluster map it has
// seen (`plumeria node revoke` puts names in the map). Every place that
// receives a map calls NoteRevoked; Authorize consults the list on every
// RPC, and a member's TLS peer check on every handshake.
var revokedNames struct {
	mu    sync.Mutex
	epoch uint64
	set   atomic.Pointer[map[string]bool]
}

func init() { SetRevoked(IsRevoked) }

// NoteRevoked records the revoked names of the map of epoch, unless a
// newer map was noted already.
func NoteRevoked(epoch uint64, names []string) {
	revokedNames.mu.Lock()
	defer revokedNames.mu.Unlock()
	if epoch < revokedNames.epoch {
		return
	}
	revokedNames.epoch = epoch
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	revokedNames.set.Store(&set)
}

// IsRevoked reports whether the newest map noted revokes name.
func IsRevoked(name string) bool {
	set := revokedNames.set.Load()
	return set != nil && (*set)[name]
}
