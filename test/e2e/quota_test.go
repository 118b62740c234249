package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plumeria-fs/plumeria/filesys"
)

// TestQuota: two mounts fill a directory with a 64 MiB quota at once:
// together they never write more than the quota (the stated overrun bound
// is 0), both get EDQUOT, deleting on one lets the other write at once;
// an inode limit holds exactly; nonsense is refused with clear errors;
// after SIGKILL of a writing mount and recovery by the other, `quota
// show` equals a recount, the dead node's unused allowance comes back,
// and an offline fsck finds the quota exact.
func TestQuota(t *testing.T) {
	c := newFSCluster(t)
	a, b := c.mountNode("n1"), c.mountNode("n2")
	const limit = 64 << 20
	qa, qb := filepath.Join(a, "q"), filepath.Join(b, "q")
	if err := os.Mkdir(qa, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(qa, "before"), make([]byte, 1000), 0o644) // counted by the set
	c.cli("quota", "set", qa, "--bytes", "64MiB")
	info := quotaShow(t, c, qb)
	if info.LimitBytes != limit || info.UsedBytes != 1000 || info.UsedInodes != 1 {
		t.Fatalf("after set: %+v", info)
	}
	quotaNonsense(t, c, a, qa)

	// Two writers fill it at once.
	start := time.Now()
	var wg sync.WaitGroup
	wrote := make([]int64, 2)
	errs := make([]error, 2)
	for i, dir := range []string{qa, qb} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wrote[i], errs[i] = quotaFill(dir, fmt.Sprintf("w%d-", i), 256<<10)
		}()
	}
	wg.Wait()
	total := wrote[0] + wrote[1] + 1000
	t.Logf("writers wrote %d + %d bytes in %v, then %v / %v", wrote[0], wrote[1], time.Since(start).Round(time.Millisecond), errs[0], errs[1])
	for i, err := range errs {
		if !errors.Is(err, unix.EDQUOT) {
			t.Fatalf("writer %d stopped with %v, want EDQUOT", i, err)
		}
	}
	if total > limit || total <= limit-2*(256<<10) || wrote[0] == 0 || wrote[1] == 0 {
		t.Fatalf("%d bytes written under a quota of %d (bound 0 over; each writer stops only when less than its write is left)", total, limit)
	}
	quotaExact(t, c, qa, qb)

	// Deleting on one mount lets the other write at once.
	victim := firstFile(t, qa, "w0-")
	fi, _ := os.Stat(victim)
	if err := os.Remove(victim); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(qb, "after-delete"), make([]byte, fi.Size()), 0o644); err != nil {
		t.Fatalf("writing the %d bytes just freed on the other mount: %v", fi.Size(), err)
	}
	quotaExact(t, c, qa, qb)

	// An inode limit: exactly the room left, then EDQUOT.
	os.Remove(filepath.Join(qb, "after-delete"))
	info = quotaShow(t, c, qa)
	c.cli("quota", "set", qa, "--inodes", fmt.Sprint(info.UsedInodes+3))
	for i := range 4 {
		err := os.Mkdir(filepath.Join([]string{qa, qb}[i%2], fmt.Sprintf("d%d", i)), 0o755)
		if want := i == 3; errors.Is(err, unix.EDQUOT) != want || (!want && err != nil) {
			t.Fatalf("mkdir %d with 3 inodes left: %v", i, err)
		}
	}
	c.cli("quota", "set", qa, "--inodes", "none")

	// SIGKILL of a writing mount; the other recovers it.
	// Room for the killed writer, which writes slowly enough to be
	// killed with allowance left.
	for i := range 10 {
		os.Remove(filepath.Join(qa, fmt.Sprintf("w0-%d", i)))
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		quotaFillSlow(qa, "k-", 64<<10, 5*time.Millisecond)
	}()
	go func() {
		time.Sleep(700 * time.Millisecond)
		close(stop)
	}()
	<-stop
	c.kill("n1")
	unix.Unmount(a, unix.MNT_DETACH)
	<-done
	killed := time.Now()
	info = quotaExact(t, c, qb, qb)
	t.Logf("after the kill: %d bytes, %d inodes, exact %v later; shares %+v", info.UsedBytes, info.UsedInodes, time.Since(killed).Round(time.Millisecond), info.Shares)
	// n1's unused allowance comes back: n2 fills the quota to within one write.
	if _, err := quotaFill(qb, "r-", 64<<10); !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("refill after the kill: %v", err)
	}
	info = quotaExact(t, c, qb, qb)
	if info.UsedBytes > limit || info.UsedBytes <= limit-64<<10 {
		t.Fatalf("after the refill %d bytes of %d", info.UsedBytes, limit)
	}
	c.stop("n2")
	unix.Unmount(b, unix.MNT_DETACH)
	if r := c.run(5*time.Minute, nil, "fsck", c.coordArg(), "--volume", "fs"); r.code != 0 {
		t.Fatalf("fsck after the kill: %v", r)
	}
}

// quotaNonsense: quotas that make no sense are refused with clear errors.
func quotaNonsense(t *testing.T, c *cluster, mnt, q string) {
	t.Helper()
	os.Mkdir(filepath.Join(q, "sub"), 0o755)
	f := filepath.Join(mnt, "plainfile")
	os.WriteFile(f, nil, 0o644)
	for _, k := range []struct {
		args []string
		want string
	}{
		{[]string{"quota", "set", q, "--bytes", "-5GiB"}, "cannot be negative"},
		{[]string{"quota", "set", q, "--inodes", "lots"}, "not a count"},
		{[]string{"quota", "set", q}, "give --bytes and/or --inodes"},
		{[]string{"quota", "set", f, "--bytes", "1MiB"}, "is not a directory"},
		{[]string{"quota", "set", t.TempDir(), "--bytes", "1MiB"}, "Plumeria"},
		{[]string{"quota", "show", mnt}, "has no quota"},
	} {
		r := c.run(cliTimeout, nil, k.args...)
		if r.code == 0 || !strings.Contains(string(r.stderr), k.want) {
			t.Errorf("%v: want a failure saying %q", r, k.want)
		}
	}
	// Without CAP_SYS_ADMIN (a thread that dropped it), the quota cannot
	// be set, only read.
	if err := withoutSysAdmin(func() error {
		return unix.Setxattr(q, filesys.QuotaXattr, []byte("bytes=none"), 0)
	}); !errors.Is(err, unix.EPERM) {
		t.Errorf("setting the quota without CAP_SYS_ADMIN: %v, want EPERM", err)
	}
	if v, err := getxattr(q, filesys.QuotaUserXattr); err != nil || v != "bytes=67108864 inodes=none" {
		t.Errorf("%s = %q, %v", filesys.QuotaUserXattr, v, err)
	}
	if err := os.Rename(filepath.Join(q, "before"), filepath.Join(mnt, "before")); !errors.Is(err, unix.EXDEV) {
		t.Errorf("rename out of the quota: %v, want EXDEV", err)
	}
	// A quota inside the quota holds too, and counts in both.
	sub := filepath.Join(q, "sub")
	c.cli("quota", "set", sub, "--bytes", "100KiB")
	if err := os.WriteFile(filepath.Join(sub, "big"), make([]byte, 200<<10), 0o644); !errors.Is(err, unix.EDQUOT) {
		t.Errorf("200 KiB under a nested quota of 100 KiB: %v", err)
	}
	inner := quotaExact(t, c, sub, sub)
	if outer := quotaExact(t, c, q, q); inner.UsedBytes > 100<<10 || outer.UsedBytes != 1000+inner.UsedBytes || outer.UsedInodes != 2+inner.UsedInodes {
		t.Errorf("nested: inner %+v, outer %+v", inner, outer)
	}
	os.Remove(filepath.Join(sub, "big"))
	os.Remove(sub)
}

// quotaFill writes files prefix0, prefix1, ... of up to 4 MiB in dir in
// chunk-byte writes until one fails; it returns the bytes written.
func quotaFill(dir, prefix string, chunk int) (int64, error) {
	return quotaFillSlow(dir, prefix, chunk, 0)
}

// quotaFillSlow is quotaFill with a pause after each write.
func quotaFillSlow(dir, prefix string, chunk int, pause time.Duration) (int64, error) {
	buf := make([]byte, chunk)
	var n int64
	for i := 0; ; i++ {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s%d", prefix, i)))
		if err != nil {
			return n, err
		}
		for off := 0; off < 4<<20; off += chunk {
			if _, err := f.Write(buf); err != nil {
				f.Close()
				return n, err
			}
			n += int64(chunk)
			time.Sleep(pause)
		}
		if err := f.Close(); err != nil {
			return n, err
		}
	}
}

func firstFile(t *testing.T, dir, prefix string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			return filepath.Join(dir, e.Name())
		}
	}
	t.Fatalf("no file %s* in %s", prefix, dir)
	return ""
}

// quotaShow runs `plumeria quota show DIR --json`.
func quotaShow(t *testing.T, c *cluster, dir string) filesys.QuotaInfo {
	t.Helper()
	r := c.run(3*time.Minute, nil, "quota", "show", dir, "--json")
	if r.code != 0 {
		t.Fatalf("%v", r)
	}
	var info filesys.QuotaInfo
	if err := json.Unmarshal(r.stdout, &info); err != nil {
		t.Fatalf("quota show --json: %v\n%s", err, r.stdout)
	}
	return info
}

// quotaExact checks `quota show` through mount point path show against a
// recount (apparent sizes, as du --apparent-size) through path walk.
func quotaExact(t *testing.T, c *cluster, show, walk string) filesys.QuotaInfo {
	t.Helper()
	info := quotaShow(t, c, show)
	var bytes, inodes int64
	err := filepath.WalkDir(walk, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == walk {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		inodes++
		if fi.Mode().IsRegular() || fi.Mode()&fs.ModeSymlink != 0 {
			bytes += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if info.UsedBytes != bytes || info.UsedInodes != inodes {
		t.Fatalf("quota show: %d bytes, %d inodes; a recount: %d bytes, %d inodes", info.UsedBytes, info.UsedInodes, bytes, inodes)
	}
	return info
}

// withoutSysAdmin runs fn on an OS thread that dropped CAP_SYS_ADMIN (the
// thread ends with the goroutine: it is never unlocked).
func withoutSysAdmin(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			done <- err
			return
		}
		data[0].Effective &^= 1 << unix.CAP_SYS_ADMIN
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			done <- err
			return
		}
		done <- fn()
	}()
	return <-done
}

func getxattr(path, name string) (string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Getxattr(path, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
