package posixtest

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// cases is the suite, in order. Names are stable: callers skip them by name.
var cases = []testCase{
	{"open_creat_excl", caseOpenCreatExcl},
	{"open_trunc", caseOpenTrunc},
	{"open_append", caseOpenAppend},
	{"open_directory", caseOpenDirectory},
	{"read_write", caseReadWrite},
	{"sparse", caseSparse},
	{"truncate", caseTruncate},
	{"fallocate", caseFallocate},
	{"mkdir", caseMkdir},
	{"rmdir", caseRmdir},
	{"unlink", caseUnlink},
	{"rename_replace_file", caseRenameReplaceFile},
	{"rename_replace_empty_dir", caseRenameReplaceEmptyDir},
	{"rename_nonempty_target", caseRenameNonEmptyTarget},
	{"rename_file_onto_dir", caseRenameFileOntoDir},
	{"rename_dir_onto_file", caseRenameDirOntoFile},
	{"rename_into_own_subdir", caseRenameIntoOwnSubdir},
	{"rename_across_dirs", caseRenameAcrossDirs},
	{"rename_onto_itself", caseRenameOntoItself},
	{"rename_atomic", caseRenameAtomic},
	{"rename_flags", caseRenameFlags},
	{"link", caseLink},
	{"symlink", caseSymlink},
	{"symlink_loop", caseSymlinkLoop},
	{"chmod", caseChmod},
	{"chown", caseChown},
	{"permissions", casePermissions},
	{"utimens", caseUtimens},
	{"mtime_updates", caseMtimeUpdates},
	{"stat", caseStat},
	{"dir_nlink", caseDirNlink},
	{"mkfifo", caseMkfifo},
	{"readdir_1000", caseReaddir1000},
	{"readdir_concurrent", caseReaddirConcurrent},
	{"name_too_long", caseNameTooLong},
	{"long_path", caseLongPath},
	{"xattr", caseXattr},
	{"statfs", caseStatfs},
	{"fsync", caseFsync},
	{"flock", caseFlock},
	{"fcntl_lock", caseFcntlLock},
	{"ofd_lock", caseOFDLock},
	{"unlinked_open", caseUnlinkedOpen},
	{"open_after_rename", caseOpenAfterRename},
}

func caseOpenCreatExcl(e *env) {
	f := e.p("f")
	fd, err := unix.Open(f, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o640)
	e.ok("open(O_WRONLY|O_CREAT|O_EXCL)", f, err)
	e.pwriteAll(fd, f, []byte("first"), 0)
	unix.Close(fd)
	if st := e.stat(f); st.Mode&0o7777 != 0o640&^e.umask || st.Mode&unix.S_IFMT != unix.S_IFREG {
		e.Errorf("stat %s: mode: expected regular file %#o, got %#o", f, 0o640&^e.umask, st.Mode)
	}
	_, err = unix.Open(f, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
	e.wantErr("open(O_WRONLY|O_CREAT|O_EXCL) of an existing file", f, err, unix.EEXIST)
	e.wantData("read after failed O_EXCL", f, e.readFile(f), []byte("first"))

	// O_CREAT without O_EXCL opens the existing file untouched.
	fd = e.open(f, unix.O_WRONLY|unix.O_CREAT, 0o600)
	unix.Close(fd)
	e.wantData("read after O_CREAT of an existing file", f, e.readFile(f), []byte("first"))

	d := e.p("dir")
	e.mkdir(d)
	_, err = unix.Open(d, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
	e.wantErr("open(O_WRONLY|O_CREAT|O_EXCL) of a directory", d, err, unix.EEXIST)
	_, err = unix.Open(d, unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	e.wantErr("open(O_WRONLY|O_CREAT) of a directory", d, err, unix.EISDIR)

	// O_EXCL does not follow a symlink, even a dangling one.
	l := e.p("dangling")
	e.symlink("target", l)
	_, err = unix.Open(l, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
	e.wantErr("open(O_WRONLY|O_CREAT|O_EXCL) of a dangling symlink", l, err, unix.EEXIST)
	e.wantGone(e.p("target"))

	m := e.p("missing")
	_, err = unix.Open(m, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	e.wantErr("open(O_RDONLY) of a missing file", m, err, unix.ENOENT)
	m = e.p("nodir", "f")
	_, err = unix.Open(m, unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	e.wantErr("open(O_WRONLY|O_CREAT) in a missing directory", m, err, unix.ENOENT)
}

func caseOpenTrunc(e *env) {
	f := e.p("f")
	e.create(f, []byte("hello, world"))
	old := []unix.Timespec{{Sec: 1e9}, {Sec: 1e9}}
	e.ok("utimensat", f, unix.UtimesNanoAt(unix.AT_FDCWD, f, old, 0))
	before := time.Now()
	fd := e.open(f, unix.O_WRONLY|unix.O_TRUNC, 0)
	st := e.fstat(fd, f)
	unix.Close(fd)
	if st.Size != 0 {
		e.Errorf("fstat after open(O_TRUNC) %s: size: expected 0, got %d", f, st.Size)
	}
	if !nearNow(st.Mtim, before, time.Now()) {
		e.Errorf("fstat after open(O_TRUNC) %s: mtime %d not updated to now", f, tsNano(st.Mtim))
	}
	e.wantSize(f, 0)
	e.wantData("read after O_TRUNC", f, e.readFile(f), nil)

	// O_TRUNC on a file with data and an O_RDWR descriptor: new writes start at 0.
	e.create(f, pattern(10000, 1))
	fd = e.open(f, unix.O_RDWR|unix.O_TRUNC, 0)
	_, err := unix.Write(fd, []byte("abc"))
	e.ok("write", f, err)
	unix.Close(fd)
	e.wantData("read after O_TRUNC and write", f, e.readFile(f), []byte("abc"))
}

func caseOpenAppend(e *env) {
	f := e.p("f")
	e.create(f, []byte("abc"))
	fd := e.open(f, unix.O_WRONLY|unix.O_APPEND, 0)
	_, err := unix.Seek(fd, 0, 0)
	e.ok("lseek", f, err)
	_, err = unix.Write(fd, []byte("def"))
	e.ok("write(O_APPEND)", f, err)
	off, err := unix.Seek(fd, 0, 1)
	e.ok("lseek(SEEK_CUR)", f, err)
	unix.Close(fd)
	if off != 6 {
		e.Errorf("lseek(SEEK_CUR) after O_APPEND write %s: expected offset 6, got %d", f, off)
	}
	e.wantData("read after O_APPEND write", f, e.readFile(f), []byte("abcdef"))

	// Concurrent appenders: four descriptions, one of them shared by two
	// goroutines. Every fixed-size record must land whole, exactly once.
	g := e.p("g")
	e.create(g, nil)
	const recLen, perWriter = 64, 200
	fds := make([]int, 4)
	for i := range fds {
		fds[i] = e.open(g, unix.O_WRONLY|unix.O_APPEND, 0)
		defer unix.Close(fds[i])
	}
	writerFD := []int{fds[0], fds[1], fds[2], fds[3], fds[3]}
	var wg sync.WaitGroup
	errs := make(chan error, len(writerFD))
	for w, fd := range writerFD {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				rec := fmt.Sprintf("w%d-%05d-", w, i)
				rec += strings.Repeat("x", recLen-1-len(rec)) + "\n"
				n, err := unix.Write(fd, []byte(rec))
				if err != nil || n != recLen {
					errs <- fmt.Errorf("write(O_APPEND) %s: n=%d, %s", g, n, errnoString(err))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.Error(err)
	}
	data := e.readFile(g)
	if len(data) != recLen*perWriter*len(writerFD) {
		e.Errorf("concurrent O_APPEND %s: size: expected %d, got %d", g, recLen*perWriter*len(writerFD), len(data))
	}
	seen := map[string]int{}
	for len(data) >= recLen {
		rec := string(data[:recLen])
		data = data[recLen:]
		if !strings.HasSuffix(rec, "x\n") || strings.Count(rec, "\n") != 1 {
			e.Errorf("concurrent O_APPEND %s: torn record %q", g, rec)
			continue
		}
		seen[rec[:strings.Index(rec, "-x")]]++
	}
	for w := range writerFD {
		for i := range perWriter {
			k := fmt.Sprintf("w%d-%05d", w, i)
			if seen[k] != 1 {
				e.Errorf("concurrent O_APPEND %s: record %s present %d times, expected once", g, k, seen[k])
			}
		}
	}
}

func caseOpenDirectory(e *env) {
	f, d := e.p("f"), e.p("d")
	e.create(f, []byte("x"))
	e.mkdir(d)
	_, err := unix.Open(f, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	e.wantErr("open(O_RDONLY|O_DIRECTORY) of a file", f, err, unix.ENOTDIR)
	fd := e.open(d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	unix.Close(fd)
	_, err = unix.Open(d, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	e.wantErr("open(O_WRONLY) of a directory", d, err, unix.EISDIR)
	_, err = unix.Open(d, unix.O_RDWR|unix.O_CLOEXEC, 0)
	e.wantErr("open(O_RDWR) of a directory", d, err, unix.EISDIR)
	_, err = unix.Open(f+"/", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	e.wantErr("open(O_RDONLY) of a file with a trailing slash", f+"/", err, unix.ENOTDIR)
	_, err = unix.Open(f+"/x", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	e.wantErr("open(O_RDONLY) through a file", f+"/x", err, unix.ENOTDIR)
	// O_DIRECTORY through a symlink to a directory works; to a file it does not.
	e.symlink("d", e.p("ld"))
	fd = e.open(e.p("ld"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	unix.Close(fd)
	e.symlink("f", e.p("lf"))
	_, err = unix.Open(e.p("lf"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	e.wantErr("open(O_RDONLY|O_DIRECTORY) of a symlink to a file", e.p("lf"), err, unix.ENOTDIR)
}

func caseReadWrite(e *env) {
	f := e.p("f")
	data := pattern(1<<20+3, 2)
	fd := e.open(f, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o644)
	defer unix.Close(fd)
	n, err := unix.Write(fd, data)
	e.ok("write(1MiB+3)", f, err)
	if n != len(data) {
		e.Fatalf("write %s: expected %d bytes written, got %d", f, len(data), n)
	}
	if st := e.fstat(fd, f); st.Size != int64(len(data)) {
		e.Errorf("fstat %s: size: expected %d, got %d", f, len(data), st.Size)
	}
	// Reads at unaligned offsets and lengths.
	for _, r := range [][2]int{{0, 1}, {1, 4095}, {4095, 2}, {5000, 100}, {65535, 70000}, {len(data) - 3, 3}} {
		got := e.preadFull(fd, f, r[1], int64(r[0]))
		e.wantData(fmt.Sprintf("pread(off=%d,len=%d)", r[0], r[1]), f, got, data[r[0]:r[0]+r[1]])
	}
	// At and past EOF.
	if got := e.preadFull(fd, f, 100, int64(len(data))); len(got) != 0 {
		e.Errorf("pread at EOF %s: expected 0 bytes, got %d", f, len(got))
	}
	if got := e.preadFull(fd, f, 100, int64(len(data))+1000); len(got) != 0 {
		e.Errorf("pread past EOF %s: expected 0 bytes, got %d", f, len(got))
	}
	got := e.preadFull(fd, f, 100, int64(len(data)-10))
	e.wantData("pread across EOF", f, got, data[len(data)-10:])

	// pwrite in the middle changes only its range; neither pread nor pwrite
	// moves the file offset.
	cur, err := unix.Seek(fd, 12345, 0)
	e.ok("lseek", f, err)
	e.pwriteAll(fd, f, []byte("XYZ"), 3)
	copy(data[3:], "XYZ")
	e.pwriteAll(fd, f, []byte("tail"), int64(len(data)-2))
	data = append(data[:len(data)-2], "tail"...)
	if now, _ := unix.Seek(fd, 0, 1); now != cur {
		e.Errorf("lseek(SEEK_CUR) %s after pwrite: expected %d, got %d", f, cur, now)
	}
	// write and read at the file offset.
	_, err = unix.Write(fd, []byte("mid"))
	e.ok("write at offset 12345", f, err)
	copy(data[12345:], "mid")
	buf := make([]byte, 5)
	_, err = unix.Seek(fd, 12344, 0)
	e.ok("lseek", f, err)
	n, err = unix.Read(fd, buf)
	e.ok("read", f, err)
	e.wantData("read at offset 12344", f, buf[:n], data[12344:12349])
	end, err := unix.Seek(fd, 0, 2)
	e.ok("lseek(SEEK_END)", f, err)
	if end != int64(len(data)) {
		e.Errorf("lseek(SEEK_END) %s: expected %d, got %d", f, len(data), end)
	}
	_, err = unix.Seek(fd, -1, 0)
	e.wantErr("lseek(-1, SEEK_SET)", f, err, unix.EINVAL)
	e.wantData("read whole file", f, e.readFile(f), data)

	// Access mode is enforced on the descriptor.
	ro := e.open(f, unix.O_RDONLY, 0)
	_, err = unix.Write(ro, []byte("x"))
	e.wantErr("write on O_RDONLY descriptor", f, err, unix.EBADF)
	unix.Close(ro)
	wo := e.open(f, unix.O_WRONLY, 0)
	_, err = unix.Read(wo, buf)
	e.wantErr("read on O_WRONLY descriptor", f, err, unix.EBADF)
	unix.Close(wo)
	// A directory cannot be read as a file.
	dfd := e.open(e.dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	_, err = unix.Read(dfd, buf)
	e.wantErr("read on a directory", e.dir, err, unix.EISDIR)
	unix.Close(dfd)
}

func caseSparse(e *env) {
	f := e.p("f")
	fd := e.open(f, unix.O_RDWR|unix.O_CREAT, 0o644)
	defer unix.Close(fd)
	_, err := unix.Seek(fd, 1<<20, 0)
	e.ok("lseek(1MiB)", f, err)
	_, err = unix.Write(fd, []byte("tail"))
	e.ok("write after seek past EOF", f, err)
	e.wantSize(f, 1<<20+4)
	e.wantZeros("pread of hole", f, e.preadFull(fd, f, 1<<20, 0), 0)
	e.wantData("pread after hole", f, e.preadFull(fd, f, 10, 1<<20), []byte("tail"))

	// A far hole (1 GiB) and a write in the middle of a hole.
	const far = 1 << 30
	e.pwriteAll(fd, f, []byte("far"), far)
	e.wantSize(f, far+3)
	e.pwriteAll(fd, f, []byte("island"), far/2+4093)
	e.wantZeros("pread before island", f, e.preadFull(fd, f, 4093, far/2), far/2)
	e.wantData("pread island", f, e.preadFull(fd, f, 6, far/2+4093), []byte("island"))
	e.wantZeros("pread after island", f, e.preadFull(fd, f, 8192, far/2+4099), far/2+4099)
	e.wantZeros("pread of far hole", f, e.preadFull(fd, f, 4096, far-4096), far-4096)
	e.wantData("pread far end", f, e.preadFull(fd, f, 100, far), []byte("far"))
	e.ok("fsync", f, unix.Fsync(fd))
	st := e.fstat(fd, f)
	if st.Blocks*512 >= far {
		e.Logf("note: %s: %d bytes allocated for a %d-byte sparse file (holes are not sparse)", f, st.Blocks*512, st.Size)
	}
}

func caseTruncate(e *env) {
	f := e.p("f")
	data := bytes.Repeat([]byte{0xAA}, 8192)
	e.create(f, data)
	fd := e.open(f, unix.O_RDWR, 0)
	defer unix.Close(fd)
	e.ok("ftruncate(100)", f, unix.Ftruncate(fd, 100))
	e.wantSize(f, 100)
	e.wantData("pread after truncate down", f, e.preadFull(fd, f, 8192, 0), data[:100])
	e.ok("ftruncate(8192)", f, unix.Ftruncate(fd, 8192))
	e.wantSize(f, 8192)
	got := e.preadFull(fd, f, 8192, 0)
	e.wantData("pread kept prefix", f, got[:100], data[:100])
	e.wantZeros("pread of re-extended range", f, got[100:], 100)

	// Truncating down inside a page must zero the page's tail when it grows again.
	e.pwriteAll(fd, f, data, 0)
	e.ok("truncate(5000)", f, unix.Truncate(f, 5000))
	e.wantSize(f, 5000)
	e.ok("truncate(20000)", f, unix.Truncate(f, 20000))
	got = e.preadFull(fd, f, 20000, 0)
	e.wantData("pread kept prefix", f, got[:5000], data[:5000])
	e.wantZeros("pread of re-extended range", f, got[5000:], 5000)

	// Through a fresh descriptor, truncate to 0 then up.
	e.ok("truncate(0)", f, unix.Truncate(f, 0))
	e.wantData("read after truncate(0)", f, e.readFile(f), nil)
	e.ok("truncate(1MiB)", f, unix.Truncate(f, 1<<20))
	e.wantZeros("read after truncate up from 0", f, e.readFile(f), 0)
	e.wantSize(f, 1<<20)

	e.wantErr("truncate(-1)", f, unix.Truncate(f, -1), unix.EINVAL)
	e.wantErr("truncate of a missing file", e.p("missing"), unix.Truncate(e.p("missing"), 0), unix.ENOENT)
	e.wantErr("truncate of a directory", e.dir, unix.Truncate(e.dir, 0), unix.EISDIR)
	ro := e.open(f, unix.O_RDONLY, 0)
	e.wantErr("ftruncate on O_RDONLY descriptor", f, unix.Ftruncate(ro, 0), unix.EINVAL, unix.EBADF)
	unix.Close(ro)
}

func caseFallocate(e *env) {
	f := e.p("f")
	e.create(f, []byte("0123456789"))
	fd := e.open(f, unix.O_RDWR, 0)
	defer unix.Close(fd)
	err := unix.Fallocate(fd, 0, 0, 1<<20)
	if errnoOf(err) == unix.EOPNOTSUPP || errnoOf(err) == unix.ENOSYS {
		e.Skipf("fallocate %s: not supported (%s)", f, errnoString(err))
	}
	e.ok("fallocate(mode=0, 0, 1MiB)", f, err)
	e.wantSize(f, 1<<20)
	got := e.preadFull(fd, f, 1<<20, 0)
	e.wantData("pread after fallocate", f, got[:10], []byte("0123456789"))
	e.wantZeros("pread of fallocated range", f, got[10:], 10)

	e.ok("fallocate(KEEP_SIZE, 1MiB, 1MiB)", f, unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, 1<<20, 1<<20))
	e.wantSize(f, 1<<20)
	e.ok("fallocate(mode=0, 100, 10) inside the file", f, unix.Fallocate(fd, 0, 100, 10))
	e.wantSize(f, 1<<20)
	e.wantErr("fallocate(len=0)", f, unix.Fallocate(fd, 0, 0, 0), unix.EINVAL)
	e.wantErr("fallocate(off=-1)", f, unix.Fallocate(fd, 0, -1, 10), unix.EINVAL)
	ro := e.open(f, unix.O_RDONLY, 0)
	e.wantErr("fallocate on O_RDONLY descriptor", f, unix.Fallocate(ro, 0, 0, 10), unix.EBADF)
	unix.Close(ro)

	// Punching a hole zeroes the range and keeps the size (optional).
	e.pwriteAll(fd, f, pattern(8192, 3), 0)
	err = unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 10, 5000)
	if errnoOf(err) == unix.EOPNOTSUPP {
		e.Logf("fallocate(PUNCH_HOLE) %s: not supported, not checked", f)
		return
	}
	e.ok("fallocate(PUNCH_HOLE|KEEP_SIZE, 10, 5000)", f, err)
	e.wantSize(f, 1<<20)
	got = e.preadFull(fd, f, 8192, 0)
	want := pattern(8192, 3)
	clear(want[10:5010])
	e.wantData("pread after punch hole", f, got, want)
}

func caseUnlinkedOpen(e *env) {
	f := e.p("f")
	e.create(f, []byte("before"))
	fd := e.open(f, unix.O_RDWR, 0)
	defer unix.Close(fd)
	fd2 := e.open(f, unix.O_RDONLY, 0)
	defer unix.Close(fd2)
	e.ok("unlink", f, unix.Unlink(f))
	e.wantGone(f)
	e.wantData("pread of unlinked file", f, e.preadFull(fd, f, 100, 0), []byte("before"))
	e.pwriteAll(fd, f, []byte(" and after"), 6)
	big := pattern(300000, 4)
	e.pwriteAll(fd, f, big, 1<<20)
	e.ok("fsync of unlinked file", f, unix.Fsync(fd))
	e.wantData("pread of unlinked file after write", f, e.preadFull(fd2, f, 16, 0), []byte("before and after"))
	e.wantData("pread of unlinked file, far", f, e.preadFull(fd2, f, len(big), 1<<20), big)
	st := e.fstat(fd, f)
	if st.Nlink != 0 || st.Size != 1<<20+int64(len(big)) {
		e.Errorf("fstat of unlinked file %s: expected nlink 0 size %d, got nlink %d size %d", f, 1<<20+len(big), st.Nlink, st.Size)
	}
	e.ok("ftruncate of unlinked file", f, unix.Ftruncate(fd, 3))
	e.wantData("pread after ftruncate", f, e.preadFull(fd2, f, 100, 0), []byte("bef"))
	// The name is free: a new file there is a different file.
	e.create(f, []byte("new"))
	e.wantData("read of new file at the old name", f, e.readFile(f), []byte("new"))
	e.wantData("pread of unlinked file after name reuse", f, e.preadFull(fd, f, 100, 0), []byte("bef"))
	// Same for an unlinked file whose last link went away by rename over it.
	g, h := e.p("g"), e.p("h")
	e.create(g, []byte("victim"))
	e.create(h, []byte("winner"))
	gfd := e.open(g, unix.O_RDONLY, 0)
	defer unix.Close(gfd)
	e.ok("rename "+h, g, unix.Rename(h, g))
	e.wantData("pread of file replaced by rename", g, e.preadFull(gfd, g, 100, 0), []byte("victim"))
}

func caseOpenAfterRename(e *env) {
	f := e.p("f")
	e.mkdir(e.p("sub"))
	g := e.p("sub", "g")
	e.create(f, []byte("one"))
	fd := e.open(f, unix.O_RDWR, 0)
	defer unix.Close(fd)
	e.ok("rename "+f, g, unix.Rename(f, g))
	e.pwriteAll(fd, g, []byte("two"), 3)
	e.ok("fsync", g, unix.Fsync(fd))
	e.wantData("read renamed file", g, e.readFile(g), []byte("onetwo"))
	e.wantGone(f)
}

func caseMtimeUpdates(e *env) {
	old := []unix.Timespec{{Sec: 1e9}, {Sec: 1e9}}
	f := e.p("f")
	e.create(f, []byte("x"))
	type step struct {
		what string
		path string
		op   func() error
	}
	fd := e.open(f, unix.O_RDWR, 0)
	defer unix.Close(fd)
	sub := e.p("sub")
	e.mkdir(sub)
	steps := []step{
		{"write", f, func() error { _, err := unix.Pwrite(fd, []byte("y"), 5); return err }},
		{"ftruncate", f, func() error { return unix.Ftruncate(fd, 2) }},
		{"truncate", f, func() error { return unix.Truncate(f, 100) }},
		{"create in directory", sub, func() error { return unix.Mknod(e.p("sub", "n"), unix.S_IFREG|0o644, 0) }},
		{"rename in directory", sub, func() error { return unix.Rename(e.p("sub", "n"), e.p("sub", "m")) }},
		{"unlink in directory", sub, func() error { return unix.Unlink(e.p("sub", "m")) }},
		{"mkdir in directory", sub, func() error { return unix.Mkdir(e.p("sub", "d"), 0o755) }},
		{"rmdir in directory", sub, func() error { return unix.Rmdir(e.p("sub", "d")) }},
	}
	for _, s := range steps {
		e.ok("utimensat", s.path, unix.UtimesNanoAt(unix.AT_FDCWD, s.path, old, 0))
		before := time.Now()
		e.ok(s.what, s.path, s.op())
		after := time.Now()
		st := e.stat(s.path)
		if !nearNow(st.Mtim, before, after) {
			e.Errorf("stat %s after %s: mtime %d not updated to now", s.path, s.what, tsNano(st.Mtim))
		}
		if !nearNow(st.Ctim, before, after) {
			e.Errorf("stat %s after %s: ctime %d not updated to now", s.path, s.what, tsNano(st.Ctim))
		}
	}
	// chmod changes ctime, not mtime.
	e.ok("utimensat", f, unix.UtimesNanoAt(unix.AT_FDCWD, f, old, 0))
	before := time.Now()
	e.ok("chmod", f, unix.Chmod(f, 0o600))
	st := e.stat(f)
	if tsNano(st.Mtim) != 1e18 {
		e.Errorf("stat %s after chmod: mtime changed to %d", f, tsNano(st.Mtim))
	}
	if !nearNow(st.Ctim, before, time.Now()) {
		e.Errorf("stat %s after chmod: ctime %d not updated to now", f, tsNano(st.Ctim))
	}
}

// sortedKeys is used by several cases for stable messages.
func sortedKeys(m map[string]int) []string {
	k := make([]string, 0, len(m))
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}
