// Package timetravel is what `plumeria versions` and `plumeria restore` do
// on a mounted Plumeria file system: it reads the past through the mount's
// .plumeria directory (filesys/history) and needs nothing else, neither a
// coordinator address nor the volume's name.
package timetravel

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/plumeria-fs/plumeria/filesys/history"
)

// Mount is a Plumeria mount and a path's place in it.
type Mount struct {
	Root string // the mount point
	Rel  string // the path relative to Root ("." for the root)
}

// Find returns the Plumeria mount that holds path (which need not exist:
// a deleted file is restored by its old path).
func Find(path string) (Mount, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Mount{}, err
	}
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return Mount{}, fmt.Errorf("read the mount table: %w", err)
	}
	best := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[2] != "fuse.plumeria" || !strings.HasPrefix(f[0], "plumeria:") {
			continue
		}
		mnt := unescape(f[1])
		if (abs == mnt || strings.HasPrefix(abs, strings.TrimSuffix(mnt, "/")+"/")) && len(mnt) > len(best) {
			best = mnt
		}
	}
	if best == "" {
		return Mount{}, fmt.Errorf("%s is not on a Plumeria mount (plumeria mount shows them in /proc/mounts as fuse.plumeria)", path)
	}
	rel, err := filepath.Rel(best, abs)
	if err != nil {
		return Mount{}, err
	}
	if rel == history.Name || strings.HasPrefix(rel, history.Name+"/") {
		return Mount{}, fmt.Errorf("%s is inside %s: give the path of the live file", path, history.Name)
	}
	return Mount{Root: best, Rel: rel}, nil
}

// unescape undoes the octal escapes of /proc/mounts (\040 for a space).
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + c - '0'
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Snapshot is one snapshot the mount shows.
type Snapshot struct {
	Name string
	At   time.Time // zero: unknown (taken before times were recorded)
}

// Snapshots lists the snapshots of m's volume, oldest first (those with
// no time first, by name).
func (m Mount) Snapshots() ([]Snapshot, error) {
	dot := filepath.Join(m.Root, history.Name)
	names, err := os.ReadDir(filepath.Join(dot, "snapshots"))
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	at := map[string]time.Time{}
	links, err := os.ReadDir(filepath.Join(dot, "at"))
	if err != nil {
		return nil, fmt.Errorf("list snapshot times: %w", err)
	}
	for _, l := range links {
		t, err := history.ParseTime(l.Name())
		if err != nil {
			continue
		}
		target, err := os.Readlink(filepath.Join(dot, "at", l.Name()))
		if err != nil {
			continue
		}
		name := filepath.Base(target)
		if old, ok := at[name]; !ok || t.Before(old) {
			at[name] = t
		}
	}
	var snaps []Snapshot
	for _, n := range names {
		snaps = append(snaps, Snapshot{Name: n.Name(), At: at[n.Name()]})
	}
	slices.SortFunc(snaps, func(a, b Snapshot) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return snaps, nil
}

// Version is one state of a path: in the snapshots from First to Last
// (consecutive snapshots in which it did not change), or the live one
// (Snapshot empty).
type Version struct {
	First, Last Snapshot
	Live        bool
	Mode        fs.FileMode
	Size        int64
	Mtime       time.Time
}

// Versions lists the states of m's path in every snapshot, oldest first,
// then the live one (if the path exists). A state is told apart from the
// next by its type, size, modification and change times and inode; a
// path missing from a snapshot (not yet made, or deleted then) ends a
// version.
func (m Mount) Versions() ([]Version, error) {
	snaps, err := m.Snapshots()
	if err != nil {
		return nil, err
	}
	type key struct {
		mode         fs.FileMode
		size         int64
		mtime, ctime int64
		ino          uint64
	}
	keyOf := func(st *syscall.Stat_t, fi fs.FileInfo) key {
		return key{fi.Mode(), fi.Size(), st.Mtim.Nano(), st.Ctim.Nano(), st.Ino & (1<<32 - 1)}
	}
	var out []Version
	var last *key
	for _, s := range snaps {
		fi, err := os.Lstat(filepath.Join(m.Root, history.Name, "snapshots", s.Name, m.Rel))
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
				return nil, err
			}
			last = nil
			continue
		}
		k := keyOf(fi.Sys().(*syscall.Stat_t), fi)
		if last != nil && *last == k {
			out[len(out)-1].Last = s
			continue
		}
		last = &k
		out = append(out, Version{First: s, Last: s, Mode: fi.Mode(), Size: fi.Size(), Mtime: fi.ModTime()})
	}
	if fi, err := os.Lstat(filepath.Join(m.Root, m.Rel)); err == nil {
		out = append(out, Version{Live: true, Mode: fi.Mode(), Size: fi.Size(), Mtime: fi.ModTime()})
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return out, nil
}

// FileVersions lists the versions of the file at m's path (closes of it
// that changed it), oldest first; at, if not zero, takes the file that
// path named at that time (one deleted or renamed since). ok is false when
// the volume keeps no file versions or the path is not a regular file.
func (m Mount) FileVersions(at time.Time) (vs []history.FileVersion, ok bool, err error) {
	p := filepath.Join(m.Root, m.Rel)
	if !at.IsZero() {
		p = filepath.Join(m.Root, history.Name, "at", at.UTC().Format(time.RFC3339Nano), m.Rel)
	}
	b, err := getxattr(p, history.VersionsXattr)
	switch {
	case errors.Is(err, syscall.ENODATA) || errors.Is(err, syscall.ENOTSUP):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	vs, err = history.ParseVersions(b)
	return vs, err == nil, err
}

// Source returns the path of m's path as it was at t, and where it comes
// from: a snapshot's name, or "file versions" on a volume that keeps them.
// Errors say whether no snapshot is that old or the path did not exist
// then.
func (m Mount) Source(t time.Time) (string, string, error) {
	at := filepath.Join(m.Root, history.Name, "at", t.UTC().Format(time.RFC3339Nano))
	if fi, err := os.Lstat(at); err == nil && fi.IsDir() {
		src := filepath.Join(at, m.Rel)
		if _, err := os.Lstat(src); err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				return "", "", fmt.Errorf("%s did not exist at %s", m.Rel, t.UTC().Format(time.RFC3339Nano))
			}
			return "", "", err
		}
		return src, "file versions", nil
	} else if errors.Is(err, syscall.EINVAL) {
		return "", "", fmt.Errorf("%s is before the file system was made", t.UTC().Format(time.RFC3339))
	}
	target, err := os.Readlink(at)
	if errors.Is(err, fs.ErrNotExist) {
		snaps, _ := m.Snapshots()
		oldest := "none"
		for _, s := range snaps {
			if !s.At.IsZero() {
				oldest = fmt.Sprintf("%s, taken %s", s.Name, history.TimeName(s.At))
				break
			}
		}
		return "", "", fmt.Errorf("no snapshot was taken at or before %s (the oldest: %s)", t.UTC().Format(time.RFC3339), oldest)
	}
	if err != nil {
		return "", "", fmt.Errorf("find the snapshot at %s: %w", t.UTC().Format(time.RFC3339), err)
	}
	snap := filepath.Base(target)
	src := filepath.Join(m.Root, history.Name, "snapshots", snap, m.Rel)
	if _, err := os.Lstat(src); err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return "", "", fmt.Errorf("%s did not exist at %s (snapshot %s)", m.Rel, t.UTC().Format(time.RFC3339), snap)
		}
		return "", "", err
	}
	return src, snap, nil
}

// Progress is told the bytes copied so far and the total.
type Progress func(done, total int64)

// Restore copies src (a file, symlink or directory tree of a snapshot) to
// dst as a new live copy: into a temporary name next to dst, made durable
// (fsync), then renamed over dst. A file or symlink replaces the file or
// symlink dst is now; a directory is restored only where nothing is, and
// nothing replaces a directory (an error, nothing changed). Missing parent
// directories of dst are made. Modes, owners (when run as root), times and user xattrs
// are kept.
func Restore(src, dst string, progress Progress) error {
	sfi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if dfi, err := os.Lstat(dst); err == nil && (sfi.IsDir() || dfi.IsDir()) {
		return fmt.Errorf("%s exists: a directory is restored only where nothing is, and nothing replaces a directory (move it away, or restore to another path with --to)", dst)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	var total int64
	filepath.Walk(src, func(_ string, fi fs.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			total += fi.Size()
		}
		return nil
	})
	tmp := filepath.Join(filepath.Dir(dst), fmt.Sprintf(".%s.restore-%d", filepath.Base(dst), os.Getpid()))
	c := &copier{total: total, progress: progress}
	if err := c.copy(src, tmp); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if d, err := os.Open(filepath.Dir(dst)); err == nil {
		d.Sync() // the rename
		d.Close()
	}
	return nil
}

type copier struct {
	done, total int64
	progress    Progress
	buf         []byte
}

func (c *copier) copy(src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	st := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, dst); err != nil {
			return err
		}
	case fi.IsDir():
		if err := os.Mkdir(dst, 0o700); err != nil {
			return err
		}
		ents, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if err := c.copy(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
	case fi.Mode().IsRegular():
		if err := c.copyFile(src, dst); err != nil {
			return err
		}
	default:
		if err := syscall.Mknod(dst, st.Mode, int(st.Rdev)); err != nil {
			return fmt.Errorf("make %s: %w", dst, err)
		}
	}
	copyXattrs(src, dst)
	if os.Geteuid() == 0 {
		if err := os.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		if err := os.Chmod(dst, fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
			return err
		}
	}
	ts := []syscall.Timespec{syscall.NsecToTimespec(st.Atim.Nano()), syscall.NsecToTimespec(st.Mtim.Nano())}
	return utimesNoFollow(dst, ts)
}

func (c *copier) copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if c.buf == nil {
		c.buf = make([]byte, 1<<20)
	}
	for {
		n, rerr := in.Read(c.buf)
		if n > 0 {
			if _, err := out.Write(c.buf[:n]); err != nil {
				out.Close()
				return err
			}
			c.done += int64(n)
			if c.progress != nil {
				c.progress(c.done, c.total)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			out.Close()
			return rerr
		}
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
