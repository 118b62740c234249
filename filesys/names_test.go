package filesys

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestLookupInodeReused: between a Lookup's two lock sets another node
// frees the inode the name held and reuses its number for a new file. The
// lookup must not return the new file under the old name (the chaos
// harness saw a read of a key return another key's value this way).
func TestLookupInodeReused(t *testing.T) {
	ctx := context.Background()
	fs := openSolo(t, formatted(t), "p")
	defer fs.Close(ctx)
	f, err := fs.Create(ctx, RootIno, "f", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	d, err := fs.Mkdir(ctx, RootIno, "d", 0o755, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	if f.Ino > d.Ino {
		t.Skipf("file %d was numbered above its directory %d: no second look", f.Ino, d.Ino)
	}
	if err := fs.Rename(ctx, RootIno, "f", d.Ino, "f", 0); err != nil {
		t.Fatal(err)
	}
	var reused Attr
	raced := 0
	lookupRaced = func(parent uint64, name string, ino uint64) {
		if raced++; raced > 1 {
			return
		}
		if err := fs.Unlink(ctx, d.Ino, "f"); err != nil {
			t.Error(err)
			return
		}
		fs.prefetch.wg.Wait()
		for i := 0; reused.Ino != f.Ino && i < 100; i++ {
			if reused, err = fs.Create(ctx, RootIno, fmt.Sprintf("new%d", i), 0o644, Caller{}, true); err != nil {
				t.Error(err)
				return
			}
		}
	}
	defer func() { lookupRaced = nil }()
	a, err := fs.Lookup(ctx, d.Ino, "f")
	if raced == 0 {
		t.Fatal("the lookup took no second look")
	}
	if reused.Ino != f.Ino {
		t.Skip("the freed inode number was not reused")
	}
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("lookup of a name removed meanwhile, whose inode number a new file took: %+v, %v (want ErrNotFound)", a, err)
	}
}
