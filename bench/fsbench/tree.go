package fsbench

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Entry is one entry of the generated source tree, a path relative to the
// extraction directory with '/' separators.
type Entry struct {
	Path   string
	Type   byte        // tar.TypeDir, tar.TypeReg or tar.TypeSymlink
	Mode   fs.FileMode // permission bits
	Data   []byte      // regular file content
	Target string      // symlink target, relative to the link's directory
	MTime  time.Time
}

// Tree is a generated source tree and its tar stream.
type Tree struct {
	Entries               []Entry // sorted by path: every directory before its content
	Tar                   []byte
	Files, Dirs, Symlinks int
	Bytes                 int64 // of regular file content
}

var (
	treeWords = []string{"core", "util", "net", "fs", "io", "proto", "api", "internal", "test", "cmd", "lib", "drivers", "arch", "docs", "tools", "mm", "crypto", "sched"}
	treeExts  = []string{"go", "go", "go", "c", "c", "h", "h", "md", "txt", "json", "py", "sh"}
)

// treeMTime is the modification time of the generated entries (plus a few
// pseudo-random seconds).
var treeMTime = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// GenTree generates, deterministically from seed, a source tree of files
// regular files under one top directory "src": about files/12 directories
// nested up to 8 deep, files/50 symlinks to files of their own directory,
// one file in 12 executable, and sizes mostly small with a few large:
// 70% under 4 KiB, 25% 4–32 KiB, 4.5% 32–256 KiB, 0.5% 256 KiB–2 MiB
// (about 16 KiB on average).
func GenTree(files int, seed uint64) (*Tree, error) {
	rng := rand.New(rand.NewPCG(seed, 4))
	pool := textPool(rng, 4<<20)
	mtime := func() time.Time { return treeMTime.Add(time.Duration(rng.IntN(1<<20)) * time.Second) }
	t := &Tree{}
	type dir struct {
		path  string
		depth int
		files []string // base names of its regular files
	}
	dirs := []*dir{{path: "src"}}
	for i := 1; i < max(1, files/12); i++ {
		parent := dirs[rng.IntN(len(dirs))]
		for parent.depth >= 8 {
			parent = dirs[rng.IntN(len(dirs))]
		}
		dirs = append(dirs, &dir{path: fmt.Sprintf("%s/%s%d", parent.path, treeWords[rng.IntN(len(treeWords))], i), depth: parent.depth + 1})
	}
	for _, d := range dirs {
		t.Entries = append(t.Entries, Entry{Path: d.path, Type: tar.TypeDir, Mode: 0o755, MTime: mtime()})
	}
	for i := range files {
		d := dirs[rng.IntN(len(dirs))]
		ext := treeExts[rng.IntN(len(treeExts))]
		name := fmt.Sprintf("%s_%d.%s", treeWords[rng.IntN(len(treeWords))], i, ext)
		var size int
		switch x := rng.IntN(1000); {
		case x < 700:
			size = 64 + rng.IntN(4<<10-64)
		case x < 950:
			size = 4<<10 + rng.IntN(28<<10)
		case x < 995:
			size = 32<<10 + rng.IntN(224<<10)
		default:
			size = 256<<10 + rng.IntN(1792<<10)
		}
		off := rng.IntN(len(pool) - size)
		mode := fs.FileMode(0o644)
		if ext == "sh" || rng.IntN(24) == 0 {
			mode = 0o755
		}
		t.Entries = append(t.Entries, Entry{Path: d.path + "/" + name, Type: tar.TypeReg, Mode: mode, Data: pool[off : off+size : off+size], MTime: mtime()})
		d.files = append(d.files, name)
		t.Bytes += int64(size)
	}
	for i := range files / 50 {
		d := dirs[rng.IntN(len(dirs))]
		for len(d.files) == 0 {
			d = dirs[rng.IntN(len(dirs))]
		}
		t.Entries = append(t.Entries, Entry{Path: fmt.Sprintf("%s/link%d", d.path, i), Type: tar.TypeSymlink, Mode: 0o777,
			Target: d.files[rng.IntN(len(d.files))], MTime: mtime()})
	}
	// Path order puts a directory right before its content ("a/b" < "a/b-c"
	// < "a/b/c"), like a tree walk.
	slices.SortFunc(t.Entries, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })

	var buf bytes.Buffer
	buf.Grow(int(t.Bytes) + len(t.Entries)*1024)
	tw := tar.NewWriter(&buf)
	for _, e := range t.Entries {
		h := &tar.Header{Typeflag: e.Type, Name: e.Path, Mode: int64(e.Mode), ModTime: e.MTime, Uname: "src", Gname: "src", Uid: 1000, Gid: 1000}
		switch e.Type {
		case tar.TypeDir:
			h.Name += "/"
			t.Dirs++
		case tar.TypeReg:
			h.Size = int64(len(e.Data))
			t.Files++
		case tar.TypeSymlink:
			h.Linkname = e.Target
			t.Symlinks++
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tar %s: %w", e.Path, err)
		}
		if _, err := tw.Write(e.Data); err != nil {
			return nil, fmt.Errorf("tar %s: %w", e.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	t.Tar = buf.Bytes()
	return t, nil
}

// textPool returns n bytes of source-like text: short lowercase words,
// spaces, indentation and newlines.
func textPool(rng *rand.Rand, n int) []byte {
	const alphabet = "abcdefghijklmnopqrstuvwxyzeeeeaaaoooiiinnnttssrrll    \t\t(){};=,._\n\n\n\n"
	b := make([]byte, n)
	for i := 0; i < n; {
		x := rng.Uint64()
		for j := 0; j < 8 && i < n; j++ {
			b[i] = alphabet[int(x&0xff)%len(alphabet)]
			x >>= 8
			i++
		}
	}
	return b
}

// Extract extracts a tar stream into dir as tar(1) would: directories,
// regular files (then their modification times), symlinks, and the
// execute bits of files (other permission bits are left to the umask).
// Entries must not leave dir; parents come before their content.
func Extract(dir string, r io.Reader) error {
	tr := tar.NewReader(r)
	buf := make([]byte, 64<<10)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read tar: %w", err)
		}
		name := filepath.FromSlash(strings.TrimSuffix(h.Name, "/"))
		if !filepath.IsLocal(name) {
			return fmt.Errorf("tar entry %q leaves the extraction directory", h.Name)
		}
		path := filepath.Join(dir, name)
		mode := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(path, mode); err != nil {
				return err
			}
		case tar.TypeReg:
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
			if err != nil {
				return err
			}
			_, err = io.CopyBuffer(struct{ io.Writer }{f}, tr, buf)
			if err == nil && mode&0o111 != 0 {
				err = f.Chmod(mode)
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("extract %s: %w", path, err)
			}
			if err := os.Chtimes(path, h.ModTime, h.ModTime); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, path); err != nil {
				return err
			}
		default:
			return fmt.Errorf("tar entry %q: unsupported type %q", h.Name, h.Typeflag)
		}
	}
}

// Verify checks that dir holds exactly t's entries: types, sizes, content,
// symlink targets, execute bits and file modification times.
func (t *Tree) Verify(dir string) error {
	want := make(map[string]bool, len(t.Entries))
	for _, e := range t.Entries {
		path := filepath.Join(dir, filepath.FromSlash(e.Path))
		want[path] = true
		st, err := os.Lstat(path)
		if err != nil {
			return err
		}
		switch e.Type {
		case tar.TypeDir:
			if !st.IsDir() {
				return fmt.Errorf("%s: %v, want a directory", path, st.Mode().Type())
			}
		case tar.TypeSymlink:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if target != e.Target {
				return fmt.Errorf("%s: symlink to %q, want %q", path, target, e.Target)
			}
		case tar.TypeReg:
			if !st.Mode().IsRegular() {
				return fmt.Errorf("%s: %v, want a regular file", path, st.Mode().Type())
			}
			if st.Mode().Perm()&0o100 != e.Mode&0o100 {
				return fmt.Errorf("%s: mode %v, want %v", path, st.Mode().Perm(), e.Mode)
			}
			if !st.ModTime().Equal(e.MTime) {
				return fmt.Errorf("%s: modified %v, want %v", path, st.ModTime(), e.MTime)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if !bytes.Equal(data, e.Data) {
				return fmt.Errorf("%s: %d bytes differing from the %d in the tarball", path, len(data), len(e.Data))
			}
		}
	}
	extra := errors.New("extra")
	var found string
	err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != dir && !want[path] {
			found = path
			return extra
		}
		return nil
	})
	if err == extra {
		return fmt.Errorf("%s: not in the tarball", found)
	}
	return err
}

// tree: extract the generated tarball into work and check the result.
func (r *runner) tree(work string) error {
	t, err := GenTree(r.cfg.TreeFiles, r.cfg.Seed)
	if err != nil {
		return fmt.Errorf("tree_extract: generate: %w", err)
	}
	r.logf("tree: extract %d files (%.1f MiB), %d directories, %d symlinks from a %.1f MiB tarball",
		t.Files, float64(t.Bytes)/(1<<20), t.Dirs, t.Symlinks, float64(len(t.Tar))/(1<<20))
	start := time.Now()
	if err := Extract(work, bytes.NewReader(t.Tar)); err != nil {
		return fmt.Errorf("tree_extract: %w", err)
	}
	el := time.Since(start)
	if err := t.Verify(work); err != nil {
		return fmt.Errorf("tree_extract: check: %w", err)
	}
	r.add("tree_extract", max(el, time.Microsecond).Seconds(), "s")
	return nil
}
