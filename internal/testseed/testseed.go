// Package testseed gives randomized tests their seed: $PLUMERIA_SEED if
// set, else a fresh one, logged so that a failure can be replayed.
package testseed

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// Seed returns PLUMERIA_SEED if set, else a fresh seed, and logs it.
func Seed(t testing.TB) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(os.Getenv("PLUMERIA_SEED"), 10, 64)
	if err != nil {
		n = uint64(time.Now().UnixNano())
	}
	t.Logf("PLUMERIA_SEED=%d", n)
	return n
}
