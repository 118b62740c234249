package history

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/filesys/fstest"
)

// TestTimeView: on a volume that keeps file versions, .plumeria/at/T is
// the file system at T: files as their version closed by then, names
// removed or renamed since, a deleted directory with its files.
func TestTimeView(t *testing.T) {
	ctx := context.Background()
	dev := fstest.NewMemVersionDevice()
	if _, err := filesys.Format(ctx, dev, false, time.Now().Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	clock := time.Now().Add(-time.Hour)
	live, err := filesys.Open(ctx, filesys.Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "a", Session: 1,
		Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	h := New(live, memSnaps{})
	defer live.Close(ctx)
	defer h.CloseSnapshots(ctx)
	c := filesys.Caller{}
	write := func(ino uint64, s string) {
		t.Helper()
		if _, err := h.Setattr(ctx, ino, filesys.SetAttr{Size: new(uint64)}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Write(ctx, ino, 0, []byte(s), 0, false); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx, ino); err != nil { // close: a version
			t.Fatal(err)
		}
	}
	tick := func() time.Time { clock = clock.Add(time.Minute); return clock }
	f, err := h.Create(ctx, filesys.RootIno, "f", 0o644, c, true)
	if err != nil {
		t.Fatal(err)
	}
	write(f.Ino, "v1")
	d, err := h.Mkdir(ctx, filesys.RootIno, "d", 0o755, c)
	if err != nil {
		t.Fatal(err)
	}
	g, err := h.Create(ctx, d.Ino, "g", 0o600, c, true)
	if err != nil {
		t.Fatal(err)
	}
	write(g.Ino, "in d")
	tick()
	t1 := tick()
	tick()
	write(f.Ino, "version two")
	if err := h.Rename(ctx, filesys.RootIno, "f", filesys.RootIno, "f2", 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Unlink(ctx, d.Ino, "g"); err != nil {
		t.Fatal(err)
	}
	if err := h.Rmdir(ctx, filesys.RootIno, "d"); err != nil {
		t.Fatal(err)
	}
	tick()

	dot, err := h.Lookup(ctx, filesys.RootIno, Name)
	if err != nil {
		t.Fatal(err)
	}
	at, err := h.Lookup(ctx, dot.Ino, "at")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Lookup(ctx, at.Ino, "yesterday"); !errors.Is(err, filesys.ErrInvalid) {
		t.Fatalf("a malformed time: %v", err)
	}
	root, err := h.Lookup(ctx, at.Ino, t1.UTC().Format(time.RFC3339Nano))
	if err != nil {
		t.Fatal(err)
	}
	if root.Mode&syscall.S_IFMT != syscall.S_IFDIR || root.Ino < liveMax {
		t.Fatalf("at/T: mode %o ino %#x", root.Mode, root.Ino)
	}
	ents, done, err := h.ReadDir(ctx, root.Ino, 0, 100)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	if err != nil || !done || strings.Join(names, " ") != "d f" {
		t.Fatalf("root at t1 lists %v (%v)", names, err)
	}
	read := func(dir uint64, name string) string {
		t.Helper()
		a, err := h.Lookup(ctx, dir, name)
		if err != nil {
			t.Fatalf("lookup %s: %v", name, err)
		}
		b := make([]byte, 100)
		n, err := h.Read(ctx, a.Ino, a.Gen, b, 0)
		if err != nil || uint64(n) != a.Size {
			t.Fatalf("read %s: %d of %d bytes, %v", name, n, a.Size, err)
		}
		return string(b[:n])
	}
	if got := read(root.Ino, "f"); got != "v1" {
		t.Fatalf("f at t1: %q", got)
	}
	if _, err := h.Lookup(ctx, root.Ino, "f2"); !errors.Is(err, filesys.ErrNotFound) {
		t.Fatalf("f2 at t1 (renamed to later): %v", err)
	}
	da, err := h.Lookup(ctx, root.Ino, "d")
	if err != nil {
		t.Fatal(err)
	}
	if got := read(da.Ino, "g"); got != "in d" {
		t.Fatalf("d/g at t1 (both deleted since): %q", got)
	}
	if _, err := h.Write(ctx, da.Ino, 0, []byte("x"), 0, false); !errors.Is(err, filesys.ErrReadOnly) {
		t.Fatalf("write under at/T: %v", err)
	}
	if _, err := h.Create(ctx, da.Ino, "new", 0o644, c, true); !errors.Is(err, filesys.ErrReadOnly) {
		t.Fatalf("create under at/T: %v", err)
	}
	// Now: f2 reads the second version; before the volume existed: empty.
	now, err := h.Lookup(ctx, at.Ino, fmt.Sprint(clock.Unix()+1))
	if err != nil {
		t.Fatal(err)
	}
	if got := read(now.Ino, "f2"); got != "version two" {
		t.Fatalf("f2 now: %q", got)
	}
	// The versions as `plumeria versions` reads them: of the live file,
	// and of one deleted since, through the view.
	b, err := h.Getxattr(ctx, f.Ino, VersionsXattr)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := ParseVersions(b)
	if err != nil || len(vs) != 2 || vs[0].Version != 1 || vs[1].Size != uint64(len("version two")) || vs[1].Node != "a" {
		t.Fatalf("versions of f2: %+v %v (%q)", vs, err, b)
	}
	ga, err := h.Lookup(ctx, da.Ino, "g")
	if err != nil {
		t.Fatal(err)
	}
	if b, err = h.Getxattr(ctx, ga.Ino, VersionsXattr); err != nil {
		t.Fatal(err)
	}
	if vs, err := ParseVersions(b); err != nil || len(vs) != 1 || vs[0].Mode&0o777 != 0o600 {
		t.Fatalf("versions of the deleted d/g: %+v %v", vs, err)
	}
	if err := h.Setxattr(ctx, f.Ino, VersionsXattr, []byte("1"), 0); !errors.Is(err, filesys.ErrNotPermitted) {
		t.Fatalf("set %s: %v", VersionsXattr, err)
	}
	if _, err := h.Getxattr(ctx, filesys.RootIno, VersionsXattr); !errors.Is(err, filesys.ErrNoAttr) {
		t.Fatalf("versions of a directory: %v", err)
	}
	if _, err := h.Lookup(ctx, at.Ino, "1000000000"); !errors.Is(err, filesys.ErrInvalid) {
		t.Fatalf("a time before the file system: %v", err)
	}
}

func TestEncodeVersions(t *testing.T) {
	var vs []filesys.Version
	for i := 1; i <= 3000; i++ {
		vs = append(vs, filesys.Version{FVer: uint32(i), Closed: time.Unix(1800000000, int64(i)), Node: "node \"x\"",
			Attr: filesys.Attr{Size: uint64(i), Mode: syscall.S_IFREG | 0o640, Uid: 7, Gid: 8, Mtime: time.Unix(1700000000, 5)}})
	}
	b := encodeVersions(vs)
	if len(b) > xattrMax {
		t.Fatalf("%d bytes", len(b))
	}
	got, err := ParseVersions(b)
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].OlderShown || int(got[0].Version)+len(got)-1 != len(vs) {
		t.Fatalf("first line %+v, %d lines", got[0], len(got))
	}
	last := got[len(got)-1]
	if last.Version != 3000 || last.Size != 3000 || last.Node != `node "x"` || last.Mode != syscall.S_IFREG|0o640 || !last.Closed.Equal(time.Unix(1800000000, 3000)) {
		t.Fatalf("last %+v", last)
	}
}

func FuzzParseVersions(f *testing.F) {
	f.Add([]byte("# older 3\n4 5 6 100644 0 0 7 \"n\"\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ParseVersions(b) // no panic, no hang
	})
}
