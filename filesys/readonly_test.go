package filesys

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys/fstest"
	"github.com/plumeria-fs/plumeria/lock"
)

// TestReadOnly: a read-only file system reads what a node wrote, and
// every change is ErrReadOnly and writes nothing to the device.
func TestReadOnly(t *testing.T) {
	ctx := context.Background()
	dev := formatted(t)
	w := openSolo(t, dev, "w")
	d, err := w.Mkdir(ctx, RootIno, "d", 0o755, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := w.Create(ctx, d.Ino, "f", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("plumeria"), 20000)
	if _, err := w.Write(ctx, f.Ino, 0, data, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := w.Setxattr(ctx, f.Ino, "user.k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	s, err := w.Symlink(ctx, RootIno, "s", "d/f", Caller{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	writes := dev.Writes()

	ro, err := Open(ctx, Config{Dev: dev, ReadOnly: true, Table: "v", ID: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data)+10)
	if n, err := ro.Read(ctx, f.Ino, 0, got, 0); err != nil || !bytes.Equal(got[:n], data) {
		t.Fatalf("read %d bytes (%v), want the %d written", n, err, len(data))
	}
	if a, err := ro.Lookup(ctx, RootIno, "d"); err != nil || a.Ino != d.Ino {
		t.Fatalf("lookup d: %v %v", a, err)
	}
	if ents, _, err := ro.ReadDir(ctx, d.Ino, 0, 10); err != nil || len(ents) != 1 || ents[0].Name != "f" {
		t.Fatalf("readdir: %v %v", ents, err)
	}
	if v, err := ro.Getxattr(ctx, f.Ino, "user.k"); err != nil || string(v) != "v" {
		t.Fatalf("getxattr: %q %v", v, err)
	}
	if tgt, err := ro.Readlink(ctx, s.Ino); err != nil || tgt != "d/f" {
		t.Fatalf("readlink: %q %v", tgt, err)
	}
	if err := ro.Open(ctx, f.Ino, 0); err != nil {
		t.Fatal(err)
	}
	ro.Release(ctx, f.Ino)
	if err := ro.Fsync(ctx, f.Ino, false); err != nil {
		t.Fatal(err)
	}
	mode := uint32(0o600)
	now := time.Now()
	changes := map[string]func() error{
		"create":      func() error { _, err := ro.Create(ctx, d.Ino, "g", 0o644, Caller{}, false); return err },
		"mkdir":       func() error { _, err := ro.Mkdir(ctx, RootIno, "e", 0o755, Caller{}); return err },
		"mknod":       func() error { _, err := ro.Mknod(ctx, RootIno, "n", 0o10644, 0, Caller{}); return err },
		"symlink":     func() error { _, err := ro.Symlink(ctx, RootIno, "t", "x", Caller{}); return err },
		"link":        func() error { _, err := ro.Link(ctx, f.Ino, RootIno, "l"); return err },
		"unlink":      func() error { return ro.Unlink(ctx, d.Ino, "f") },
		"rmdir":       func() error { return ro.Rmdir(ctx, RootIno, "d") },
		"rename":      func() error { return ro.Rename(ctx, d.Ino, "f", RootIno, "f2", 0) },
		"chmod":       func() error { _, err := ro.Setattr(ctx, f.Ino, SetAttr{Mode: &mode}); return err },
		"utimes":      func() error { _, err := ro.Setattr(ctx, f.Ino, SetAttr{Mtime: &now}); return err },
		"write":       func() error { _, err := ro.Write(ctx, f.Ino, 0, []byte("x"), 0, false); return err },
		"fallocate":   func() error { return ro.Fallocate(ctx, f.Ino, 0, 1<<20, 0) },
		"setxattr":    func() error { return ro.Setxattr(ctx, f.Ino, "user.k", []byte("w"), 0) },
		"removexattr": func() error { return ro.Removexattr(ctx, f.Ino, "user.k") },
	}
	for name, change := range changes {
		if err := change(); !errors.Is(err, ErrReadOnly) {
			t.Errorf("%s: %v, want ErrReadOnly", name, err)
		}
	}
	if err := ro.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := dev.Writes(); n != writes {
		t.Fatalf("the read-only file system wrote %d times", n-writes)
	}
}

// TestBarrierSettles: once a node gives the barrier up, the volume holds
// everything it changed in place: a read-only file system on a copy of
// the volume taken then (no log replayed) reads it all.
func TestBarrierSettles(t *testing.T) {
	ctx := context.Background()
	dev := formatted(t)
	w, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "w", Session: 1, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	want := map[string][]byte{}
	d, err := w.Mkdir(ctx, RootIno, "d", 0o755, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		name := fmt.Sprintf("f%d", i)
		f, err := w.Create(ctx, d.Ino, name, 0o644, Caller{}, true)
		if err != nil {
			t.Fatal(err)
		}
		data := bytes.Repeat([]byte{byte(i)}, 1000+i*5000)
		if _, err := w.Write(ctx, f.Ino, 0, data, 0, false); err != nil {
			t.Fatal(err)
		}
		want[name] = data
	}
	if err := w.Revoke(ctx, "v", barrierLock, lock.None); err != nil {
		t.Fatal(err)
	}
	snap := dev.Clone()
	// Changes after the barrier are not in the copy.
	if _, err := w.Create(ctx, d.Ino, "late", 0o644, Caller{}, true); err != nil {
		t.Fatal(err)
	}
	ro, err := Open(ctx, Config{Dev: snap, ReadOnly: true, Table: "v", ID: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close(ctx)
	for name, data := range want {
		a, err := ro.Lookup(ctx, d.Ino, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := make([]byte, len(data)+1)
		if n, err := ro.Read(ctx, a.Ino, 0, got, 0); err != nil || !bytes.Equal(got[:n], data) {
			t.Fatalf("%s: read %d bytes (%v), want its %d", name, n, err, len(data))
		}
	}
	if _, err := ro.Lookup(ctx, d.Ino, "late"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a file made after the barrier is in the copy: %v", err)
	}
}
