package history

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/filesys/fstest"
)

type memSnaps map[string]*fstest.MemDevice

func (m memSnaps) List(context.Context) ([]string, error) {
	var names []string
	for n := range m {
		names = append(names, n)
	}
	return names, nil
}

func (m memSnaps) Open(ctx context.Context, name string) (*filesys.FS, func(context.Context), error) {
	dev, ok := m[name]
	if !ok {
		return nil, nil, filesys.ErrNotFound
	}
	fs, err := filesys.Open(ctx, filesys.Config{Dev: dev, ReadOnly: true, Table: "v@" + name, ID: "snapshot"})
	if err != nil {
		return nil, nil, err
	}
	return fs, func(ctx context.Context) { fs.Close(ctx) }, nil
}

func TestHistory(t *testing.T) {
	ctx := context.Background()
	dev := fstest.NewMemDevice()
	if _, err := filesys.Format(ctx, dev, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	live, err := filesys.Open(ctx, filesys.Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "a", Session: 1})
	if err != nil {
		t.Fatal(err)
	}
	snaps := memSnaps{}
	h := New(live, snaps)
	defer live.Close(ctx)
	defer h.CloseSnapshots(ctx)
	f, err := h.Create(ctx, filesys.RootIno, "f", 0o644, filesys.Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Write(ctx, f.Ino, 0, []byte("old"), 0, false); err != nil {
		t.Fatal(err)
	}
	if err := live.Revoke(ctx, "v", filesys.BarrierLock, 0); err != nil { // settle, as a snapshot does
		t.Fatal(err)
	}
	snaps["s1"] = dev.Clone()
	if _, err := h.Write(ctx, f.Ino, 0, []byte("new"), 0, false); err != nil {
		t.Fatal(err)
	}

	ents, _, err := h.ReadDir(ctx, filesys.RootIno, 0, 100)
	if err != nil || len(ents) != 1 || ents[0].Name != "f" {
		t.Fatalf("root lists %v (%v), want f alone", ents, err)
	}
	dot, err := h.Lookup(ctx, filesys.RootIno, Name)
	if err != nil {
		t.Fatal(err)
	}
	sd, err := h.Lookup(ctx, dot.Ino, "snapshots")
	if err != nil {
		t.Fatal(err)
	}
	if ents, done, err := h.ReadDir(ctx, sd.Ino, 0, 100); err != nil || !done || len(ents) != 1 || ents[0].Name != "s1" {
		t.Fatalf("snapshots lists %v (%v)", ents, err)
	}
	if _, err := h.Lookup(ctx, sd.Ino, "nope"); !errors.Is(err, filesys.ErrNotFound) {
		t.Fatalf("lookup of a snapshot that is not: %v", err)
	}
	root, err := h.Lookup(ctx, sd.Ino, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if root.Ino < liveMax {
		t.Fatalf("a snapshot's root has a live inode number %d", root.Ino)
	}
	old, err := h.Lookup(ctx, root.Ino, "f")
	if err != nil {
		t.Fatal(err)
	}
	if old.Ino == f.Ino {
		t.Fatal("the snapshot's file has the live file's inode number")
	}
	buf := make([]byte, 10)
	if n, err := h.Read(ctx, old.Ino, 0, buf, 0); err != nil || !bytes.Equal(buf[:n], []byte("old")) {
		t.Fatalf("snapshot reads %q (%v), want old", buf[:n], err)
	}
	if n, err := h.Read(ctx, f.Ino, 0, buf, 0); err != nil || !bytes.Equal(buf[:n], []byte("new")) {
		t.Fatalf("live reads %q (%v), want new", buf[:n], err)
	}
	if ents, _, err := h.ReadDir(ctx, root.Ino, 0, 100); err != nil || len(ents) != 1 || ents[0].Ino != old.Ino {
		t.Fatalf("snapshot root lists %v (%v)", ents, err)
	}

	refused := map[string]struct {
		err  error
		want error
	}{
		"mkdir .plumeria":   {func() error { _, err := h.Mkdir(ctx, filesys.RootIno, Name, 0o755, filesys.Caller{}); return err }(), filesys.ErrExists},
		"rmdir .plumeria":   {h.Rmdir(ctx, filesys.RootIno, Name), filesys.ErrReadOnly},
		"rename .plumeria":  {h.Rename(ctx, filesys.RootIno, Name, filesys.RootIno, "x", 0), filesys.ErrReadOnly},
		"rename onto it":    {h.Rename(ctx, filesys.RootIno, "f", filesys.RootIno, Name, 0), filesys.ErrReadOnly},
		"mkdir in history":  {func() error { _, err := h.Mkdir(ctx, dot.Ino, "x", 0o755, filesys.Caller{}); return err }(), filesys.ErrReadOnly},
		"create in a snap":  {func() error { _, err := h.Create(ctx, root.Ino, "g", 0o644, filesys.Caller{}, true); return err }(), filesys.ErrReadOnly},
		"write a snap file": {func() error { _, err := h.Write(ctx, old.Ino, 0, []byte("x"), 0, false); return err }(), filesys.ErrReadOnly},
		"unlink a snap":     {h.Unlink(ctx, root.Ino, "f"), filesys.ErrReadOnly},
		"setxattr a snap":   {h.Setxattr(ctx, old.Ino, "user.a", []byte("b"), 0), filesys.ErrReadOnly},
		"link into a snap":  {func() error { _, err := h.Link(ctx, f.Ino, root.Ino, "l"); return err }(), filesys.ErrReadOnly},
		"a stale number":    {func() error { _, err := h.Getattr(ctx, 9<<32|1); return err }(), filesys.ErrStale},
	}
	for name, r := range refused {
		if !errors.Is(r.err, r.want) {
			t.Errorf("%s: %v, want %v", name, r.err, r.want)
		}
	}
	if n, err := h.Read(ctx, old.Ino, 0, buf, 0); err != nil || !bytes.Equal(buf[:n], []byte("old")) {
		t.Fatalf("after the refusals the snapshot reads %q (%v)", buf[:n], err)
	}
	if !h.UncachedNames(sd.Ino) || h.UncachedNames(root.Ino) || h.UncachedNames(filesys.RootIno) {
		t.Fatal("only the list of snapshots changes behind the kernel's back")
	}

	// Deleted: the name is gone and what the kernel holds of it is stale.
	snap := snaps["s1"]
	delete(snaps, "s1")
	if _, err := h.Lookup(ctx, sd.Ino, "s1"); !errors.Is(err, filesys.ErrNotFound) {
		t.Fatalf("lookup of a deleted snapshot: %v", err)
	}
	if _, err := h.Getattr(ctx, old.Ino); !errors.Is(err, filesys.ErrStale) {
		t.Fatalf("getattr in a deleted snapshot: %v", err)
	}
	if ents, _, err := h.ReadDir(ctx, sd.Ino, 0, 100); err != nil || len(ents) != 0 {
		t.Fatalf("snapshots lists %v (%v) after the delete", ents, err)
	}
	// Made again under the same name: new inode numbers.
	snaps["s1"] = snap
	again, err := h.Lookup(ctx, sd.Ino, "s1")
	if err != nil || again.Ino == root.Ino {
		t.Fatalf("a snapshot made again: %v, root %d (was %d)", err, again.Ino, root.Ino)
	}
}
