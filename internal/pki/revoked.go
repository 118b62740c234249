package pki

import (
	"crypto/x509"
	"sync"
	"sync/atomic"
	"time"
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

// RenewAt returns when a member should renew c: at two thirds of its
// life, counted from its issue (NotBefore is backdated by the allowed
// clock skew, which is not life).
func RenewAt(c *x509.Certificate) time.Time { return c.NotAfter.Add(-Lifetime(c) / 3) }

// Lifetime returns the life c was issued for (NotBefore is backdated by
// the allowed clock skew, which is not life).
func Lifetime(c *x509.Certificate) time.Duration {
	issued := c.NotBefore.Add(clockSkew)
	if issued.After(c.NotAfter) {
		issued = c.NotBefore
	}
	return c.NotAfter.Sub(issued)
}
