package filesys

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys/fstest"
)

func versionFS(t *testing.T, dev *memDevice, id string) *FS {
	t.Helper()
	fs, err := Open(context.Background(), Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: id, Session: 1, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func versionedDevice(t *testing.T) *memDevice {
	dev := fstest.NewMemVersionDevice()
	if _, err := Format(context.Background(), dev, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	return dev
}

// readVersions reads every version of ino whole.
func readVersions(t *testing.T, fs *FS, ino uint64) [][]byte {
	t.Helper()
	ctx := context.Background()
	vs, err := fs.Versions(ctx, ino)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for i, v := range vs {
		if v.FVer != uint32(i+1) {
			t.Fatalf("version %d numbered %d", i+1, v.FVer)
		}
		b := make([]byte, v.Attr.Size+10)
		n, err := fs.ReadVersion(ctx, ino, v, b, 0)
		if err != nil || uint64(n) != v.Attr.Size {
			t.Fatalf("read version %d: %d bytes of %d, %v", v.FVer, n, v.Attr.Size, err)
		}
		out = append(out, b[:n])
	}
	return out
}

// TestFileVersions: each close of a changed file makes a version that
// reads as the file was at that close, inline or in the extent, after
// overwrites, appends, truncates and a move out of the inode; closes of an
// unchanged file make none.
func TestFileVersions(t *testing.T) {
	ctx := context.Background()
	dev := versionedDevice(t)
	fs := versionFS(t, dev, "a")
	defer fs.Close(ctx)
	f, err := fs.Create(ctx, RootIno, "f", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB: in the extent
	var want [][]byte
	step := func(change func()) {
		t.Helper()
		change()
		if err := fs.Flush(ctx, f.Ino); err != nil {
			t.Fatal(err)
		}
		if err := fs.Flush(ctx, f.Ino); err != nil { // a second close: no change, no version
			t.Fatal(err)
		}
		b := make([]byte, len(big)*2)
		n, err := fs.Read(ctx, f.Ino, 0, b, 0)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, b[:n])
	}
	write := func(p []byte, off uint64) {
		if _, err := fs.Write(ctx, f.Ino, 0, p, off, false); err != nil {
			t.Fatal(err)
		}
	}
	size := func(n uint64) {
		if _, err := fs.Setattr(ctx, f.Ino, SetAttr{Size: &n}); err != nil {
			t.Fatal(err)
		}
	}
	step(func() { write([]byte("v1"), 0) })                   // inline
	step(func() { write([]byte("version 2"), 0) })            // inline, overwritten
	step(func() { write(big, 0) })                            // moves to the extent
	step(func() { write([]byte("XYZ"), 4094) })               // an overwrite across two blocks
	step(func() { size(10000) })                              // truncated
	step(func() { write(big[:8192], 20000) })                 // grows over the truncated tail
	step(func() { size(0); write([]byte("short again"), 0) }) // emptied and rewritten

	got := readVersions(t, fs, f.Ino)
	if len(got) != len(want) {
		t.Fatalf("%d versions, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("version %d: %d bytes %.20q..., want %d bytes %.20q...", i+1, len(got[i]), got[i], len(want[i]), want[i])
		}
	}
	// The newest version at a time before the first close: none.
	if _, ok, err := fs.VersionAt(ctx, f.Ino, 0, time.Unix(0, 0)); ok || err != nil {
		t.Fatalf("version at 1970: %v %v", ok, err)
	}
	if v, ok, err := fs.VersionAt(ctx, f.Ino, 0, time.Now().Add(time.Hour)); !ok || err != nil || v.FVer != uint32(len(want)) {
		t.Fatalf("version now: %+v %v %v", v, ok, err)
	}
}

// TestVersionCrash: a version whose close never reached the durable log
// is not listed after recovery, and the versions before it stay; the
// next close makes that number again, over what the lost one wrote.
func TestVersionCrash(t *testing.T) {
	ctx := context.Background()
	dev := versionedDevice(t)
	a := versionFS(t, dev, "a")
	f, err := a.Create(ctx, RootIno, "f", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	v1 := bytes.Repeat([]byte("a"), 10000)
	if _, err := a.Write(ctx, f.Ino, 0, v1, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx, f.Ino); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write(ctx, f.Ino, 0, []byte("bbbb"), 0, false); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx, f.Ino); err != nil { // version 2: its record and data written, its log record not
		t.Fatal(err)
	}
	a.data.drain()
	b := crashAndRecover(t, a, dev)
	defer b.Close(ctx)
	got := readVersions(t, b, f.Ino)
	if len(got) != 1 || !bytes.Equal(got[0], v1) {
		t.Fatalf("after the crash: %d versions, want only version 1", len(got))
	}
	if _, err := b.Write(ctx, f.Ino, 0, []byte("cc"), 0, false); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx, f.Ino); err != nil {
		t.Fatal(err)
	}
	got = readVersions(t, b, f.Ino)
	if len(got) != 2 || !bytes.Equal(got[0], v1) || !bytes.Equal(got[1][:2], []byte("cc")) {
		t.Fatalf("after the crash and a close: %d versions", len(got))
	}
}

// TestVersionsOfReusedInode: a deleted file's number reused by a new file
// lists only the new file's versions, and the old file's versions still
// read as they were (file versions of an extent never decrease).
func TestVersionsOfReusedInode(t *testing.T) {
	ctx := context.Background()
	dev := versionedDevice(t)
	fs := versionFS(t, dev, "a")
	defer fs.Close(ctx)
	f, err := fs.Create(ctx, RootIno, "f", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	old := bytes.Repeat([]byte("o"), 9000)
	if _, err := fs.Write(ctx, f.Ino, 0, old, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := fs.Flush(ctx, f.Ino); err != nil {
		t.Fatal(err)
	}
	oldVersions, err := fs.Versions(ctx, f.Ino)
	if err != nil || len(oldVersions) != 1 {
		t.Fatalf("versions: %v %v", oldVersions, err)
	}
	if err := fs.Unlink(ctx, RootIno, "f"); err != nil {
		t.Fatal(err)
	}
	if vs, err := fs.VersionsOf(ctx, f.Ino, f.Gen); err != nil || len(vs) != 1 {
		t.Fatalf("deleted file's versions: %+v %v", vs, err)
	}
	// Create until the number comes back (the allocator takes the next
	// free number of its group first).
	var g Attr
	for i := 0; i < 100; i++ {
		if g, err = fs.Create(ctx, RootIno, "g"+string(rune('a'+i%26))+string(rune('a'+i/26)), 0o644, Caller{}, true); err != nil {
			t.Fatal(err)
		}
		if g.Ino == f.Ino {
			break
		}
	}
	if g.Ino != f.Ino {
		t.Skip("the inode number was not reused")
	}
	if _, err := fs.Write(ctx, g.Ino, 0, bytes.Repeat([]byte("n"), 5000), 0, false); err != nil {
		t.Fatal(err)
	}
	if err := fs.Flush(ctx, g.Ino); err != nil {
		t.Fatal(err)
	}
	vs, err := fs.Versions(ctx, g.Ino)
	if err != nil || len(vs) != 1 || vs[0].FVer != 2 {
		t.Fatalf("new file's versions: %+v %v", vs, err)
	}
	b := make([]byte, len(old))
	if n, err := fs.ReadVersion(ctx, f.Ino, oldVersions[0], b, 0); err != nil || n != len(old) || !bytes.Equal(b, old) {
		t.Fatalf("old file's version after reuse: %d %v", n, err)
	}
	// Its record was written when the number was reused (its free inode
	// held it): listed again from there, same bytes.
	again, err := fs.VersionsOf(ctx, f.Ino, f.Gen)
	if err != nil || len(again) != 1 || again[0].FVer != oldVersions[0].FVer || !again[0].Closed.Equal(oldVersions[0].Closed) {
		t.Fatalf("old file's versions after reuse: %+v %v", again, err)
	}
	if n, err := fs.ReadVersion(ctx, f.Ino, again[0], b, 0); err != nil || n != len(old) || !bytes.Equal(b, old) {
		t.Fatalf("old file's version read from its record: %d %v", n, err)
	}
}

func TestNoVersionsWithoutDevice(t *testing.T) {
	ctx := context.Background()
	fs := openSolo(t, formatted(t), "a")
	defer fs.Close(ctx)
	f, err := fs.Create(ctx, RootIno, "f", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Write(ctx, f.Ino, 0, []byte("x"), 0, false); err != nil {
		t.Fatal(err)
	}
	if err := fs.Flush(ctx, f.Ino); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Versions(ctx, f.Ino); !errors.Is(err, ErrNoVersions) {
		t.Fatalf("versions on a volume without them: %v", err)
	}
}

// TestNamesAt: a directory's names at a time come back from its name log:
// names added since are gone, names removed or renamed away since are
// back with their inode, and a removed directory's names are those it had.
func TestNamesAt(t *testing.T) {
	ctx := context.Background()
	dev := versionedDevice(t)
	clock := time.Unix(1_800_000_000, 0)
	fs, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "a", Session: 1,
		Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close(ctx)
	tick := func() time.Time { clock = clock.Add(10 * time.Minute); return clock }
	c := Caller{}
	a, err := fs.Create(ctx, RootIno, "a", 0o644, c, true)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fs.Create(ctx, RootIno, "b", 0o644, c, true)
	if err != nil {
		t.Fatal(err)
	}
	d, err := fs.Mkdir(ctx, RootIno, "d", 0o755, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Create(ctx, d.Ino, "x", 0o644, c, true); err != nil {
		t.Fatal(err)
	}
	t1 := clock // a, b, d/x
	tick()
	if err := fs.Unlink(ctx, RootIno, "a"); err != nil {
		t.Fatal(err)
	}
	tick()
	if err := fs.Rename(ctx, RootIno, "b", RootIno, "c", 0); err != nil {
		t.Fatal(err)
	}
	tick()
	if err := fs.Unlink(ctx, d.Ino, "x"); err != nil {
		t.Fatal(err)
	}
	if err := fs.Rmdir(ctx, RootIno, "d"); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Create(ctx, RootIno, "e", 0o644, c, true); err != nil {
		t.Fatal(err)
	}
	t4 := tick()
	root, err := fs.Getattr(ctx, RootIno)
	if err != nil {
		t.Fatal(err)
	}
	names := func(dino, dgen uint64, at time.Time) string {
		t.Helper()
		ns, _, err := fs.NamesAt(ctx, dino, dgen, at)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, n := range ns {
			s = append(s, fmt.Sprintf("%s:%d", n.Name, n.Ino))
		}
		return strings.Join(s, " ")
	}
	if got, want := names(RootIno, root.Gen, t1), fmt.Sprintf("a:%d b:%d d:%d", a.Ino, b.Ino, d.Ino); got != want {
		t.Fatalf("root at t1: %q, want %q", got, want)
	}
	if got, want := names(RootIno, root.Gen, t1.Add(15*time.Minute)), fmt.Sprintf("b:%d d:%d", b.Ino, d.Ino); got != want {
		t.Fatalf("root between the unlink and the rename: %q, want %q", got, want)
	}
	if got := names(RootIno, root.Gen, t4); !strings.HasPrefix(got, fmt.Sprintf("c:%d e:", b.Ino)) {
		t.Fatalf("root now: %q", got)
	}
	if got := names(d.Ino, d.Gen, t1); !strings.HasPrefix(got, "x:") {
		t.Fatalf("removed directory at t1: %q", got)
	}
	if got := names(d.Ino, d.Gen, t4); got != "" {
		t.Fatalf("removed directory now: %q", got)
	}
	if _, _, err := fs.NamesAt(ctx, RootIno, root.Gen, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
}

// TestCleaner: a pass drops the versions the policies no longer keep, of
// live files and of deleted ones, and keeps what they keep; a directory's
// policy holds for what is below it; a bad policy is refused.
func TestCleaner(t *testing.T) {
	ctx := context.Background()
	dev := versionedDevice(t)
	clock := time.Now().Add(-48 * time.Hour)
	fs, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "a", Session: 1,
		Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close(ctx)
	c := Caller{}
	scratch, err := fs.Mkdir(ctx, RootIno, "scratch", 0o755, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Setxattr(ctx, scratch.Ino, RetentionXattr, []byte("none"), 0); err != nil {
		t.Fatal(err)
	}
	if err := fs.Setxattr(ctx, scratch.Ino, RetentionXattr, []byte("keep=everything"), 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a policy that makes no sense: %v", err)
	}
	keepAll, err := fs.Mkdir(ctx, RootIno, "keep", 0o755, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Setxattr(ctx, keepAll.Ino, RetentionXattr, []byte("forever"), 0); err != nil {
		t.Fatal(err)
	}
	sub, err := fs.Mkdir(ctx, keepAll.Ino, "sub", 0o755, c) // inherits forever
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]Attr{}
	for _, p := range []struct {
		dir  uint64
		name string
	}{{RootIno, "r"}, {scratch.Ino, "s"}, {sub.Ino, "k"}, {RootIno, "gone"}} {
		a, err := fs.Create(ctx, p.dir, p.name, 0o644, c, true)
		if err != nil {
			t.Fatal(err)
		}
		files[p.name] = a
	}
	// Ten versions of each, one every 3 hours (48 h ago up to 21 h ago).
	for i := 0; i < 10; i++ {
		for _, a := range files {
			if _, err := fs.Write(ctx, a.Ino, 0, bytes.Repeat([]byte{byte('a' + i)}, 5000), 0, false); err != nil {
				t.Fatal(err)
			}
			if err := fs.Flush(ctx, a.Ino); err != nil {
				t.Fatal(err)
			}
		}
		clock = clock.Add(3 * time.Hour)
	}
	if err := fs.Unlink(ctx, RootIno, "gone"); err != nil {
		t.Fatal(err)
	}
	clock = time.Now()
	st, err := fs.CleanVersions(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	count := func(ino, gen uint64) int {
		vs, err := fs.VersionsOf(ctx, ino, gen)
		if err != nil {
			t.Fatal(err)
		}
		return len(vs)
	}
	// Default policy (root): daily ones for 30 days: the newest of each of
	// the 2-3 UTC days the versions span; scratch: none; keep: all 10.
	if n := count(files["r"].Ino, 0); n < 2 || n > 3 {
		t.Fatalf("r keeps %d versions", n)
	}
	if n := count(files["s"].Ino, 0); n != 1 { // the newest: what the file reads now
		t.Fatalf("scratch/s keeps %d versions", n)
	}
	if n := count(files["k"].Ino, 0); n != 10 {
		t.Fatalf("keep/sub/k keeps %d versions", n)
	}
	if n := count(files["gone"].Ino, files["gone"].Gen); n < 2 || n > 3 {
		t.Fatalf("the deleted file keeps %d versions", n)
	}
	if st.Dropped < 7+9+7 || st.Files != 4 {
		t.Fatalf("stats %+v", st)
	}
	// What is kept still reads; the live files are whole.
	b := make([]byte, 5000)
	for name, a := range files {
		if name == "gone" {
			continue
		}
		if n, err := fs.Read(ctx, a.Ino, 0, b, 0); err != nil || n != 5000 || b[0] != 'j' {
			t.Fatalf("%s now: %d %v %q", name, n, err, b[0])
		}
	}
	vs, _ := fs.Versions(ctx, files["k"].Ino)
	if n, err := fs.ReadVersion(ctx, files["k"].Ino, vs[0], b, 0); err != nil || n != 5000 || b[4999] != 'a' {
		t.Fatalf("k's first version: %d %v", n, err)
	}
	// A second pass drops nothing more.
	if st, err := fs.CleanVersions(ctx, nil); err != nil || st.Dropped != 0 {
		t.Fatalf("second pass: %+v %v", st, err)
	}
}

// TestVersionKeepsMode: a chmod after a close does not change the mode of
// the version that close made.
func TestVersionKeepsMode(t *testing.T) {
	ctx := context.Background()
	fs := versionFS(t, versionedDevice(t), "a")
	defer fs.Close(ctx)
	f, err := fs.Create(ctx, RootIno, "f", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Write(ctx, f.Ino, 0, []byte("x"), 0, false); err != nil {
		t.Fatal(err)
	}
	if err := fs.Flush(ctx, f.Ino); err != nil {
		t.Fatal(err)
	}
	mode := uint32(0o600)
	if _, err := fs.Setattr(ctx, f.Ino, SetAttr{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	vs, err := fs.Versions(ctx, f.Ino)
	if err != nil || len(vs) != 1 || vs[0].Attr.Mode&0o777 != 0o644 {
		t.Fatalf("versions after a chmod: %+v %v", vs, err)
	}
}
