package fuse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/frontend/fuse/memfs"
	"github.com/plumeria-fs/plumeria/posixtest"
)

func TestToErrno(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{fmt.Errorf("lookup %q in dir 7: %w", "x", filesys.ErrNotFound), syscall.ENOENT},
		{filesys.ErrNoAttr, syscall.ENODATA},
		{filesys.ErrWouldBlock, syscall.EAGAIN},
		{fmt.Errorf("setlk: %w", context.Canceled), syscall.EINTR},
		{errors.New("something the core forgot to wrap"), syscall.EIO},
		{context.DeadlineExceeded, syscall.EIO},
	} {
		if got := toErrno(log, "test", 1, c.err); got != c.want {
			t.Errorf("toErrno(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	// Every sentinel maps to a distinct, non-zero errno except the two
	// interrupt errors.
	seen := map[syscall.Errno]error{}
	for _, e := range errnos {
		if prev, ok := seen[e.errno]; ok && e.errno != syscall.EINTR {
			t.Errorf("%v and %v both map to %v", prev, e.err, e.errno)
		}
		seen[e.errno] = e.err
	}
}

// TestInterruptedLockWait checks that a signal to a process waiting in
// flock(2) cancels the FileSystem call; the kernel then restarts the
// system call, which gets the lock once it is free.
func TestInterruptedLockWait(t *testing.T) {
	fsys, _, dir := mountMem(t, Options{})
	p := filepath.Join(dir, "lk")
	os.WriteFile(p, nil, 0o644)
	f1, _ := os.Open(p)
	f2, _ := os.Open(p)
	defer f2.Close()
	if err := unix.Flock(int(f1.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	sig := make(chan os.Signal, 10)
	signal.Notify(sig, syscall.SIGUSR1)
	defer signal.Stop(sig)

	tid := make(chan int)
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid <- unix.Gettid()
		done <- unix.Flock(int(f2.Fd()), unix.LOCK_EX)
	}()
	thread := <-tid
	waitFor(t, "flock to wait", func() bool { return fsys.Counts().LockWaits > 0 })
	before := fsys.Counts().Interrupted
	waitFor(t, "interrupt to reach the file system", func() bool {
		unix.Tgkill(os.Getpid(), thread, syscall.SIGUSR1)
		return fsys.Counts().Interrupted > before
	})
	select {
	case err := <-done:
		t.Fatalf("flock returned %v while the lock was held", err)
	case <-time.After(50 * time.Millisecond):
	}
	f1.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("flock after the holder closed: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("flock still waiting after the holder closed")
	}
}

func TestOpenUnlinked(t *testing.T) {
	fsys, _, dir := mountMem(t, Options{})
	base := fsys.Counts().Inodes
	p := filepath.Join(dir, "gone")
	os.WriteFile(p, []byte("alive"), 0o644)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(p)
	buf := make([]byte, 10)
	if n, _ := f.ReadAt(buf, 0); string(buf[:n]) != "alive" {
		t.Errorf("read after unlink: %q", buf[:n])
	}
	if n := fsys.Counts().Inodes; n != base+1 {
		t.Errorf("%d inodes while the unlinked file is open, want %d", n, base+1)
	}
	f.Close()
	// RELEASE is asynchronous to close(2).
	waitFor(t, "the inode to be freed", func() bool { return fsys.Counts().Inodes == base })
}

func TestPosix(t *testing.T) {
	_, _, dir := mountMem(t, Options{})
	posixtest.Run(t, dir, posixtest.Options{})
}

// TestReusedNumberIsStale: when another node frees a file the kernel still
// holds and reuses its number for a newer file (a new generation), the
// old file's fstat and reads fail with ESTALE; they never report the newer
// file's size or bytes.
func TestReusedNumberIsStale(t *testing.T) {
	fsys, _, dir := mountMem(t, Options{})
	p := filepath.Join(dir, "old")
	if err := os.WriteFile(p, []byte("old bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ino := inoOf(t, p)
	fsys.Change(func(s *memfs.State) {
		s.Attr(ino).Gen += 100 // what another node's free and reuse look like here
		s.Truncate(ino, 0)
		s.WriteAt(ino, []byte("a newer file's bytes"), 0)
	})
	_, err = f.Stat()
	wantErrno(t, "fstat of the old file", err, syscall.ESTALE)
	buf := make([]byte, 64)
	n, err := f.ReadAt(buf, 0)
	if err == nil || n > 0 {
		t.Fatalf("read of the old file returned %q, %v", buf[:n], err)
	}
}

// TestUmask: with POSIX ACLs on, the kernel sends modes unmasked
// (CAP_DONT_MASK) with the umask beside them, and the adapter passes the
// umask on (Caller.Umask); memfs, having no default ACLs, applies it.
func TestUmask(t *testing.T) {
	_, _, dir := mountMem(t, Options{})
	old := syscall.Umask(0o027)
	defer syscall.Umask(old)
	f, err := os.OpenFile(filepath.Join(dir, "f"), os.O_CREATE|os.O_WRONLY, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(filepath.Join(dir, "p"), syscall.S_IFIFO|0o666, 0); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{"f": 0o640, "d": 0o750, "p": 0o640} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != want {
			t.Errorf("%s: mode %o with umask 027, want %o", name, got, want)
		}
	}
	// memfs takes no ACLs: setfacl's call is refused, not stored unenforced.
	err = unix.Setxattr(filepath.Join(dir, "f"), "system.posix_acl_access", []byte{2, 0, 0, 0, 1, 0, 6, 0, 0xff, 0xff, 0xff, 0xff, 4, 0, 4, 0, 0xff, 0xff, 0xff, 0xff, 0x20, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, 0)
	if err != syscall.EOPNOTSUPP {
		t.Errorf("setxattr system.posix_acl_access on memfs: %v, want EOPNOTSUPP", err)
	}
}
