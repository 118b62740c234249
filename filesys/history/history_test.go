package history

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/filesys/fstest"
)

type memSnap struct {
	dev *fstest.MemDevice
	at  time.Time
}

type memSnaps map[string]memSnap

func (m memSnaps) List(context.Context) ([]Snapshot, error) {
	var snaps []Snapshot
	for n, s := range m {
		snaps = append(snaps, Snapshot{Name: n, At: s.at})
	}
	return snaps, nil
}

func (m memSnaps) Open(ctx context.Context, name string) (*filesys.FS, func(context.Context), error) {
	snap, ok := m[name]
	if !ok {
		return nil, nil, filesys.ErrNotFound
	}
	fs, err := filesys.Open(ctx, filesys.Config{Dev: snap.dev, ReadOnly: true, Table: "v@" + name, ID: "snapshot"})
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
	t1 := time.Now()
	snaps["s1"] = memSnap{dev.Clone(), t1}
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

	// .plumeria/at/T: a symlink to the newest snapshot taken at or before T.
	atDir, err := h.Lookup(ctx, dot.Ino, "at")
	if err != nil {
		t.Fatal(err)
	}
	if ents, _, err := h.ReadDir(ctx, dot.Ino, 0, 10); err != nil || len(ents) != 2 || ents[0].Name != "at" || ents[1].Name != "snapshots" {
		t.Fatalf(".plumeria lists %v (%v)", ents, err)
	}
	ents, _, err = h.ReadDir(ctx, atDir.Ino, 0, 10)
	if err != nil || len(ents) != 1 || ents[0].Name != TimeName(t1) || ents[0].Mode != syscall.S_IFLNK {
		t.Fatalf("at lists %v (%v), want %s", ents, err, TimeName(t1))
	}
	for _, name := range []string{TimeName(t1), t1.Add(time.Hour).Format(time.RFC3339Nano), fmt.Sprint(t1.Unix() + 1), fmt.Sprintf("%d.999", t1.Unix())} {
		l, err := h.Lookup(ctx, atDir.Ino, name)
		if err != nil || l.Mode&syscall.S_IFMT != syscall.S_IFLNK {
			t.Fatalf("at/%s: %+v %v", name, l, err)
		}
		if target, err := h.Readlink(ctx, l.Ino); err != nil || target != "../snapshots/s1" {
			t.Fatalf("at/%s points to %q (%v)", name, target, err)
		}
		if _, _, err := h.ReadDir(ctx, l.Ino, 0, 10); !errors.Is(err, filesys.ErrNotDir) {
			t.Fatalf("readdir of the symlink at/%s: %v", name, err)
		}
	}
	if _, err := h.Lookup(ctx, atDir.Ino, t1.Add(-time.Hour).Format(time.RFC3339)); !errors.Is(err, filesys.ErrNotFound) {
		t.Fatalf("a time before every snapshot: %v", err)
	}
	for _, bad := range []string{"yesterday", "2026-13-01T00:00:00Z", "-5", "1e9", "NaN", ""} {
		if _, err := h.Lookup(ctx, atDir.Ino, bad); !errors.Is(err, filesys.ErrInvalid) {
			t.Fatalf("at/%q: %v, want ErrInvalid", bad, err)
		}
	}
	if !h.UncachedNames(atDir.Ino) {
		t.Fatal("the names of at are cached")
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

func TestTimeName(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{t0, "2026-11-26T12:00:00Z"},
		{t0.Add(time.Nanosecond), "2026-11-26T12:00:01Z"},
		{t0.Add(999 * time.Millisecond), "2026-11-26T12:00:01Z"},
	} {
		if got := TimeName(c.at); got != c.want {
			t.Errorf("TimeName(%v) = %s, want %s", c.at, got, c.want)
		}
		back, err := ParseTime(TimeName(c.at))
		if err != nil || back.Before(c.at) {
			t.Errorf("%s parses as %v (%v), before %v", TimeName(c.at), back, err, c.at)
		}
	}
	if got, err := ParseTime("2026-11-26T13:00:00+01:00"); err != nil || !got.Equal(t0) {
		t.Errorf("an offset: %v %v", got, err)
	}
	if got, err := ParseTime(fmt.Sprint(t0.Unix())); err != nil || !got.Equal(t0) {
		t.Errorf("epoch seconds: %v %v", got, err)
	}
	if got, err := ParseTime("@GMT-2026.11.26-12.00.00"); err != nil || !got.Equal(t0) {
		t.Errorf("an @GMT token: %v %v", got, err)
	}
	if _, err := ParseTime("@GMT-2026.13.26-12.00.00"); err == nil {
		t.Errorf("an @GMT token of month 13 accepted")
	}
}

// FuzzParseTime: any name under .plumeria/at is a time or ErrInvalid,
// never a panic; a time it accepts names itself again (TimeName) at or
// after it.
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"2026-11-26T12:00:00Z", "1764158400", "1764158400.5", "2026-11-26T13:00:00.123+01:00", "", "-1", "1e9", "0x10", "9999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tm, err := ParseTime(s)
		if err != nil {
			if !errors.Is(err, filesys.ErrInvalid) {
				t.Fatalf("%q: %v is not ErrInvalid", s, err)
			}
			return
		}
		if tm.Year() < 0 || tm.Year() > 9999 {
			return // RFC 3339 cannot write it back
		}
		back, err := ParseTime(TimeName(tm))
		if err != nil || back.Before(tm) {
			t.Fatalf("%q: %v names itself %s, which parses as %v (%v)", s, tm, TimeName(tm), back, err)
		}
	})
}
