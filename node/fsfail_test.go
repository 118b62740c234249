package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys"
)

// TestFSFailedNodeKeepsItsLocks: a node whose file system stopped (here:
// its volume writes fail and it learns it must stop) never hands a lock to
// another node over changes that are only in its log. It fences its own
// session instead, and the other node sees its fsync'd changes after
// replaying its log, not the stale blocks.
func TestFSFailedNodeKeepsItsLocks(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	tc := newFSCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b := tc.mountFS("b")
	defer b.Close(ctx)
	a, err := MountFS(ctx, tc.cl, "fs", "a", FSNodeOptions{FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := a.FS.Create(ctx, filesys.RootIno, fmt.Sprintf("f%d", i), 0o644, filesys.Caller{}, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.FS.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	a.vol.Close() // every write of a fails from now on: nothing is written back
	a.FS.LeaseLost()
	start := time.Now()
	for i := range 20 {
		if _, err := b.FS.Lookup(ctx, filesys.RootIno, fmt.Sprintf("f%d", i)); err != nil {
			t.Fatalf("f%d, created and fsync'd by the failed node: %v", i, err)
		}
	}
	t.Logf("b saw a's files %v after a failed", time.Since(start))
	a.Close(ctx)
}
