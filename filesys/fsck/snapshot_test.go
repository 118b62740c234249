package fsck

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/lock"
)

// TestSnapshot: a copy of the volume taken after a mounted node gave the
// barrier up is clean for fsck in snapshot mode (the node's slot is in
// use but its log is in place); a copy taken with records only in the log
// is not, and the checker says why.
func TestSnapshot(t *testing.T) {
	ctx := context.Background()
	tr := build(t)
	fs := openFS(t, tr.dev, "mounted", time.Hour)
	defer fs.Close(ctx)
	d := must(fs.Mkdir(ctx, filesys.RootIno, "later", 0o755, filesys.Caller{}))
	f := must(fs.Create(ctx, d.Ino, "f", 0o644, filesys.Caller{}, true))
	must(fs.Write(ctx, f.Ino, 0, []byte("in the snapshot"), 0, false))
	if err := fs.Sync(ctx); err != nil { // in the log, not in place
		t.Fatal(err)
	}
	unsettled := tr.dev.Clone()
	if err := fs.Revoke(ctx, "v", filesys.BarrierLock, lock.None); err != nil {
		t.Fatal(err)
	}
	settled := tr.dev.Clone()

	rep, err := Check(ctx, settled, Options{Snapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	expectClean(t, rep)
	rep, err = Check(ctx, unsettled, Options{Snapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(rep.Problems, func(p Problem) bool { return strings.Contains(p.What, "lack records of its log") }) {
		t.Fatalf("a copy with records only in the log:\n%s", lines(rep))
	}
	if _, err := Check(ctx, settled, Options{Snapshot: true, Repair: true}); err == nil {
		t.Fatal("repair of a snapshot was not refused")
	}
}
