package filesys

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys/fstest"
)

type leaseLocker struct {
	fstest.SoloLocker
	left time.Duration
}

func (l leaseLocker) LeaseLeft() time.Duration { return l.left }

// TestCacheFor: what the kernel may cache is bounded by the lease left,
// less the safety margin; nothing once the file system stopped; unbounded
// without leases.
func TestCacheFor(t *testing.T) {
	ctx := context.Background()
	dev := formatted(t)
	fs, err := Open(ctx, Config{Dev: dev, Locker: leaseLocker{left: 10 * time.Second}, Table: "v", ID: "p", Session: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := fs.CacheFor(); got > 10*time.Second-cacheSafety || got < 10*time.Second-cacheSafety-time.Second {
		t.Errorf("CacheFor %v with 10 s of lease left", got)
	}
	fs.Halt()
	if got := fs.CacheFor(); got != 0 {
		t.Errorf("CacheFor %v after the file system stopped", got)
	}
	solo := openSolo(t, formatted(t), "q")
	defer solo.Close(ctx)
	if got := solo.CacheFor(); got != math.MaxInt64 {
		t.Errorf("CacheFor %v without leases", got)
	}
}
