package posixtest

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// helperEnv selects helper mode in a re-executed binary.
const (
	helperEnv     = "POSIXTEST_HELPER"
	helperArgsEnv = "POSIXTEST_HELPER_ARGS"
)

// init turns any binary that imports posixtest into the second process the
// fcntl_lock case needs: with POSIXTEST_HELPER set it performs one fcntl
// lock call, prints the outcome and exits before main (or the test
// framework) starts.
func init() {
	if os.Getenv(helperEnv) != "fcntl" {
		return
	}
	fmt.Println(fcntlHelper(strings.Split(os.Getenv(helperArgsEnv), "\x1f")))
	os.Exit(0)
}

// fcntlHelper runs "getlk|setlk path start len rd|wr" and describes the
// result as "errno NAME" or "lock TYPE START LEN PID".
func fcntlHelper(args []string) string {
	if len(args) != 5 {
		return "usage: getlk|setlk path start len rd|wr"
	}
	start, _ := strconv.ParseInt(args[2], 10, 64)
	length, _ := strconv.ParseInt(args[3], 10, 64)
	typ := int16(unix.F_RDLCK)
	mode := unix.O_RDONLY
	if args[4] == "wr" {
		typ, mode = unix.F_WRLCK, unix.O_RDWR
	}
	fd, err := unix.Open(args[1], mode|unix.O_CLOEXEC, 0)
	if err != nil {
		return "open errno " + unix.ErrnoName(errnoOf(err))
	}
	defer unix.Close(fd)
	lk := unix.Flock_t{Type: typ, Whence: 0, Start: start, Len: length}
	cmd := unix.F_GETLK
	if args[0] == "setlk" {
		cmd = unix.F_SETLK
	}
	if err := unix.FcntlFlock(uintptr(fd), cmd, &lk); err != nil {
		return "errno " + unix.ErrnoName(errnoOf(err))
	}
	return fmt.Sprintf("lock %s %d %d %d", lockType(lk.Type), lk.Start, lk.Len, lk.Pid)
}

func lockType(t int16) string {
	switch t {
	case unix.F_RDLCK:
		return "F_RDLCK"
	case unix.F_WRLCK:
		return "F_WRLCK"
	case unix.F_UNLCK:
		return "F_UNLCK"
	}
	return strconv.Itoa(int(t))
}

// helper runs one fcntl call in a child process.
func (e *env) helper(exe string, args ...string) string {
	e.Helper()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), helperEnv+"=fcntl", helperArgsEnv+"="+strings.Join(args, "\x1f"))
	out, err := cmd.Output()
	if err != nil {
		e.Fatalf("helper process %s %v: %v", exe, args, err)
	}
	return strings.TrimSpace(string(out))
}

func caseFcntlLock(e *env) {
	exe, err := os.Executable()
	if err != nil {
		e.Skipf("cannot re-execute this binary for a second process: %v", err)
	}
	f := e.p("f")
	e.create(f, make([]byte, 1000))
	fd1 := e.open(f, unix.O_RDWR, 0)
	defer unix.Close(fd1)
	lk := unix.Flock_t{Type: unix.F_WRLCK, Start: 0, Len: 100}
	e.ok("fcntl(F_SETLK, F_WRLCK, 0..100)", f, unix.FcntlFlock(uintptr(fd1), unix.F_SETLK, &lk))

	// Locks belong to the process: another descriptor in this process sees no conflict.
	fd2 := e.open(f, unix.O_RDWR, 0)
	q := unix.Flock_t{Type: unix.F_WRLCK, Start: 50, Len: 10}
	e.ok("fcntl(F_GETLK) on a second descriptor", f, unix.FcntlFlock(uintptr(fd2), unix.F_GETLK, &q))
	if q.Type != unix.F_UNLCK {
		e.Errorf("fcntl(F_GETLK, 50..60) %s from the owning process: expected F_UNLCK, got %s", f, lockType(q.Type))
	}
	unix.Close(fd2) // closing any descriptor drops this process's locks on the file (POSIX)

	pid := os.Getpid()
	want := func(op, got, exp string) {
		e.Helper()
		if got != exp {
			e.Errorf("%s %s from another process: expected %q, got %q", op, f, exp, got)
		}
	}
	want("fcntl(F_GETLK, F_WRLCK, 50..60) after the owner closed another descriptor", e.helper(exe, "getlk", f, "50", "10", "wr"), "lock F_UNLCK 50 10 0")
	e.ok("fcntl(F_SETLK, F_WRLCK, 0..100)", f, unix.FcntlFlock(uintptr(fd1), unix.F_SETLK, &lk))
	want("fcntl(F_GETLK, F_WRLCK, 50..60)", e.helper(exe, "getlk", f, "50", "10", "wr"), fmt.Sprintf("lock F_WRLCK 0 100 %d", pid))
	want("fcntl(F_GETLK, F_RDLCK, 99..100)", e.helper(exe, "getlk", f, "99", "1", "rd"), fmt.Sprintf("lock F_WRLCK 0 100 %d", pid))
	want("fcntl(F_SETLK, F_WRLCK, 50..60)", e.helper(exe, "setlk", f, "50", "10", "wr"), "errno EAGAIN")
	want("fcntl(F_SETLK, F_RDLCK, 50..60)", e.helper(exe, "setlk", f, "50", "10", "rd"), "errno EAGAIN")
	want("fcntl(F_SETLK, F_WRLCK, 100..110)", e.helper(exe, "setlk", f, "100", "10", "wr"), "lock F_WRLCK 100 10 0")
	want("fcntl(F_GETLK, F_WRLCK, 200..to EOF)", e.helper(exe, "getlk", f, "200", "0", "wr"), "lock F_UNLCK 200 0 0")

	// Downgrade to a read lock: readers may share, writers may not.
	rd := unix.Flock_t{Type: unix.F_RDLCK, Start: 0, Len: 100}
	e.ok("fcntl(F_SETLK, F_RDLCK, 0..100)", f, unix.FcntlFlock(uintptr(fd1), unix.F_SETLK, &rd))
	want("fcntl(F_SETLK, F_RDLCK, 50..60) against a read lock", e.helper(exe, "setlk", f, "50", "10", "rd"), "lock F_RDLCK 50 10 0")
	want("fcntl(F_SETLK, F_WRLCK, 50..60) against a read lock", e.helper(exe, "setlk", f, "50", "10", "wr"), "errno EAGAIN")

	// Unlock part of the range: the rest stays locked.
	un := unix.Flock_t{Type: unix.F_UNLCK, Start: 0, Len: 50}
	e.ok("fcntl(F_SETLK, F_UNLCK, 0..50)", f, unix.FcntlFlock(uintptr(fd1), unix.F_SETLK, &un))
	want("fcntl(F_SETLK, F_WRLCK, 0..50) after partial unlock", e.helper(exe, "setlk", f, "0", "50", "wr"), "lock F_WRLCK 0 50 0")
	want("fcntl(F_GETLK, F_WRLCK, 0..100) after partial unlock", e.helper(exe, "getlk", f, "0", "100", "wr"), fmt.Sprintf("lock F_RDLCK 50 50 %d", pid))
}

// asUser runs fn on a dedicated OS thread whose file-system uid and gid are
// uid and gid and which has no supplementary groups, so permission checks
// apply as for that user. The thread is never unlocked, so it exits with the
// goroutine and its credentials cannot leak to other goroutines.
func asUser(uid, gid int, fn func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if _, _, en := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); en != 0 {
			errc <- fmt.Errorf("setgroups: %w", en)
			return
		}
		unix.Setfsgid(gid)
		unix.Setfsuid(uid)
		if cur, _ := unix.SetfsuidRetUid(-1); cur != uid {
			errc <- fmt.Errorf("setfsuid(%d): fsuid is %d", uid, cur)
			return
		}
		if cur, _ := unix.SetfsgidRetGid(-1); cur != gid {
			errc <- fmt.Errorf("setfsgid(%d): fsgid is %d", gid, cur)
			return
		}
		fn()
		errc <- nil
	}()
	return <-errc
}
