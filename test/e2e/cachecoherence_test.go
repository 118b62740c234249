package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestFSCacheCoherence is the acceptance test of issue F (kernel entry,
// attribute, negative-entry and page caching on the mounts): node A makes
// its kernel cache an object (stat, read, readdir, negative lookup), node B
// changes it, and A sees the change with its very next call, for every kind
// of change. No sleeps, no retries: "a change made on one node is visible on
// every node immediately after the call returns". It must fail if an
// invalidation is removed.
//
// Two `plumeria mount` processes of one volume: a (node n1) and b (n2).
// One subtest per kind of change, each in its own directory made through a
// and seen through b. A subtest runs in rounds, one per check it makes on A
// after B's change; in round i check i is A's first call after the change
// (a stat, a read through a descriptor A opened before the change, a read
// through a new open, a readdir, a readdir through a directory descriptor
// opened before, a readlink, a getxattr...), then every other check runs
// too, so every kind of observation is, in one round, the first to meet what
// A's kernel cached (a read or readdir makes the kernel's next stat ask the
// file system, so a stat that is not first proves less). Even rounds create
// the objects through a, odd rounds through b. Stat checks compare exact
// values (size, mode, uid/gid, nlink, atime/mtime with nanoseconds, inode
// number) and every field but atime with what b's stat of the same path
// shows afterwards.
//
// Subtest pingpong repeats cache / change / check 50 times on one file and
// one directory, alternating the side that changes, to catch invalidation
// that races the next request.
func TestFSCacheCoherence(t *testing.T) {
	start := time.Now()
	c := newFSCluster(t)
	a, b := c.mountNode("n1"), c.mountNode("n2")
	t.Logf("cluster and two mounts up in %v", time.Since(start).Round(time.Millisecond))
	for _, k := range ccCases() {
		t.Run(k.name, func(t *testing.T) { ccRun(t, a, b, k) })
	}
	t.Run("pingpong", func(t *testing.T) { ccPingPong(t, a, b, 50) })
}

// ccCase is one kind of change: setup makes the objects (through r.mk, A or
// B) and has A cache them; change makes the change through B; checks are
// what A must see after it.
type ccCase struct {
	name   string
	setup  func(r *ccRound)
	change func(r *ccRound)
	checks []ccCheck
}

type ccCheck struct {
	what string
	fn   func(r *ccRound)
}

// ccRound is one round of a case, in its own directory.
type ccRound struct {
	*testing.T
	kase  string
	first string // the check that is A's first call after the change
	a, b  string // the round's directory through A and through B
	mk    string // a or b: where setup creates the objects
	fds   map[string]int
	ino   map[string]uint64 // inode numbers A saw before the change
}

func (r *ccRound) pa(n string) string { return filepath.Join(r.a, n) }
func (r *ccRound) pb(n string) string { return filepath.Join(r.b, n) }

func (r *ccRound) where() string { return fmt.Sprintf("case %s (%s first)", r.kase, r.first) }

// must stops the round when a setup or change step fails.
func (r *ccRound) must(what, path string, err error) {
	r.Helper()
	if err != nil {
		r.Fatalf("%s: %s %s: %v", r.where(), what, path, err)
	}
}

func ccRun(t *testing.T, a, b string, k ccCase) {
	da, db := filepath.Join(a, "cc-"+k.name), filepath.Join(b, "cc-"+k.name)
	if err := os.Mkdir(da, 0o755); err != nil {
		t.Fatalf("case %s: mkdir on A %s: %v", k.name, da, err)
	}
	if fi, err := os.Lstat(db); err != nil || !fi.IsDir() {
		t.Fatalf("case %s: stat on B %s (made on A): expected a directory, got %v", k.name, db, err)
	}
	failed := false
	for i, first := range k.checks {
		r := &ccRound{T: t, kase: k.name, first: first.what,
			a: filepath.Join(da, fmt.Sprint("r", i)), b: filepath.Join(db, fmt.Sprint("r", i)),
			fds: map[string]int{}, ino: map[string]uint64{}}
		func() {
			defer func() {
				for _, fd := range r.fds {
					unix.Close(fd)
				}
			}()
			r.must("mkdir on A", r.a, os.Mkdir(r.a, 0o755))
			fi, err := os.Lstat(r.b)
			r.must("stat on B (made on A)", r.b, err)
			if !fi.IsDir() {
				r.Fatalf("%s: stat on B %s: not a directory: %v", r.where(), r.b, fi.Mode())
			}
			r.mk = r.a
			if i%2 == 1 {
				r.mk = r.b
			}
			k.setup(r)
			k.change(r)
			// Now, with no pause: A's first call, then the others.
			first.fn(r)
			for j, c := range k.checks {
				if j != i {
					c.fn(r)
				}
			}
		}()
		if t.Failed() && !failed {
			failed = true
			t.Logf("case %s: round %d (%s first) is the first that failed; directories %s, %s", k.name, i, first.what, r.a, r.b)
		}
	}
}

// ccPattern is n bytes that differ for every seed.
func ccPattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7+i/251) ^ seed*37 | 1
	}
	return b
}

func ccConcat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// --- setup through r.mk ---

func (r *ccRound) mkFile(n string, data []byte, mode uint32) {
	r.Helper()
	p := filepath.Join(r.mk, n)
	r.must("create", p, os.WriteFile(p, data, 0o600))
	r.must("chmod", p, unix.Chmod(p, mode))
}

func (r *ccRound) mkDir(n string) {
	r.Helper()
	p := filepath.Join(r.mk, n)
	r.must("mkdir", p, os.Mkdir(p, 0o700))
	r.must("chmod", p, unix.Chmod(p, 0o755))
}

func (r *ccRound) mkSymlink(target, n string) {
	r.Helper()
	p := filepath.Join(r.mk, n)
	r.must("symlink", p, os.Symlink(target, p))
}

func (r *ccRound) mkXattr(n, key, val string) {
	r.Helper()
	p := filepath.Join(r.mk, n)
	r.must("setxattr "+key, p, unix.Setxattr(p, key, []byte(val), 0))
}

// timesOnB returns n's access and modification times as B sees them, for
// UtimesNano.
func (r *ccRound) timesOnB(n string) []unix.Timespec {
	r.Helper()
	var st unix.Stat_t
	r.must("stat on B", r.pb(n), unix.Lstat(r.pb(n), &st))
	return []unix.Timespec{st.Atim, st.Mtim}
}

// --- caching through A ---

func (r *ccRound) cacheStat(n string) {
	r.Helper()
	var st unix.Stat_t
	for range 3 {
		r.must("cache: stat on A", r.pa(n), unix.Lstat(r.pa(n), &st))
	}
	r.ino[n] = st.Ino
}

// cacheFile: stat, read through a descriptor kept open (the old fd of the
// checks), read through new opens, fstat, stat.
//
// Every cache step ends with a stat: a read, readdir or readlink marks the
// kernel's cached atime stale, and the next stat would ask the file system
// anyway, hiding stale attributes.
func (r *ccRound) cacheFile(n string) {
	r.Helper()
	r.cacheStat(n)
	p := r.pa(n)
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	r.must("cache: open on A", p, err)
	r.fds[n] = fd
	for range 2 {
		_, err := ccPreadAll(fd)
		r.must("cache: read on A", p, err)
		_, err = os.ReadFile(p)
		r.must("cache: read (new open) on A", p, err)
	}
	var st unix.Stat_t
	r.must("cache: fstat on A", p, unix.Fstat(fd, &st))
	r.cacheStat(n)
}

// cacheDir: stat, readdir (twice, and every entry stat'd), a directory
// descriptor kept open and read to its end, stat.
func (r *ccRound) cacheDir(n string) {
	r.Helper()
	r.cacheStat(n)
	p := r.pa(n)
	for range 2 {
		ents, err := os.ReadDir(p)
		r.must("cache: readdir on A", p, err)
		for _, e := range ents {
			var st unix.Stat_t
			r.must("cache: stat on A", filepath.Join(p, e.Name()), unix.Lstat(filepath.Join(p, e.Name()), &st))
		}
	}
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	r.must("cache: opendir on A", p, err)
	r.fds[n] = fd
	_, err = ccGetdents(fd)
	r.must("cache: getdents on A", p, err)
	r.cacheStat(n)
}

// cacheMissing: a negative lookup, several times.
func (r *ccRound) cacheMissing(n string) {
	r.Helper()
	p := r.pa(n)
	for range 3 {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); !errors.Is(err, unix.ENOENT) {
			r.Fatalf("%s: cache: stat on A %s: expected ENOENT, got %v", r.where(), p, err)
		}
	}
	if fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0); !errors.Is(err, unix.ENOENT) {
		if err == nil {
			unix.Close(fd)
		}
		r.Fatalf("%s: cache: open on A %s: expected ENOENT, got %v", r.where(), p, err)
	}
}

func (r *ccRound) cacheLink(n string) {
	r.Helper()
	r.cacheStat(n)
	for range 3 {
		_, err := os.Readlink(r.pa(n))
		r.must("cache: readlink on A", r.pa(n), err)
	}
	r.cacheStat(n)
}

func (r *ccRound) cacheXattrs(n string, keys ...string) {
	r.Helper()
	p := r.pa(n)
	buf := make([]byte, 4096)
	for range 2 {
		for _, k := range keys {
			if _, err := unix.Getxattr(p, k, buf); err != nil && !errors.Is(err, unix.ENODATA) {
				r.Fatalf("%s: cache: getxattr %s on A %s: %v", r.where(), k, p, err)
			}
		}
		_, err := unix.Listxattr(p, buf)
		r.must("cache: listxattr on A", p, err)
	}
}

// --- I/O helpers ---

func ccPreadAll(fd int) ([]byte, error) {
	var out []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Pread(fd, buf, int64(len(out)))
		if err != nil {
			return out, err
		}
		if n == 0 {
			return out, nil
		}
		out = append(out, buf[:n]...)
	}
}

// ccGetdents reads a directory descriptor to its end from where it is; the
// names are sorted, without "." and "..".
func ccGetdents(fd int) ([]string, error) {
	var names []string
	buf := make([]byte, 16<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return names, err
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	slices.Sort(names)
	return names, nil
}

func ccListxattr(p string) ([]string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Listxattr(p, buf)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, k := range strings.Split(string(buf[:n]), "\x00") {
		if strings.HasPrefix(k, "user.") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

func ccShow(b []byte) string {
	if len(b) <= 48 {
		return fmt.Sprintf("%d bytes %q", len(b), b)
	}
	return fmt.Sprintf("%d bytes %q...", len(b), b[:48])
}

func ccDiff(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	return fmt.Sprintf("got %s, first difference at offset %d", ccShow(got), i)
}

func ccNames(s []string) string { return "[" + strings.Join(s, " ") + "]" }

// --- stat expectations ---

// ccAttrs are the stat fields the checks compare, formatted.
func ccAttrs(st *unix.Stat_t) map[string]string {
	ts := func(t unix.Timespec) string { return fmt.Sprintf("%d.%09d", t.Sec, t.Nsec) }
	return map[string]string{
		"ino": fmt.Sprint(st.Ino), "mode": fmt.Sprintf("%#o", st.Mode), "nlink": fmt.Sprint(st.Nlink),
		"uid": fmt.Sprint(st.Uid), "gid": fmt.Sprint(st.Gid), "size": fmt.Sprint(st.Size),
		"mtime": ts(st.Mtim), "ctime": ts(st.Ctim), "atime": ts(st.Atim),
	}
}

var ccFields = []string{"ino", "mode", "nlink", "uid", "gid", "size", "mtime", "ctime", "atime"}

// ccWant is what a stat on A must show: exact fields, and (likeB) every
// field but atime as B's stat of likeB shows it; inoOf/notInoOf: the inode
// number A saw for that name before the change, or anything but it.
type ccWant struct {
	f               map[string]string
	likeB           string
	inoOf, notInoOf string
}

func ccFieldsOf(kv []string) map[string]string {
	f := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		f[kv[i]] = kv[i+1]
	}
	return f
}

func (r *ccRound) checkAttrs(what, path string, st *unix.Stat_t, w ccWant) {
	r.Helper()
	got := ccAttrs(st)
	for _, k := range ccFields {
		if v, ok := w.f[k]; ok && got[k] != v {
			r.Errorf("%s: %s %s: %s: expected %s, got %s", r.where(), what, path, k, v, got[k])
		}
	}
	if w.inoOf != "" && st.Ino != r.ino[w.inoOf] {
		r.Errorf("%s: %s %s: inode: expected %d (A's inode of %s before the change), got %d", r.where(), what, path, r.ino[w.inoOf], w.inoOf, st.Ino)
	}
	if w.notInoOf != "" && st.Ino == r.ino[w.notInoOf] {
		r.Errorf("%s: %s %s: inode: expected a new inode, got %d, A's inode of %s before the change", r.where(), what, path, st.Ino, w.notInoOf)
	}
	if w.likeB == "" {
		return
	}
	var bst unix.Stat_t
	if err := unix.Lstat(r.pb(w.likeB), &bst); err != nil {
		r.Errorf("%s: stat on B %s: %v", r.where(), r.pb(w.likeB), err)
		return
	}
	onB := ccAttrs(&bst)
	for _, k := range ccFields {
		if _, ok := w.f[k]; ok || k == "atime" {
			continue
		}
		if got[k] != onB[k] {
			r.Errorf("%s: %s %s: %s: expected %s (as B sees it), got %s", r.where(), what, path, k, onB[k], got[k])
		}
	}
}

// like: exact fields kv (name, value, ...) and the rest as B sees it.
func like(n string, kv ...string) ccWant { return ccWant{f: ccFieldsOf(kv), likeB: n} }

// exact: only the fields kv.
func exact(kv ...string) ccWant { return ccWant{f: ccFieldsOf(kv)} }

func (w ccWant) sameIno(n string) ccWant { w.inoOf = n; return w }
func (w ccWant) newIno(n string) ccWant  { w.notInoOf = n; return w }

// --- checks on A ---

func chkStat(n string, w ccWant) ccCheck {
	return ccCheck{"stat " + n, func(r *ccRound) {
		r.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(r.pa(n), &st); err != nil {
			r.Errorf("%s: stat on A %s: expected it to exist, got %v", r.where(), r.pa(n), err)
			return
		}
		r.checkAttrs("stat on A", r.pa(n), &st, w)
	}}
}

// chkFstatOld: fstat of the descriptor A opened before the change.
func chkFstatOld(n string, w ccWant) ccCheck {
	return ccCheck{"fstat old fd " + n, func(r *ccRound) {
		r.Helper()
		var st unix.Stat_t
		if err := unix.Fstat(r.fds[n], &st); err != nil {
			r.Errorf("%s: fstat on A of the fd opened before the change on %s: %v", r.where(), r.pa(n), err)
			return
		}
		r.checkAttrs("fstat on A of the fd opened before the change on", r.pa(n), &st, w)
	}}
}

func chkGone(n string) ccCheck {
	return ccCheck{"stat " + n + " (gone)", func(r *ccRound) {
		r.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(r.pa(n), &st); !errors.Is(err, unix.ENOENT) {
			r.Errorf("%s: stat on A %s: expected ENOENT, got %v (ino %d, mode %#o, size %d)", r.where(), r.pa(n), err, st.Ino, st.Mode, st.Size)
		}
	}}
}

func chkOpenGone(n string) ccCheck {
	return ccCheck{"open " + n + " (gone)", func(r *ccRound) {
		r.Helper()
		fd, err := unix.Open(r.pa(n), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		if !errors.Is(err, unix.ENOENT) {
			r.Errorf("%s: open on A %s: expected ENOENT, got %v", r.where(), r.pa(n), err)
		}
	}}
}

// chkRead: open anew, read everything.
func chkRead(n string, want []byte) ccCheck {
	return ccCheck{"read (new open) " + n, func(r *ccRound) {
		r.Helper()
		got, err := os.ReadFile(r.pa(n))
		if err != nil {
			r.Errorf("%s: read (new open) on A %s: expected %s, got %v", r.where(), r.pa(n), ccShow(want), err)
		} else if !bytes.Equal(got, want) {
			r.Errorf("%s: read (new open) on A %s: expected %s, %s", r.where(), r.pa(n), ccShow(want), ccDiff(got, want))
		}
	}}
}

// chkReadOld: read everything through the descriptor A opened (and read
// through) before the change.
func chkReadOld(n string, want []byte) ccCheck {
	return ccCheck{"read old fd " + n, func(r *ccRound) {
		r.Helper()
		got, err := ccPreadAll(r.fds[n])
		if err != nil {
			r.Errorf("%s: read on A through the fd opened before the change on %s: expected %s, got %v", r.where(), r.pa(n), ccShow(want), err)
		} else if !bytes.Equal(got, want) {
			r.Errorf("%s: read on A through the fd opened before the change on %s: expected %s, %s", r.where(), r.pa(n), ccShow(want), ccDiff(got, want))
		}
	}}
}

func chkReaddir(n string, want ...string) ccCheck {
	slices.Sort(want)
	return ccCheck{"readdir " + n, func(r *ccRound) {
		r.Helper()
		ents, err := os.ReadDir(r.pa(n))
		if err != nil {
			r.Errorf("%s: readdir on A %s: expected %s, got %v", r.where(), r.pa(n), ccNames(want), err)
			return
		}
		var got []string
		for _, e := range ents {
			got = append(got, e.Name())
		}
		if !slices.Equal(got, want) {
			r.Errorf("%s: readdir on A %s: expected %s, got %s", r.where(), r.pa(n), ccNames(want), ccNames(got))
		}
	}}
}

// chkReaddirOld: rewind the directory descriptor A opened (and read to its
// end) before the change and read it again.
func chkReaddirOld(n string, want ...string) ccCheck {
	slices.Sort(want)
	return ccCheck{"readdir old fd " + n, func(r *ccRound) {
		r.Helper()
		fd := r.fds[n]
		if _, err := unix.Seek(fd, 0, io.SeekStart); err != nil {
			r.Errorf("%s: rewinddir on A %s: %v", r.where(), r.pa(n), err)
			return
		}
		got, err := ccGetdents(fd)
		if err != nil {
			r.Errorf("%s: readdir on A through the fd opened before the change on %s: expected %s, got %v", r.where(), r.pa(n), ccNames(want), err)
		} else if !slices.Equal(got, want) {
			r.Errorf("%s: readdir on A through the fd opened before the change on %s (rewound): expected %s, got %s", r.where(), r.pa(n), ccNames(want), ccNames(got))
		}
	}}
}

func chkReadlink(n, want string) ccCheck {
	return ccCheck{"readlink " + n, func(r *ccRound) {
		r.Helper()
		got, err := os.Readlink(r.pa(n))
		if err != nil || got != want {
			r.Errorf("%s: readlink on A %s: expected %q, got %q, %v", r.where(), r.pa(n), want, got, err)
		}
	}}
}

// chkXattr: want nil means ENODATA.
func chkXattr(n, key string, want []byte) ccCheck {
	return ccCheck{"getxattr " + key + " " + n, func(r *ccRound) {
		r.Helper()
		buf := make([]byte, 4096)
		sz, err := unix.Getxattr(r.pa(n), key, buf)
		switch {
		case want == nil && !errors.Is(err, unix.ENODATA):
			r.Errorf("%s: getxattr %s on A %s: expected ENODATA, got %v %s", r.where(), key, r.pa(n), err, ccShow(buf[:max(sz, 0)]))
		case want != nil && err != nil:
			r.Errorf("%s: getxattr %s on A %s: expected %q, got %v", r.where(), key, r.pa(n), want, err)
		case want != nil && !bytes.Equal(buf[:sz], want):
			r.Errorf("%s: getxattr %s on A %s: expected %q, got %q", r.where(), key, r.pa(n), want, buf[:sz])
		}
	}}
}

func chkListxattr(n string, want ...string) ccCheck {
	slices.Sort(want)
	return ccCheck{"listxattr " + n, func(r *ccRound) {
		r.Helper()
		got, err := ccListxattr(r.pa(n))
		if err != nil || !slices.Equal(got, want) {
			r.Errorf("%s: listxattr on A %s: expected user.* names %s, got %s, %v", r.where(), r.pa(n), ccNames(want), ccNames(got), err)
		}
	}}
}

// --- the cases ---

func ccCases() []ccCase {
	const big = 30000 // several pages
	p1 := ccPattern(big, 1)
	inplace := bytes.Clone(p1)
	copy(inplace[0:], "HEAD")
	copy(inplace[5000:], ccPattern(100, 2))
	copy(inplace[big-300:], ccPattern(300, 2))
	appended := ccConcat(p1, ccPattern(7000, 3))
	shorter := ccPattern(3000, 4)
	small := []byte("a small file, kept inline: 50 bytes, version one.")
	smallNew := []byte("A SMALL FILE, REWRITTEN IN PLACE AND LONGER: version two!!")
	shrunk := p1[:100]
	grown := ccConcat(p1, make([]byte, 15000))
	over := ccPattern(9000, 6)
	created := ccPattern(5000, 7)
	inDir := ccPattern(1234, 8)
	linked := ccPattern(3000, 9)
	atime := time.Unix(1600000000, 123456789)
	mtime := time.Unix(1700000000, 987654321)
	const newTarget = "a/much/longer/new/target/of/the/link"

	// bigFile: a file of big bytes, cached on A.
	bigFile := func(r *ccRound) { r.mkFile("f", p1, 0o644); r.cacheFile("f") }
	// afterWrite: A must see f's new contents (want) by every path.
	afterWrite := func(want []byte) []ccCheck {
		n := fmt.Sprint(len(want))
		return []ccCheck{
			chkStat("f", like("f", "size", n).sameIno("f")),
			chkFstatOld("f", like("f", "size", n)),
			chkReadOld("f", want),
			chkRead("f", want),
		}
	}
	// dirWithX: a directory d holding a file x, cached on A.
	dirWithX := func(r *ccRound) {
		r.mkDir("d")
		r.mkFile("d/x", []byte("x"), 0o644)
		r.cacheDir("d")
		r.cacheFile("d/x")
	}
	return []ccCase{
		{
			name:  "write_inplace", // same size, new bytes at the start, middle and last page
			setup: bigFile,
			change: func(r *ccRound) {
				fd, err := unix.Open(r.pb("f"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
				r.must("open on B", r.pb("f"), err)
				defer unix.Close(fd)
				for _, off := range []int{0, 5000, big - 300} {
					_, err := unix.Pwrite(fd, inplace[off:off+300], int64(off))
					r.must(fmt.Sprintf("pwrite at %d on B", off), r.pb("f"), err)
				}
			},
			checks: afterWrite(inplace),
		},
		{
			name:  "write_append",
			setup: bigFile,
			change: func(r *ccRound) {
				f, err := os.OpenFile(r.pb("f"), os.O_WRONLY|os.O_APPEND, 0)
				r.must("open O_APPEND on B", r.pb("f"), err)
				_, err = f.Write(appended[big:])
				r.must("append on B", r.pb("f"), err)
				r.must("close on B", r.pb("f"), f.Close())
			},
			checks: afterWrite(appended),
		},
		{
			name:   "write_rewrite_shorter", // open(O_TRUNC) and write fewer bytes
			setup:  bigFile,
			change: func(r *ccRound) { r.must("rewrite on B", r.pb("f"), os.WriteFile(r.pb("f"), shorter, 0o644)) },
			checks: afterWrite(shorter),
		},
		{
			name:  "write_inline", // a small file: overwritten from offset 0, longer
			setup: func(r *ccRound) { r.mkFile("f", small, 0o644); r.cacheFile("f") },
			change: func(r *ccRound) {
				fd, err := unix.Open(r.pb("f"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
				r.must("open on B", r.pb("f"), err)
				defer unix.Close(fd)
				_, err = unix.Pwrite(fd, smallNew, 0)
				r.must("pwrite on B", r.pb("f"), err)
			},
			checks: afterWrite(smallNew),
		},
		{
			name:   "truncate_shrink",
			setup:  bigFile,
			change: func(r *ccRound) { r.must("truncate(100) on B", r.pb("f"), os.Truncate(r.pb("f"), 100)) },
			checks: afterWrite(shrunk),
		},
		{
			name:   "truncate_grow",
			setup:  bigFile,
			change: func(r *ccRound) { r.must("truncate on B", r.pb("f"), os.Truncate(r.pb("f"), int64(len(grown)))) },
			checks: afterWrite(grown),
		},
		{
			name:   "chmod",
			setup:  bigFile,
			change: func(r *ccRound) { r.must("chmod(0751) on B", r.pb("f"), unix.Chmod(r.pb("f"), 0o751)) },
			checks: []ccCheck{
				chkStat("f", like("f", "mode", "0100751")),
				chkFstatOld("f", like("f", "mode", "0100751")),
			},
		},
		{
			name:   "chown",
			setup:  bigFile,
			change: func(r *ccRound) { r.must("chown(65534, 65534) on B", r.pb("f"), unix.Lchown(r.pb("f"), 65534, 65534)) },
			checks: []ccCheck{
				chkStat("f", like("f", "uid", "65534", "gid", "65534")),
				chkFstatOld("f", like("f", "uid", "65534", "gid", "65534")),
			},
		},
		{
			name:   "utimes",
			setup:  bigFile,
			change: func(r *ccRound) { r.must("utimes on B", r.pb("f"), os.Chtimes(r.pb("f"), atime, mtime)) },
			checks: []ccCheck{
				chkStat("f", like("f", "atime", "1600000000.123456789", "mtime", "1700000000.987654321")),
				chkFstatOld("f", like("f", "atime", "1600000000.123456789", "mtime", "1700000000.987654321")),
			},
		},
		{
			name: "rename_over", // another file renamed over f: A sees the new inode
			setup: func(r *ccRound) {
				bigFile(r)
				r.cacheDir(".")
				r.cacheMissing("g")
			},
			change: func(r *ccRound) {
				r.must("create on B", r.pb("g"), os.WriteFile(r.pb("g"), over, 0o644))
				r.must("rename over f on B", r.pb("g"), os.Rename(r.pb("g"), r.pb("f")))
			},
			checks: []ccCheck{
				chkStat("f", like("f", "size", fmt.Sprint(len(over)), "nlink", "1").newIno("f")),
				chkRead("f", over),
				chkReadOld("f", p1), // the old inode, open on A
				chkFstatOld("f", exact("nlink", "0", "size", fmt.Sprint(big))),
				chkGone("g"),
				chkReaddir(".", "f"),
				chkReaddirOld(".", "f"),
			},
		},
		{
			name:   "unlink",
			setup:  func(r *ccRound) { bigFile(r); r.cacheDir(".") },
			change: func(r *ccRound) { r.must("unlink on B", r.pb("f"), os.Remove(r.pb("f"))) },
			checks: []ccCheck{
				chkGone("f"),
				chkOpenGone("f"),
				chkReadOld("f", p1),
				chkFstatOld("f", exact("nlink", "0", "size", fmt.Sprint(big))),
				chkReaddir("."),
				chkReaddirOld("."),
				chkStat(".", like(".")),
			},
		},
		{
			name:   "create_negative", // a name A looked up and did not find
			setup:  func(r *ccRound) { r.cacheDir("."); r.cacheMissing("f") },
			change: func(r *ccRound) { r.must("create on B", r.pb("f"), os.WriteFile(r.pb("f"), created, 0o644)) },
			checks: []ccCheck{
				chkStat("f", like("f", "size", fmt.Sprint(len(created)))),
				chkRead("f", created),
				chkReaddir(".", "f"),
				chkReaddirOld(".", "f"),
				chkStat(".", like(".", "nlink", "2")),
			},
		},
		{
			name:   "mkdir_in_listed",
			setup:  func(r *ccRound) { dirWithX(r); r.cacheMissing("d/sub") },
			change: func(r *ccRound) { r.must("mkdir on B", r.pb("d/sub"), os.Mkdir(r.pb("d/sub"), 0o755)) },
			checks: []ccCheck{
				chkReaddir("d", "sub", "x"),
				chkReaddirOld("d", "sub", "x"),
				chkStat("d", like("d", "nlink", "3")),
				chkStat("d/sub", like("d/sub", "nlink", "2")),
				chkReaddir("d/sub"),
			},
		},
		{
			name:   "create_in_listed",
			setup:  func(r *ccRound) { dirWithX(r); r.cacheMissing("d/new") },
			change: func(r *ccRound) { r.must("create on B", r.pb("d/new"), os.WriteFile(r.pb("d/new"), inDir, 0o644)) },
			checks: []ccCheck{
				chkReaddir("d", "new", "x"),
				chkReaddirOld("d", "new", "x"),
				chkStat("d", like("d", "nlink", "2")),
				chkStat("d/new", like("d/new", "size", fmt.Sprint(len(inDir)))),
				chkRead("d/new", inDir),
			},
		},
		{
			// A name made on B, then the directory's times set back as
			// they were (tar, rsync -a): the listing A's kernel caches is
			// dropped with the lock, not on a change of the mtime.
			name:  "create_in_listed_times_kept",
			setup: dirWithX,
			change: func(r *ccRound) {
				kept := r.timesOnB("d")
				r.must("create on B", r.pb("d/new"), os.WriteFile(r.pb("d/new"), inDir, 0o644))
				r.must("utimes on B", r.pb("d"), unix.UtimesNano(r.pb("d"), kept))
			},
			checks: []ccCheck{
				chkReaddir("d", "new", "x"),
				chkReaddirOld("d", "new", "x"),
				chkStat("d", like("d", "nlink", "2")),
			},
		},
		{
			// The same for a file's pages kept across opens: bytes
			// rewritten in place on B, the times set back, so neither the
			// size nor the mtime A's kernel compares has changed.
			name:  "write_inplace_times_kept",
			setup: bigFile,
			change: func(r *ccRound) {
				kept := r.timesOnB("f")
				fd, err := unix.Open(r.pb("f"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
				r.must("open on B", r.pb("f"), err)
				for _, off := range []int{0, 5000, big - 300} {
					_, err := unix.Pwrite(fd, inplace[off:off+300], int64(off))
					r.must(fmt.Sprintf("pwrite at %d on B", off), r.pb("f"), err)
				}
				r.must("close on B", r.pb("f"), unix.Close(fd))
				r.must("utimes on B", r.pb("f"), unix.UtimesNano(r.pb("f"), kept))
			},
			// Not the descriptor A kept open: within an open the kernel
			// keeps pages until the background invalidation drops them
			// (docs/caching.md).
			checks: []ccCheck{
				chkStat("f", like("f", "size", fmt.Sprint(big)).sameIno("f")),
				chkRead("f", inplace),
			},
		},
		{
			name: "rmdir",
			setup: func(r *ccRound) {
				r.mkDir("d")
				r.mkDir("d/sub")
				r.mkFile("d/x", []byte("x"), 0o644)
				r.cacheDir("d")
				r.cacheDir("d/sub")
			},
			change: func(r *ccRound) { r.must("rmdir on B", r.pb("d/sub"), os.Remove(r.pb("d/sub"))) },
			checks: []ccCheck{
				chkGone("d/sub"),
				chkOpenGone("d/sub"),
				chkReaddir("d", "x"),
				chkReaddirOld("d", "x"),
				chkStat("d", like("d", "nlink", "2")),
			},
		},
		{
			name: "link", // a hard link made on B: nlink on A
			setup: func(r *ccRound) {
				r.mkFile("f", linked, 0o644)
				r.cacheFile("f")
				r.cacheDir(".")
				r.cacheMissing("l")
			},
			change: func(r *ccRound) { r.must("link on B", r.pb("l"), os.Link(r.pb("f"), r.pb("l"))) },
			checks: []ccCheck{
				chkStat("f", like("f", "nlink", "2").sameIno("f")),
				chkFstatOld("f", like("f", "nlink", "2")),
				chkStat("l", like("l", "nlink", "2").sameIno("f")),
				chkRead("l", linked),
				chkReaddir(".", "f", "l"),
			},
		},
		{
			name: "unlink_link", // one of two links removed on B
			setup: func(r *ccRound) {
				r.mkFile("f", linked, 0o644)
				r.must("link", r.mk, os.Link(filepath.Join(r.mk, "f"), filepath.Join(r.mk, "l")))
				r.cacheFile("f")
				r.cacheFile("l")
				r.cacheDir(".")
			},
			change: func(r *ccRound) { r.must("unlink on B", r.pb("l"), os.Remove(r.pb("l"))) },
			checks: []ccCheck{
				chkStat("f", like("f", "nlink", "1").sameIno("f")),
				chkFstatOld("f", like("f", "nlink", "1")),
				chkGone("l"),
				chkReaddir(".", "f"),
			},
		},
		{
			name:   "symlink_create",
			setup:  func(r *ccRound) { r.cacheDir("."); r.cacheMissing("s") },
			change: func(r *ccRound) { r.must("symlink on B", r.pb("s"), os.Symlink("target/one", r.pb("s"))) },
			checks: []ccCheck{
				chkReadlink("s", "target/one"),
				chkStat("s", like("s", "mode", "0120777", "size", "10")),
				chkReaddir(".", "s"),
			},
		},
		{
			name:  "symlink_replace", // a new symlink renamed over one A has read
			setup: func(r *ccRound) { r.mkSymlink("old", "s"); r.cacheLink("s"); r.cacheDir(".") },
			change: func(r *ccRound) {
				r.must("symlink on B", r.pb("s.tmp"), os.Symlink(newTarget, r.pb("s.tmp")))
				r.must("rename over on B", r.pb("s"), os.Rename(r.pb("s.tmp"), r.pb("s")))
			},
			checks: []ccCheck{
				chkReadlink("s", newTarget),
				chkStat("s", like("s", "size", fmt.Sprint(len(newTarget))).newIno("s")),
				chkReaddir(".", "s"),
			},
		},
		{
			name: "xattr_set", // same size, another size, a new name
			setup: func(r *ccRound) {
				r.mkFile("f", []byte("x"), 0o644)
				r.mkXattr("f", "user.k", "v1")
				r.mkXattr("f", "user.k2", "short")
				r.cacheFile("f")
				r.cacheXattrs("f", "user.k", "user.k2", "user.new")
			},
			change: func(r *ccRound) {
				for _, kv := range [][2]string{{"user.k", "v2"}, {"user.k2", "a much longer value"}, {"user.new", "n"}} {
					r.must("setxattr "+kv[0]+" on B", r.pb("f"), unix.Setxattr(r.pb("f"), kv[0], []byte(kv[1]), 0))
				}
			},
			checks: []ccCheck{
				chkXattr("f", "user.k", []byte("v2")),
				chkXattr("f", "user.k2", []byte("a much longer value")),
				chkXattr("f", "user.new", []byte("n")),
				chkListxattr("f", "user.k", "user.k2", "user.new"),
				chkStat("f", like("f")),
			},
		},
		{
			name: "xattr_remove",
			setup: func(r *ccRound) {
				r.mkFile("f", []byte("x"), 0o644)
				r.mkXattr("f", "user.k", "v1")
				r.mkXattr("f", "user.k2", "v2")
				r.cacheFile("f")
				r.cacheXattrs("f", "user.k", "user.k2")
			},
			change: func(r *ccRound) {
				r.must("removexattr user.k on B", r.pb("f"), unix.Removexattr(r.pb("f"), "user.k"))
			},
			checks: []ccCheck{
				chkXattr("f", "user.k", nil),
				chkListxattr("f", "user.k2"),
				chkXattr("f", "user.k2", []byte("v2")),
				chkStat("f", like("f")),
			},
		},
		{
			name:   "rename_file", // to a name A looked up and did not find
			setup:  func(r *ccRound) { bigFile(r); r.cacheDir("."); r.cacheMissing("g") },
			change: func(r *ccRound) { r.must("rename on B", r.pb("f"), os.Rename(r.pb("f"), r.pb("g"))) },
			checks: []ccCheck{
				chkGone("f"),
				chkStat("g", like("g").sameIno("f")),
				chkRead("g", p1),
				chkReaddir(".", "g"),
				chkReaddirOld(".", "g"),
			},
		},
		{
			name: "rename_dir", // a directory A has cached, with its contents
			setup: func(r *ccRound) {
				r.mkDir("d1")
				r.mkFile("d1/f", p1, 0o644)
				r.mkDir("d1/sub")
				r.cacheDir(".")
				r.cacheDir("d1")
				r.cacheFile("d1/f")
				r.cacheDir("d1/sub")
				r.cacheMissing("d2")
			},
			change: func(r *ccRound) { r.must("rename on B", r.pb("d1"), os.Rename(r.pb("d1"), r.pb("d2"))) },
			checks: []ccCheck{
				chkGone("d1"),
				chkGone("d1/f"),
				chkOpenGone("d1/sub"),
				chkStat("d2", like("d2", "nlink", "3").sameIno("d1")),
				chkStat("d2/f", like("d2/f").sameIno("d1/f")),
				chkRead("d2/f", p1),
				chkReaddir(".", "d2"),
				chkReaddirOld(".", "d2"),
				chkReaddir("d2", "f", "sub"),
			},
		},
		{
			name: "rename_dir_across", // into another directory A has listed
			setup: func(r *ccRound) {
				r.mkDir("d1")
				r.mkFile("d1/f", p1, 0o644)
				r.mkDir("p")
				r.cacheDir(".")
				r.cacheDir("p")
				r.cacheDir("d1")
				r.cacheFile("d1/f")
				r.cacheMissing("p/d1")
			},
			change: func(r *ccRound) { r.must("rename on B", r.pb("d1"), os.Rename(r.pb("d1"), r.pb("p/d1"))) },
			checks: []ccCheck{
				chkGone("d1"),
				chkGone("d1/f"),
				chkStat("p/d1", like("p/d1").sameIno("d1")),
				chkRead("p/d1/f", p1),
				chkReaddir("p", "d1"),
				chkReaddirOld("p", "d1"),
				chkReaddir(".", "p"),
				chkStat("p", like("p", "nlink", "3")),
				chkStat(".", like(".", "nlink", "3")),
			},
		},
		{
			name:  "dir_attrs", // chmod, chown and utimes of a directory A walks through
			setup: dirWithX,
			change: func(r *ccRound) {
				r.must("chmod(0711) on B", r.pb("d"), unix.Chmod(r.pb("d"), 0o711))
				r.must("chown(65534, 65534) on B", r.pb("d"), unix.Lchown(r.pb("d"), 65534, 65534))
				r.must("utimes on B", r.pb("d"), os.Chtimes(r.pb("d"), atime, mtime))
			},
			checks: []ccCheck{
				chkStat("d", like("d", "mode", "040711", "uid", "65534", "gid", "65534",
					"atime", "1600000000.123456789", "mtime", "1700000000.987654321")),
				chkStat("d/x", like("d/x")),
				chkReaddir("d", "x"),
			},
		},
	}
}

// ccPingPong: n times, the reader side caches a file and a directory, the
// other side changes both, and the reader must see exactly the new counter
// at once; the sides swap every iteration.
func ccPingPong(t *testing.T, a, b string, n int) {
	side := [2]string{filepath.Join(a, "cc-pingpong"), filepath.Join(b, "cc-pingpong")}
	names := [2]string{"A", "B"}
	if err := os.Mkdir(side[0], 0o755); err != nil {
		t.Fatalf("pingpong: mkdir on A %s: %v", side[0], err)
	}
	if err := os.Mkdir(filepath.Join(side[0], "d"), 0o755); err != nil {
		t.Fatalf("pingpong: mkdir on A: %v", err)
	}
	f := [2]string{filepath.Join(side[0], "counter"), filepath.Join(side[1], "counter")}
	d := [2]string{filepath.Join(side[0], "d"), filepath.Join(side[1], "d")}
	if err := os.WriteFile(f[0], []byte("start"), 0o644); err != nil {
		t.Fatalf("pingpong: create on A %s: %v", f[0], err)
	}
	var old [2]int // a descriptor on each side, open throughout
	for s := range 2 {
		fd, err := unix.Open(f[s], unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatalf("pingpong: open on %s %s: %v", names[s], f[s], err)
		}
		old[s] = fd
		defer unix.Close(fd)
	}
	content := func(i int) []byte {
		reps := 1 + (i/2)%5 // iterations 2k and 2k+1 write the same size
		if (i/6)%2 == 1 {
			reps *= 400 // past inline data, several pages
		}
		return bytes.Repeat(fmt.Appendf(nil, "counter %04d;", i), reps)
	}
	start := time.Now()
	for i := range n {
		w := 1 - i%2 // B changes on even iterations, A on odd ones
		rd := 1 - w
		where := fmt.Sprintf("pingpong iteration %d (%s changes, %s checks)", i, names[w], names[rd])
		// The reader caches (stats last: reads mark the cached atime stale).
		if _, err := os.ReadFile(f[rd]); err != nil {
			t.Fatalf("%s: cache: read on %s %s: %v", where, names[rd], f[rd], err)
		}
		if _, err := ccPreadAll(old[rd]); err != nil {
			t.Fatalf("%s: cache: read old fd on %s %s: %v", where, names[rd], f[rd], err)
		}
		if _, err := os.ReadDir(d[rd]); err != nil {
			t.Fatalf("%s: cache: readdir on %s %s: %v", where, names[rd], d[rd], err)
		}
		var st unix.Stat_t
		for _, p := range []string{f[rd], d[rd], f[rd]} {
			if err := unix.Lstat(p, &st); err != nil {
				t.Fatalf("%s: cache: stat on %s %s: %v", where, names[rd], p, err)
			}
		}
		// The writer changes the file and the directory.
		want := content(i)
		if i%4 < 2 {
			if err := os.WriteFile(f[w], want, 0o644); err != nil {
				t.Fatalf("%s: rewrite on %s %s: %v", where, names[w], f[w], err)
			}
		} else { // in place, then cut to size
			fd, err := unix.Open(f[w], unix.O_WRONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatalf("%s: open on %s %s: %v", where, names[w], f[w], err)
			}
			_, err = unix.Pwrite(fd, want, 0)
			if err == nil {
				err = unix.Ftruncate(fd, int64(len(want)))
			}
			unix.Close(fd)
			if err != nil {
				t.Fatalf("%s: pwrite+ftruncate on %s %s: %v", where, names[w], f[w], err)
			}
		}
		entry := fmt.Sprintf("e%d", i)
		if err := os.WriteFile(filepath.Join(d[w], entry), nil, 0o644); err != nil {
			t.Fatalf("%s: create on %s: %v", where, names[w], err)
		}
		if i > 0 {
			if err := os.Remove(filepath.Join(d[w], fmt.Sprintf("e%d", i-1))); err != nil {
				t.Fatalf("%s: unlink on %s: %v", where, names[w], err)
			}
		}
		// The reader checks at once; the first call rotates.
		var gotSt unix.Stat_t
		var statErr error
		checks := []func(){
			func() { statErr = unix.Lstat(f[rd], &gotSt) }, // compared below
			func() {
				if got, err := ccPreadAll(old[rd]); err != nil || !bytes.Equal(got, want) {
					t.Errorf("%s: read on %s through the fd opened before the change, %s: expected %s, %s, %v", where, names[rd], f[rd], ccShow(want), ccDiff(got, want), err)
				}
			},
			func() {
				if got, err := os.ReadFile(f[rd]); err != nil || !bytes.Equal(got, want) {
					t.Errorf("%s: read (new open) on %s %s: expected %s, %s, %v", where, names[rd], f[rd], ccShow(want), ccDiff(got, want), err)
				}
			},
			func() {
				ents, err := os.ReadDir(d[rd])
				var got []string
				for _, e := range ents {
					got = append(got, e.Name())
				}
				if err != nil || !slices.Equal(got, []string{entry}) {
					t.Errorf("%s: readdir on %s %s: expected [%s], got %s, %v", where, names[rd], d[rd], entry, ccNames(got), err)
				}
			},
		}
		for j := range checks {
			checks[(i+j)%len(checks)]()
		}
		var onW unix.Stat_t
		if err := unix.Lstat(f[w], &onW); err != nil {
			t.Fatalf("%s: stat on %s %s: %v", where, names[w], f[w], err)
		}
		if statErr != nil || gotSt.Size != int64(len(want)) || gotSt.Mtim != onW.Mtim || gotSt.Ino != onW.Ino {
			t.Errorf("%s: stat on %s %s: expected size %d, mtime %d.%09d, ino %d (as %s sees it), got size %d, mtime %d.%09d, ino %d, %v",
				where, names[rd], f[rd], len(want), onW.Mtim.Sec, onW.Mtim.Nsec, onW.Ino, names[w], gotSt.Size, gotSt.Mtim.Sec, gotSt.Mtim.Nsec, gotSt.Ino, statErr)
		}
		if t.Failed() && i >= 3 {
			t.Fatalf("pingpong: stopping after iteration %d", i)
		}
	}
	t.Logf("pingpong: %d iterations in %v", n, time.Since(start).Round(time.Millisecond))
}
