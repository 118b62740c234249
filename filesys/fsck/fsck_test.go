package fsck

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/filesys/acl"
	"github.com/plumeria-fs/plumeria/filesys/fstest"
	"github.com/plumeria-fs/plumeria/filesys/layout"
)

type memDevice = fstest.MemDevice

func newMemDevice() *memDevice { return fstest.NewMemDevice() }

func openFS(t *testing.T, dev *memDevice, id string, flush time.Duration) *filesys.FS {
	t.Helper()
	fs, err := filesys.Open(context.Background(), filesys.Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: id, Session: 1, FlushInterval: flush})
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// tree is a file system built for a test: the contents expected at each
// path ("->target" for a symlink, "/" for a directory) and the inode of
// each path.
type tree struct {
	dev  *memDevice
	want map[string]string
	ino  map[string]uint64
}

// must returns v, or panics (failing the test) on an error.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// build makes a tree through filesys with every kind of operation: mkdir,
// create, write (inline and extent), hard links, symlinks, renames of
// files and directories, unlink, rmdir, and a directory large enough to
// be hashed.
func build(t *testing.T) *tree {
	t.Helper()
	ctx := context.Background()
	dev := newMemDevice()
	if _, err := filesys.Format(ctx, dev, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	fs := openFS(t, dev, "builder", 0)
	c := filesys.Caller{Uid: 1, Gid: 1}
	tr := &tree{dev: dev, want: map[string]string{}, ino: map[string]uint64{}}
	mkdir := func(parent uint64, name, path string) uint64 {
		a := must(fs.Mkdir(ctx, parent, name, 0o755, c))
		tr.want[path], tr.ino[path] = "/", a.Ino
		return a.Ino
	}
	create := func(parent uint64, name, path, data string) uint64 {
		a := must(fs.Create(ctx, parent, name, 0o644, c, true))
		must(fs.Write(ctx, a.Ino, 0, []byte(data), 0, false))
		tr.want[path], tr.ino[path] = data, a.Ino
		return a.Ino
	}
	big := strings.Repeat("0123456789abcdef", 1000)
	a := mkdir(filesys.RootIno, "a", "a")
	b := mkdir(a, "b", "a/b")
	dbig := mkdir(filesys.RootIno, "big", "big")
	mkdir(b, "c", "a/b/c")
	create(a, "small", "a/small", "hello")
	f2 := create(b, "f2", "a/b/f2", big)
	must(fs.Link(ctx, f2, a, "hl"))
	tr.want["a/hl"], tr.ino["a/hl"] = big, f2
	must(fs.Symlink(ctx, a, "sl", "b/f2", c))
	tr.want["a/sl"] = "->b/f2"
	for i := range 300 {
		create(dbig, fmt.Sprintf("file-%04d", i), fmt.Sprintf("big/file-%04d", i), fmt.Sprintf("content %d", i))
	}
	for i := 0; i < 300; i += 7 {
		if err := fs.Unlink(ctx, dbig, fmt.Sprintf("file-%04d", i)); err != nil {
			t.Fatal(err)
		}
		delete(tr.want, fmt.Sprintf("big/file-%04d", i))
	}
	// Renames: a file to another directory, a directory to another parent.
	if err := fs.Rename(ctx, a, "small", filesys.RootIno, "top", 0); err != nil {
		t.Fatal(err)
	}
	tr.want["top"], tr.ino["top"] = tr.want["a/small"], tr.ino["a/small"]
	delete(tr.want, "a/small")
	if err := fs.Rename(ctx, b, "c", dbig, "c2", 0); err != nil {
		t.Fatal(err)
	}
	tr.want["big/c2"], tr.ino["big/c2"] = "/", tr.ino["a/b/c"]
	delete(tr.want, "a/b/c")
	create(tr.ino["big/c2"], "deep", "big/c2/deep", "deep file")
	// A directory made and removed, a file replaced by a rename.
	mkdir(filesys.RootIno, "gone", "gone")
	if err := fs.Rmdir(ctx, filesys.RootIno, "gone"); err != nil {
		t.Fatal(err)
	}
	delete(tr.want, "gone")
	create(filesys.RootIno, "old", "old", "old")
	create(filesys.RootIno, "new", "new", "new data")
	if err := fs.Rename(ctx, filesys.RootIno, "new", filesys.RootIno, "old", 0); err != nil {
		t.Fatal(err)
	}
	tr.want["old"], tr.ino["old"] = "new data", tr.ino["new"]
	delete(tr.want, "new")
	if err := fs.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return tr
}

func lookupPath(ctx context.Context, fs *filesys.FS, path string) (uint64, error) {
	ino := uint64(filesys.RootIno)
	for _, name := range strings.Split(path, "/") {
		a, err := fs.Lookup(ctx, ino, name)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		ino = a.Ino
	}
	return ino, nil
}

// verify reads every path of tr.want back through filesys.
func (tr *tree) verify(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	fs := openFS(t, tr.dev, "verifier", 0)
	defer fs.Close(ctx)
	for path, want := range tr.want {
		ino, err := lookupPath(ctx, fs, path)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case want == "/":
			if _, _, err := fs.ReadDir(ctx, ino, 0, 10); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		case strings.HasPrefix(want, "->"):
			if got, err := fs.Readlink(ctx, ino); err != nil || got != want[2:] {
				t.Fatalf("%s: readlink %q %v", path, got, err)
			}
		default:
			p := make([]byte, len(want)+10)
			n, err := fs.Read(ctx, ino, 0, p, 0)
			if err != nil || string(p[:n]) != want {
				t.Fatalf("%s: read %d bytes %v", path, n, err)
			}
		}
	}
}

func check(t *testing.T, dev *memDevice, repair bool) Report {
	t.Helper()
	rep, err := Check(context.Background(), dev, Options{Repair: repair})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func expectClean(t *testing.T, rep Report) {
	t.Helper()
	if len(rep.Problems) != 0 {
		t.Fatalf("problems on a clean file system:\n%s", lines(rep))
	}
}

func lines(rep Report) string {
	var s []string
	for _, p := range rep.Problems {
		s = append(s, "  "+p.String())
	}
	return strings.Join(s, "\n")
}

func TestCleanTree(t *testing.T) {
	tr := build(t)
	var calls int
	var last [2]int64
	rep, err := Check(context.Background(), tr.dev, Options{Progress: func(done, total int64, what string) {
		calls++
		if done > total {
			t.Errorf("progress %d of %d (%s)", done, total, what)
		}
		last = [2]int64{done, total}
	}})
	if err != nil {
		t.Fatal(err)
	}
	expectClean(t, rep)
	// root, a, a/b, big, big/c2 | top, f2, old, 257 big files, deep | sl
	if rep.Directories != 5 || rep.Symlinks != 1 || rep.Files != 4+300-43 || rep.Inodes != rep.Directories+rep.Files+rep.Symlinks {
		t.Fatalf("counts: %s", rep.Summary())
	}
	if calls == 0 || last[0] != last[1] {
		t.Fatalf("progress: %d calls, last %v", calls, last)
	}
	if !rep.Clean() {
		t.Fatal("not clean")
	}
	tr.verify(t)
}

// Block editors: each change bumps the block's version, as filesys does.

func readBlock(t *testing.T, dev *memDevice, addr uint64) []byte {
	b := make([]byte, layout.BlockBytes)
	if err := dev.ReadAt(context.Background(), b, addr); err != nil {
		t.Fatal(err)
	}
	return b
}

func editInode(t *testing.T, dev *memDevice, ino uint64, fn func(in *layout.Inode)) {
	t.Helper()
	b := readBlock(t, dev, layout.InodeAddr(ino))
	in, v, err := layout.DecodeInode(b, ino)
	if err != nil {
		t.Fatal(err)
	}
	fn(in)
	if err := layout.EncodeInode(b, ino, v+1, in); err != nil {
		t.Fatal(err)
	}
	dev.WriteData(context.Background(), b, layout.InodeAddr(ino))
}

// editGroup edits the group of ino; fn gets the payload.
func editGroup(t *testing.T, dev *memDevice, ino uint64, fn func(p []byte, bit int)) {
	t.Helper()
	g := layout.RGOf(ino)
	b := readBlock(t, dev, layout.RGAddr(g))
	fn(b[layout.HeaderBytes:], int(ino%layout.InodesPerRG))
	layout.SetVersion(b, layout.Version(b)+1)
	dev.WriteData(context.Background(), b, layout.RGAddr(g))
}

func addUsed(p []byte, d int) {
	binary.LittleEndian.PutUint32(p, uint32(int(binary.LittleEndian.Uint32(p))+d))
}

func clearBit(p []byte, bit int) {
	p[8+bit/8] &^= 1 << (bit % 8)
	addUsed(p, -1)
}

func TestDamageFoundAndRepaired(t *testing.T) {
	cases := []struct {
		name   string
		inject func(t *testing.T, tr *tree) []string // returns substrings of the problems expected
	}{
		{"file nlink", func(t *testing.T, tr *tree) []string {
			editInode(t, tr.dev, tr.ino["a/b/f2"], func(in *layout.Inode) { in.Nlink = 7 })
			return []string{"nlink 7, but 2 entries name it"}
		}},
		{"directory nlink", func(t *testing.T, tr *tree) []string {
			editInode(t, tr.dev, tr.ino["a"], func(in *layout.Inode) { in.Nlink = 2 })
			return []string{"nlink 2, but it has 1 subdirectories"}
		}},
		{"group count", func(t *testing.T, tr *tree) []string {
			editGroup(t, tr.dev, tr.ino["top"], func(p []byte, _ int) { addUsed(p, 5) })
			return []string{"used count"}
		}},
		{"entry naming a free inode", func(t *testing.T, tr *tree) []string {
			ino := tr.ino["big/file-0100"]
			editInode(t, tr.dev, ino, func(in *layout.Inode) { *in = layout.Inode{Gen: in.Gen, HWM: in.HWM} })
			editGroup(t, tr.dev, ino, clearBit)
			delete(tr.want, "big/file-0100")
			return []string{`entry "file-0100" of directory`, "which is free"}
		}},
		{"entry naming a free inode still allocated", func(t *testing.T, tr *tree) []string {
			editInode(t, tr.dev, tr.ino["top"], func(in *layout.Inode) { *in = layout.Inode{Gen: in.Gen} })
			delete(tr.want, "top")
			return []string{`entry "top" of directory 1`, "which is free", fmt.Sprintf("allocated in group %d but its block is free", layout.RGOf(tr.ino["top"]))}
		}},
		{"entry naming an undecodable inode", func(t *testing.T, tr *tree) []string {
			ino := tr.ino["big/c2/deep"]
			b := readBlock(t, tr.dev, layout.InodeAddr(ino))
			b[0] ^= 0xff // bad magic
			tr.dev.WriteData(context.Background(), b, layout.InodeAddr(ino))
			delete(tr.want, "big/c2/deep")
			return []string{`entry "deep"`, "does not decode", "allocated but unreachable, and does not decode"}
		}},
		{"bit clear for a reachable inode", func(t *testing.T, tr *tree) []string {
			editGroup(t, tr.dev, tr.ino["a/b"], clearBit)
			return []string{fmt.Sprintf("but free in group %d's bitmap", layout.RGOf(tr.ino["a/b"]))}
		}},
		{"wrong parent", func(t *testing.T, tr *tree) []string {
			editInode(t, tr.dev, tr.ino["big/c2"], func(in *layout.Inode) { in.Parent = tr.ino["a/b"] })
			return []string{fmt.Sprintf("directory %d: parent field %d, but directory %d lists it", tr.ino["big/c2"], tr.ino["a/b"], tr.ino["big"])}
		}},
		{"inode header index", func(t *testing.T, tr *tree) []string {
			ino := tr.ino["a/b/f2"]
			b := readBlock(t, tr.dev, layout.InodeAddr(ino))
			h, _ := layout.DecodeHeader(b)
			h.Index = 5
			layout.PutHeader(b, h)
			tr.dev.WriteData(context.Background(), b, layout.InodeAddr(ino))
			return []string{fmt.Sprintf("inode %d: its block's header has a nonzero index", ino)}
		}},
		{"wrong entry type", func(t *testing.T, tr *tree) []string {
			// The entry says regular file; the inode now says fifo.
			editInode(t, tr.dev, tr.ino["old"], func(in *layout.Inode) {
				in.Mode = in.Mode&0o7777 | 0o010000
				in.Inline, in.Flags, in.Size = nil, 0, 0
			})
			delete(tr.want, "old")
			return []string{`entry "old" of directory 1 has type 8, but inode`}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := build(t)
			want := tc.inject(t, tr)
			before := tr.dev.Writes()
			rep := check(t, tr.dev, false)
			if tr.dev.Writes() != before {
				t.Fatal("a check without repair wrote to the volume")
			}
			if rep.Clean() {
				t.Fatal("damage not found")
			}
			text := lines(rep)
			for _, w := range want {
				if !strings.Contains(text, w) {
					t.Errorf("no problem says %q; found:\n%s", w, text)
				}
			}
			rep = check(t, tr.dev, true)
			if !rep.Clean() || rep.Repaired == 0 {
				t.Fatalf("repair left:\n%s", lines(rep))
			}
			expectClean(t, check(t, tr.dev, false))
			tr.verify(t)
		})
	}
}

// TestOrphan: a file unlinked while open on a node that then crashed
// stays allocated; fsck frees it and its extent. (A clean unmount frees
// it: TestOrphanFreedAtUnmount.)
func TestOrphan(t *testing.T) {
	ctx := context.Background()
	tr := build(t)
	fs := openFS(t, tr.dev, "o", 0)
	a := must(fs.Create(ctx, filesys.RootIno, "orphan", 0o644, filesys.Caller{}, true))
	data := bytes.Repeat([]byte("x"), 20000)
	must(fs.Write(ctx, a.Ino, 0, data, 0, false))
	if err := fs.Open(ctx, a.Ino, a.Gen); err != nil {
		t.Fatal(err)
	}
	if err := fs.Unlink(ctx, filesys.RootIno, "orphan"); err != nil {
		t.Fatal(err)
	}
	if err := fs.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	fs.Halt()
	rep := check(t, tr.dev, true) // replays the crashed node's log, then finds the orphan
	if !rep.Clean() || !slices.ContainsFunc(rep.Problems, func(p Problem) bool {
		return strings.Contains(p.What, fmt.Sprintf("inode %d", a.Ino)) && strings.Contains(p.What, "orphan")
	}) {
		t.Fatalf("repair:\n%s", lines(rep))
	}
	expectClean(t, check(t, tr.dev, false))
	got := make([]byte, len(data))
	tr.dev.ReadAt(ctx, got, layout.ExtentAddr(a.Ino))
	if !bytes.Equal(got, make([]byte, len(data))) {
		t.Fatal("the orphan's extent was not decommitted")
	}
	b := readBlock(t, tr.dev, layout.InodeAddr(a.Ino))
	if in, _, err := layout.DecodeInode(b, a.Ino); err != nil || !in.Free() || in.Gen != a.Gen {
		t.Fatalf("freed inode: %+v %v (gen want %d)", in, err, a.Gen)
	}
	tr.verify(t)
	// The number is reused cleanly.
	fs = openFS(t, tr.dev, "o", 0)
	n := must(fs.Create(ctx, filesys.RootIno, "again", 0o644, filesys.Caller{}, true))
	if err := fs.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n.Ino == a.Ino && n.Gen <= a.Gen {
		t.Fatalf("reused inode %d with generation %d after %d", n.Ino, n.Gen, a.Gen)
	}
	expectClean(t, check(t, tr.dev, false))
}

// TestCorruptDirectory: a directory block owned by another directory is
// reported, not repaired, and orphans are then left alone (the walk
// missed part of the tree).
func TestCorruptDirectory(t *testing.T) {
	tr := build(t)
	big := tr.ino["big"]
	b := readBlock(t, tr.dev, layout.DirBlockAddr(big, 0))
	h, err := layout.DecodeHeader(b)
	if err != nil || h.Kind != layout.KindDir {
		t.Fatalf("big's block 0: %+v %v (the directory should be hashed)", h, err)
	}
	h.Owner = 12345
	layout.PutHeader(b, h)
	tr.dev.WriteData(context.Background(), b, layout.DirBlockAddr(big, 0))
	for _, repair := range []bool{false, true} {
		before := tr.dev.Blocks()
		rep := check(t, tr.dev, repair)
		text := lines(rep)
		if rep.Clean() || !strings.Contains(text, fmt.Sprintf("directory %d block 0", big)) || !strings.Contains(text, "owner 12345") {
			t.Fatalf("repair %v:\n%s", repair, text)
		}
		if tr.dev.Blocks() != before {
			t.Fatal("blocks appeared")
		}
		for _, p := range rep.Problems {
			if p.Repaired && strings.Contains(p.What, "orphan") {
				t.Fatalf("an orphan was freed though the walk was incomplete: %s", p.What)
			}
		}
	}
}

func TestNoFileSystem(t *testing.T) {
	if _, err := Check(context.Background(), newMemDevice(), Options{}); err == nil || !strings.Contains(err.Error(), "no file system") {
		t.Fatalf("empty volume: %v", err)
	}
	dev := newMemDevice()
	b := make([]byte, layout.BlockBytes)
	layout.PutHeader(b, layout.Header{Kind: layout.KindInode, Version: 1})
	dev.WriteData(context.Background(), b, 0)
	if _, err := Check(context.Background(), dev, Options{}); err == nil || !strings.Contains(err.Error(), "superblock") {
		t.Fatalf("bad superblock: %v", err)
	}
}

// TestLogSlot: a node that crashed leaves its slot in use and its changes
// in its log; fsck reports it, and with repair replays the log and frees
// the slot.
func TestLogSlot(t *testing.T) {
	ctx := context.Background()
	tr := build(t)
	fs := openFS(t, tr.dev, "crashed", time.Hour)
	d := must(fs.Mkdir(ctx, filesys.RootIno, "after-crash", 0o755, filesys.Caller{}))
	f := must(fs.Create(ctx, d.Ino, "f", 0o644, filesys.Caller{}, true))
	must(fs.Write(ctx, f.Ino, 0, []byte("survives"), 0, false))
	if err := fs.Rename(ctx, filesys.RootIno, "top", d.Ino, "moved", 0); err != nil {
		t.Fatal(err)
	}
	if err := fs.Unlink(ctx, tr.ino["big"], "file-0001"); err != nil {
		t.Fatal(err)
	}
	if err := fs.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	fs.Halt()
	tr.want["after-crash"] = "/"
	tr.want["after-crash/f"] = "survives"
	tr.want["after-crash/moved"] = tr.want["top"]
	delete(tr.want, "top")
	delete(tr.want, "big/file-0001")

	rep := check(t, tr.dev, false)
	if rep.Clean() || !slices.ContainsFunc(rep.Problems, func(p Problem) bool {
		return strings.Contains(p.What, `in use by node "crashed"`)
	}) {
		t.Fatalf("slot not reported:\n%s", lines(rep))
	}
	rep = check(t, tr.dev, true)
	if !rep.Clean() {
		t.Fatalf("repair:\n%s", lines(rep))
	}
	expectClean(t, check(t, tr.dev, false))
	tr.verify(t)
}

// TestOrphanFreedAtUnmount: a file unlinked while open or held (the kernel
// still knows it) is freed by a clean unmount.
func TestOrphanFreedAtUnmount(t *testing.T) {
	ctx := context.Background()
	tr := build(t)
	fs := openFS(t, tr.dev, "o", 0)
	a := must(fs.Create(ctx, filesys.RootIno, "open", 0o644, filesys.Caller{}, true))
	b := must(fs.Create(ctx, filesys.RootIno, "held", 0o644, filesys.Caller{}, true))
	if err := fs.Open(ctx, a.Ino, a.Gen); err != nil {
		t.Fatal(err)
	}
	fs.Hold(b.Ino)
	for _, n := range []string{"open", "held"} {
		if err := fs.Unlink(ctx, filesys.RootIno, n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fs.Getattr(ctx, b.Ino); err != nil {
		t.Fatalf("held inode freed at unlink: %v", err)
	}
	if err := fs.Close(ctx); err != nil {
		t.Fatal(err)
	}
	expectClean(t, check(t, tr.dev, false))
}

// TestOrphanFreedAfterRecovery: a crashed node's orphans survive in its
// log slot's orphan table. Recovery replays the log and leaves the slot
// marked recovered (fsck reports it); the next node to mount frees them
// and the slot, and fsck finds a clean volume.
func TestOrphanFreedAfterRecovery(t *testing.T) {
	ctx := context.Background()
	tr := build(t)
	fs := openFS(t, tr.dev, "o", time.Hour)
	var orphans []filesys.Attr
	for i := range 3 {
		a := must(fs.Create(ctx, filesys.RootIno, fmt.Sprintf("orphan%d", i), 0o644, filesys.Caller{}, true))
		must(fs.Write(ctx, a.Ino, 0, bytes.Repeat([]byte("y"), 9000), 0, false))
		if err := fs.Open(ctx, a.Ino, a.Gen); err != nil {
			t.Fatal(err)
		}
		if err := fs.Unlink(ctx, filesys.RootIno, fmt.Sprintf("orphan%d", i)); err != nil {
			t.Fatal(err)
		}
		orphans = append(orphans, a)
	}
	fs.Release(ctx, orphans[0].Ino) // freed now: its entry is cleared
	if err := fs.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	fs.Halt()
	if err := filesys.RecoverLog(ctx, tr.dev, "o", 1, filesys.RecoverOptions{}); err != nil {
		t.Fatal(err)
	}
	rep := check(t, tr.dev, false)
	if !slices.ContainsFunc(rep.Problems, func(p Problem) bool { return strings.Contains(p.What, "was recovered, but the orphans") }) {
		t.Fatalf("recovered slot not reported:\n%s", lines(rep))
	}
	p := openFS(t, tr.dev, "p", 0)
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	expectClean(t, check(t, tr.dev, false))
	for _, a := range orphans {
		b := readBlock(t, tr.dev, layout.InodeAddr(a.Ino))
		if in, _, err := layout.DecodeInode(b, a.Ino); err != nil || !in.Free() {
			t.Fatalf("orphan %d: %+v %v", a.Ino, in, err)
		}
	}
	tr.verify(t)
}

// TestUpgrade: a file system of format 1 is refused by mount and by a
// plain check, and `fsck --upgrade` checks it and rewrites its superblock;
// it then mounts, and its tree is intact.
func TestUpgrade(t *testing.T) {
	ctx := context.Background()
	tr := build(t)
	b := readBlock(t, tr.dev, layout.SuperAddr)
	binary.LittleEndian.PutUint32(b[layout.HeaderBytes:], 1) // as format 1 wrote it
	clear(b[layout.HeaderBytes+40 : layout.HeaderBytes+72])  // and without a handle key
	tr.dev.WriteData(ctx, b, layout.SuperAddr)
	if _, err := filesys.Open(ctx, filesys.Config{Dev: tr.dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "m", Session: 9}); !errors.Is(err, layout.ErrOldFormat) {
		t.Fatalf("mount of format 1: %v", err)
	}
	if _, err := Check(ctx, tr.dev, Options{}); !errors.Is(err, layout.ErrOldFormat) {
		t.Fatalf("check of format 1 without --upgrade: %v", err)
	}
	rep, err := Check(ctx, tr.dev, Options{Upgrade: true})
	if err != nil || !rep.Upgraded {
		t.Fatalf("upgrade: %+v %v", rep, err)
	}
	expectClean(t, rep)
	if rep, err := Check(ctx, tr.dev, Options{}); err != nil || rep.Upgraded {
		t.Fatalf("check after the upgrade: %+v %v", rep, err)
	}
	if s, err := layout.DecodeSuper(readBlock(t, tr.dev, layout.SuperAddr)); err != nil || !s.HasHandleKey() {
		t.Fatalf("no handle key after the upgrade: %v", err)
	}
	// A format-2 file system without a handle key (formatted before
	// NFS gateways) gets one from --upgrade, and only then.
	b = readBlock(t, tr.dev, layout.SuperAddr)
	clear(b[layout.HeaderBytes+40 : layout.HeaderBytes+72])
	tr.dev.WriteData(ctx, b, layout.SuperAddr)
	if rep, err := Check(ctx, tr.dev, Options{}); err != nil || rep.Upgraded {
		t.Fatalf("check of a keyless file system: %+v %v", rep, err)
	}
	if rep, err := Check(ctx, tr.dev, Options{Upgrade: true}); err != nil || !rep.Upgraded {
		t.Fatalf("upgrade of a keyless file system: %+v %v", rep, err)
	}
	if s, err := layout.DecodeSuper(readBlock(t, tr.dev, layout.SuperAddr)); err != nil || !s.HasHandleKey() {
		t.Fatalf("no handle key after the second upgrade: %v", err)
	}
	tr.verify(t)
}

// TestNameLog: a damaged block of a directory's name log is found, and
// --repair cuts the log before it; the file system is clean after.
func TestNameLog(t *testing.T) {
	ctx := context.Background()
	dev := fstest.NewMemVersionDevice()
	if _, err := filesys.Format(ctx, dev, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	fs, err := filesys.Open(ctx, filesys.Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "a", Session: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 { // five blocks of records
		if _, err := fs.Create(ctx, filesys.RootIno, fmt.Sprintf("a-long-enough-name-%03d", i), 0o644, filesys.Caller{}, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := Check(ctx, dev, Options{})
	if err != nil {
		t.Fatal(err)
	}
	expectClean(t, rep)
	b := readBlock(t, dev, layout.NameLogAddr(filesys.RootIno, 2))
	b[layout.HeaderBytes+12] = 9 // a record's op
	dev.WriteData(ctx, b, layout.NameLogAddr(filesys.RootIno, 2))
	rep, err = Check(ctx, dev, Options{})
	if err != nil || rep.Clean() || !strings.Contains(fmt.Sprint(rep.Problems), "name log block 2") {
		t.Fatalf("damaged name log: %+v %v", rep.Problems, err)
	}
	if rep, err = Check(ctx, dev, Options{Repair: true}); err != nil || !rep.Clean() {
		t.Fatalf("repair: %+v %v", rep.Problems, err)
	}
	rep, err = Check(ctx, dev, Options{})
	if err != nil {
		t.Fatal(err)
	}
	expectClean(t, rep)
	in, _, err := layout.DecodeInode(readBlock(t, dev, layout.InodeAddr(filesys.RootIno)), filesys.RootIno)
	if err != nil || in.NLog != 2*layout.PayloadBytes {
		t.Fatalf("root's name log after the repair: %d bytes, %v", in.NLog, err)
	}
}

// TestACLs: stored POSIX ACLs that break the file system's invariants
// are reported (and left for their owner to set again).
func TestACLs(t *testing.T) {
	tr := build(t)
	f, a := tr.ino["top"], tr.ino["a"]
	good := acl.ACL{
		{Tag: acl.TagUserObj, Perm: 6, ID: acl.UndefinedID},
		{Tag: acl.TagUser, Perm: 6, ID: 1001},
		{Tag: acl.TagGroupObj, Perm: 4, ID: acl.UndefinedID},
		{Tag: acl.TagMask, Perm: 6, ID: acl.UndefinedID},
		{Tag: acl.TagOther, Perm: 0, ID: acl.UndefinedID},
	}
	editInode(t, tr.dev, f, func(in *layout.Inode) {
		in.Mode = in.Mode&^0o777 | 0o640 // the mask says rw: group bits 6
		in.Xattrs = append(in.Xattrs,
			layout.Xattr{Name: acl.XattrAccess, Value: good.Encode()},
			layout.Xattr{Name: acl.XattrDefault, Value: good.Encode()})
	})
	editInode(t, tr.dev, a, func(in *layout.Inode) {
		in.Xattrs = append(in.Xattrs, layout.Xattr{Name: acl.XattrDefault, Value: []byte{2, 0, 0, 0, 1, 0}})
	})
	text := lines(check(t, tr.dev, false))
	for _, want := range []string{
		fmt.Sprintf("inode %d: mode 0640 does not show its system.posix_acl_access", f),
		fmt.Sprintf("inode %d: system.posix_acl_default on a non-directory", f),
		fmt.Sprintf("inode %d: system.posix_acl_default does not decode", a),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("fsck did not report %q:\n%s", want, text)
		}
	}
}
