package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	nfsc "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/rpc"
)

// The NFS gateway's acceptance tests: `plumeria gateway` processes beside
// a FUSE mount of the same volume, driven through go-nfs-client, the
// libnfs tools and a bare RPC client (nfsclient_test.go), with SIGKILLs.

// startGateway starts `plumeria gateway` as process name, exporting vol
// on a fresh loopback port; it does not wait (see waitGateway).
func (c *cluster) startGateway(name, vol string, flags ...string) *proc {
	c.t.Helper()
	p := c.newProc(name)
	p.args = append([]string{"gateway", c.coordArg(), "--volume", vol, "--listen", p.addr, "--name", name}, flags...)
	c.start(p)
	return p
}

// waitGateway waits until the current incarnation of gateway p printed
// that it serves (it has mounted the file system).
func (c *cluster) waitGateway(p *proc) {
	c.t.Helper()
	c.waitFor(90*time.Second, p.name+" serves NFS", func() (bool, string) {
		b, _ := os.ReadFile(p.logPath)
		b = b[max(0, bytes.LastIndex(b, []byte("=== e2e: start #"))):]
		return bytes.Contains(b, []byte("serving volume ")), "no \"serving volume\" line in its log since its last start"
	})
}

// mountNFS mounts export path of the gateway at addr with go-nfs-client.
func mountNFS(t *testing.T, addr, path string, uid, gid uint32) (*nfsc.Target, error) {
	t.Helper()
	ap := netip.MustParseAddrPort(addr)
	cl, err := nfsc.DialServiceAtPort(ap.Addr().String(), int(ap.Port()))
	if err != nil {
		return nil, err
	}
	tg, err := (&nfsc.Mount{Client: cl}).Mount(path, rpc.AuthUnix{Machinename: "e2e", Uid: uid, Gid: gid, GidLen: 1, Gids: gid}.Auth())
	if err != nil {
		cl.Close()
		return nil, err
	}
	t.Cleanup(tg.Close)
	return tg, nil
}

func randomBytes(rng *mrand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// nfsWriteFile writes data to a new file through go-nfs-client (FILE_SYNC
// writes, then a COMMIT).
func nfsWriteFile(t *testing.T, tg *nfsc.Target, path string, data []byte) {
	t.Helper()
	f, err := tg.OpenFile(path, 0o644)
	if err != nil {
		t.Fatalf("NFS create %s: %v", path, err)
	}
	if n, err := f.Write(data); err != nil || n != len(data) {
		t.Fatalf("NFS write %s: %d of %d bytes: %v", path, n, len(data), err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("NFS commit %s: %v", path, err)
	}
}

func nfsReadFile(t *testing.T, tg *nfsc.Target, path string) []byte {
	t.Helper()
	f, err := tg.Open(path)
	if err != nil {
		t.Fatalf("NFS open %s: %v", path, err)
	}
	var out []byte
	buf := make([]byte, 1<<20)
	for {
		n, err := f.Read(buf) // the last data comes with io.EOF
		out = append(out, buf[:n]...)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("NFS read %s at %d: %v", path, len(out), err)
		}
		if n == 0 {
			t.Fatalf("NFS read %s at %d: no data and no EOF", path, len(out))
		}
	}
	return out
}

// sameBytes fails unless got is want, naming the first difference.
func sameBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	i := 0
	for i < min(len(got), len(want)) && got[i] == want[i] {
		i++
	}
	t.Fatalf("%s: %d bytes, want %d; first difference at byte %d", what, len(got), len(want), i)
}

// readWithin reads path, failing if that takes longer than timeout (a
// node waiting for a dead gateway's locks blocks the read).
func readWithin(t *testing.T, path string, timeout time.Duration) []byte {
	t.Helper()
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		b, err := os.ReadFile(path)
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("read %s: %v", path, r.err)
		}
		t.Logf("read %s (%d bytes) in %v", path, len(r.b), time.Since(start).Round(time.Millisecond))
		return r.b
	case <-time.After(timeout):
		t.Fatalf("read %s: no answer within %v", path, timeout)
		return nil
	}
}

// TestNFSGateway: a gateway and a FUSE mount of one volume. Through
// go-nfs-client: mkdir, a 3 MB write read back, rename, symlink and
// readlink, a hard link (a bare LINK call: the library has none), chmod
// and truncate, a READDIRPLUS listing of 10,000 names, remove and rmdir;
// each change is seen at once through FUSE, and a file FUSE writes reads
// back at once through NFS. Then the libnfs tools copy in and out, list
// and cat, compared with the FUSE view.
func TestNFSGateway(t *testing.T) {
	_, rng := seed(t)
	c := startFSCluster(t, nil)
	mnt := c.mountNode("n1")
	gw := c.startGateway("gw", "fs", "--allow", "127.0.0.1/32", "--no-root-squash")
	c.waitGateway(gw)
	tg, err := mountNFS(t, gw.addr, "/fs", 0, 0)
	if err != nil {
		t.Fatalf("mount /fs through go-nfs-client: %v", err)
	}
	fuse := func(rel string) string { return filepath.Join(mnt, rel) }

	if _, err := tg.Mkdir("d", 0o755); err != nil {
		t.Fatalf("NFS mkdir: %v", err)
	}
	if fi, err := os.Stat(fuse("d")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
		t.Fatalf("FUSE sees the NFS mkdir as %v, %v", fi, err)
	}
	data := randomBytes(rng, 3<<20+12345)
	start := time.Now()
	nfsWriteFile(t, tg, "d/big", data)
	t.Logf("NFS wrote %d bytes in %v", len(data), time.Since(start).Round(time.Millisecond))
	sameBytes(t, "NFS reads back d/big", nfsReadFile(t, tg, "d/big"), data)
	sameBytes(t, "FUSE reads the file NFS wrote", fuseRead(t, fuse("d/big")), data)

	fromFUSE := randomBytes(rng, 1<<20+7)
	if err := os.WriteFile(fuse("d/fromfuse"), fromFUSE, 0o644); err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "NFS reads the file FUSE wrote", nfsReadFile(t, tg, "d/fromfuse"), fromFUSE)

	if err := tg.Rename("d/big", "d/big2"); err != nil {
		t.Fatalf("NFS rename: %v", err)
	}
	if _, err := os.Stat(fuse("d/big")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("FUSE still finds the old name after the NFS rename: %v", err)
	}
	sameBytes(t, "FUSE reads the renamed file", fuseRead(t, fuse("d/big2")), data)

	if err := tg.Symlink("big2", "d/l"); err != nil {
		t.Fatalf("NFS symlink: %v", err)
	}
	lf, err := tg.Open("d/l")
	if err != nil {
		t.Fatal(err)
	}
	if target, err := lf.Readlink(); err != nil || target != "big2" {
		t.Fatalf("NFS readlink: %q, %v", target, err)
	}
	if target, err := os.Readlink(fuse("d/l")); err != nil || target != "big2" {
		t.Fatalf("FUSE readlink of the NFS symlink: %q, %v", target, err)
	}

	rc := dialRPC(t, gw.addr, 0, 0)
	root, st := rc.mount("/fs")
	if st != 0 {
		t.Fatalf("MNT /fs: status %d", st)
	}
	dfh, st := rc.lookup(root, "d")
	if st != nfs3OK {
		t.Fatalf("LOOKUP d: %d", st)
	}
	ffh, st := rc.lookup(dfh, "big2")
	if st != nfs3OK {
		t.Fatalf("LOOKUP d/big2: %d", st)
	}
	if st := rc.link(ffh, dfh, "hard"); st != nfs3OK {
		t.Fatalf("LINK d/big2 d/hard: %d", st)
	}
	var s1, s2 syscall.Stat_t
	if err := syscall.Stat(fuse("d/big2"), &s1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(fuse("d/hard"), &s2); err != nil || s1.Ino != s2.Ino || s2.Nlink != 2 {
		t.Fatalf("FUSE sees the NFS hard link as ino %d nlink %d (target ino %d): %v", s2.Ino, s2.Nlink, s1.Ino, err)
	}

	if err := tg.Setattr("d/big2", nfsc.Sattr3{Mode: nfsc.SetMode{SetIt: true, Mode: 0o600}}); err != nil {
		t.Fatalf("NFS chmod: %v", err)
	}
	if err := tg.Setattr("d/big2", nfsc.Sattr3{Size: nfsc.SetSize{SetIt: true, Size: 1000}}); err != nil {
		t.Fatalf("NFS truncate: %v", err)
	}
	if fi, err := os.Stat(fuse("d/hard")); err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != 1000 {
		t.Fatalf("FUSE sees the file after NFS chmod 0600 and truncate 1000 as %v, %v", fi, err)
	}
	sameBytes(t, "FUSE reads the truncated file", fuseRead(t, fuse("d/hard")), data[:1000])
	sameBytes(t, "NFS reads the truncated file", nfsReadFile(t, tg, "d/big2"), data[:1000])

	listLarge(t, tg, mnt)

	for _, name := range []string{"d/l", "d/hard", "d/big2", "d/fromfuse"} {
		if err := tg.Remove(name); err != nil {
			t.Fatalf("NFS remove %s: %v", name, err)
		}
	}
	if err := tg.RmDir("d"); err != nil {
		t.Fatalf("NFS rmdir: %v", err)
	}
	if _, err := os.Stat(fuse("d")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("FUSE still finds d after the NFS rmdir: %v", err)
	}

	libnfsTools(t, rng, gw.addr, mnt)
}

// fuseRead returns path's bytes.
func fuseRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// listLarge makes 10,000 files through FUSE (fast) and lists them through
// NFS READDIRPLUS: the same names, each with attributes and a handle.
func listLarge(t *testing.T, tg *nfsc.Target, mnt string) {
	t.Helper()
	const files = 10000
	dir := filepath.Join(mnt, "many")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	want := make([]string, files)
	var wg sync.WaitGroup
	errs := make(chan error, files)
	const workers = 16
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < files; i += workers {
				want[i] = fmt.Sprintf("entry-%05d-%x", i, i*7919)
				if err := os.WriteFile(filepath.Join(dir, want[i]), nil, 0o644); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("FUSE create: %v", err)
	}
	t.Logf("FUSE made %d files in %v", files, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	ents, err := tg.ReadDirPlus("many")
	if err != nil {
		t.Fatalf("NFS READDIRPLUS of %d entries: %v", files, err)
	}
	t.Logf("NFS listed %d entries in %v", len(ents), time.Since(start).Round(time.Millisecond))
	var got []string
	for _, e := range ents {
		got = append(got, e.FileName)
		if !e.Attr.IsSet || !e.Handle.IsSet || len(e.Handle.FH) != 44 || e.Attr.Attr.Type != 1 {
			t.Fatalf("READDIRPLUS entry %q: attributes set %v (type %d), handle set %v (%d bytes)",
				e.FileName, e.Attr.IsSet, e.Attr.Attr.Type, e.Handle.IsSet, len(e.Handle.FH))
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("READDIRPLUS lists %d names, want %d; first differences: %s", len(got), len(want), nameDiff(got, want))
	}
}

// nameDiff names a few names in one sorted list and not the other.
func nameDiff(got, want []string) string {
	var out []string
	for _, g := range got {
		if _, ok := slices.BinarySearch(want, g); !ok && len(out) < 5 {
			out = append(out, "extra "+g)
		}
	}
	for _, w := range want {
		if _, ok := slices.BinarySearch(got, w); !ok && len(out) < 10 {
			out = append(out, "missing "+w)
		}
	}
	return strings.Join(out, ", ")
}

// libnfsTools copies a file in with nfs-cp and checks it through FUSE,
// copies and cats a file FUSE wrote, and lists the root with nfs-ls.
func libnfsTools(t *testing.T, rng *mrand.Rand, addr, mnt string) {
	t.Helper()
	for _, tool := range []string{"nfs-cp", "nfs-cat", "nfs-ls"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Logf("SKIP the libnfs part: %s is not installed (make deps installs libnfs-utils)", tool)
			return
		}
	}
	port := netip.MustParseAddrPort(addr).Port()
	url := func(path string) string {
		return fmt.Sprintf("nfs://127.0.0.1/fs%s?nfsport=%d&mountport=%d", path, port, port)
	}
	run := func(args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var out, errb bytes.Buffer
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v\nstdout: %.300s\nstderr: %s", strings.Join(args, " "), err, out.Bytes(), errb.Bytes())
		}
		return out.Bytes()
	}
	local := t.TempDir()
	in := randomBytes(rng, 700<<10+3)
	if err := os.WriteFile(filepath.Join(local, "in.bin"), in, 0o644); err != nil {
		t.Fatal(err)
	}
	run("nfs-cp", filepath.Join(local, "in.bin"), url("/in.bin"))
	sameBytes(t, "FUSE reads what nfs-cp copied in", fuseRead(t, filepath.Join(mnt, "in.bin")), in)

	out := randomBytes(rng, 300<<10+1)
	if err := os.WriteFile(filepath.Join(mnt, "out.bin"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	run("nfs-cp", url("/out.bin"), filepath.Join(local, "out.bin"))
	sameBytes(t, "nfs-cp copies out what FUSE wrote", fuseRead(t, filepath.Join(local, "out.bin")), out)
	sameBytes(t, "nfs-cat of what FUSE wrote", run("nfs-cat", url("/out.bin")), out)

	ls := string(run("nfs-ls", url("")))
	var listed []string
	for _, line := range strings.Split(strings.TrimSpace(ls), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[len(f)-1] != "." && f[len(f)-1] != ".." {
			listed = append(listed, f[len(f)-1])
		}
	}
	ents, err := os.ReadDir(mnt)
	if err != nil {
		t.Fatal(err)
	}
	var fuse []string
	for _, e := range ents {
		fuse = append(fuse, e.Name())
	}
	slices.Sort(listed)
	slices.Sort(fuse)
	if !slices.Equal(listed, fuse) {
		t.Fatalf("nfs-ls lists %q, FUSE %q\nnfs-ls output:\n%s", listed, fuse, ls)
	}
}

// TestNFSDurability: SIGKILL the gateway right after a FILE_SYNC WRITE
// returned, and right after a COMMIT of UNSTABLE writes returned: the
// bytes read back through FUSE once the dead gateway's locks are
// released. UNSTABLE writes never committed before a SIGKILL: COMMIT on
// the restarted gateway (same port and name, a new connection) returns
// another verifier, so a client resends. A clean stop with --state keeps
// the verifier.
func TestNFSDurability(t *testing.T) {
	_, rng := seed(t)
	c := startFSCluster(t, nil)
	mnt := c.mountNode("n1")
	state := filepath.Join(c.dir, "gw.state")
	gw := c.startGateway("gw", "fs", "--allow", "127.0.0.1/32", "--no-root-squash", "--state", state)
	c.waitGateway(gw)
	const afterKill = 120 * time.Second // lease (15 s) + recovery, with room

	// FILE_SYNC, then SIGKILL.
	rc := dialRPC(t, gw.addr, 0, 0)
	root, st := rc.mount("/fs")
	if st != 0 {
		t.Fatalf("MNT: %d", st)
	}
	fh, st := rc.create(root, "sync.dat", 0o644)
	if st != nfs3OK {
		t.Fatalf("CREATE sync.dat: %d", st)
	}
	syncData := randomBytes(rng, 700<<10+5)
	w, st := rc.write(fh, 0, syncData, stableFileSync)
	if st != nfs3OK || w.count != uint32(len(syncData)) || w.committed != stableFileSync {
		t.Fatalf("WRITE FILE_SYNC: status %d, %+v", st, w)
	}
	c.kill("gw")
	sameBytes(t, "FUSE reads sync.dat after the SIGKILL", readWithin(t, filepath.Join(mnt, "sync.dat"), afterKill), syncData)

	// On the next gateway: UNSTABLE writes to lost.dat, never committed;
	// UNSTABLE writes to commit.dat, a COMMIT, then SIGKILL.
	c.restart("gw")
	c.waitGateway(gw)
	rc = dialRPC(t, gw.addr, 0, 0)
	if root, st = rc.mount("/fs"); st != 0 {
		t.Fatalf("MNT after the restart: %d", st)
	}
	lostFH, st := rc.create(root, "lost.dat", 0o644)
	if st != nfs3OK {
		t.Fatalf("CREATE lost.dat: %d", st)
	}
	lostVerf := writeUnstable(t, rc, lostFH, randomBytes(rng, 512<<10), 4)
	commitFH, st := rc.create(root, "commit.dat", 0o644)
	if st != nfs3OK {
		t.Fatalf("CREATE commit.dat: %d", st)
	}
	commitData := randomBytes(rng, 1<<20+9)
	verf := writeUnstable(t, rc, commitFH, commitData, 4)
	if verf != lostVerf {
		t.Fatalf("one gateway process, two write verifiers: %x and %x", lostVerf, verf)
	}
	cv, st := rc.commit(commitFH)
	if st != nfs3OK || cv != verf {
		t.Fatalf("COMMIT commit.dat: status %d, verifier %x, want 0 and the WRITEs' %x", st, cv, verf)
	}
	c.kill("gw")
	sameBytes(t, "FUSE reads commit.dat after the SIGKILL", readWithin(t, filepath.Join(mnt, "commit.dat"), afterKill), commitData)

	// A new gateway process: the old handle still works, and COMMIT
	// returns another verifier than lost.dat's WRITEs carried.
	c.restart("gw")
	c.waitGateway(gw)
	rc = dialRPC(t, gw.addr, 0, 0)
	if _, st := rc.getattr(lostFH); st != nfs3OK {
		t.Fatalf("GETATTR of lost.dat's handle on the restarted gateway: %d", st)
	}
	v2, st := rc.commit(lostFH)
	if st != nfs3OK {
		t.Fatalf("COMMIT lost.dat on the restarted gateway: %d", st)
	}
	if v2 == lostVerf {
		t.Fatalf("COMMIT after a SIGKILL returns the verifier %x the UNSTABLE WRITEs carried: a client would not resend data the crash may have lost", v2)
	}
	t.Logf("write verifier %x before the SIGKILL, %x after", lostVerf, v2)

	// A clean stop (SIGTERM) with --state: every write is durable, the
	// next process keeps the verifier and consumes the state file.
	c.stop("gw")
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("a clean stop left no --state file: %v", err)
	}
	c.restart("gw")
	c.waitGateway(gw)
	rc = dialRPC(t, gw.addr, 0, 0)
	if v3, st := rc.commit(lostFH); st != nfs3OK || v3 != v2 {
		t.Fatalf("COMMIT after a clean restart with --state: status %d, verifier %x, want %x kept", st, v3, v2)
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the --state file is still there after the restart read it: %v", err)
	}
}

// writeUnstable writes data to fh in parts UNSTABLE WRITEs and returns
// their verifier (the same on each, or the test fails).
func writeUnstable(t *testing.T, rc *rpcClient, fh, data []byte, parts int) [8]byte {
	t.Helper()
	var verf [8]byte
	step := (len(data) + parts - 1) / parts
	for off := 0; off < len(data); off += step {
		p := data[off:min(off+step, len(data))]
		w, st := rc.write(fh, uint64(off), p, stableUnstable)
		if st != nfs3OK || w.count != uint32(len(p)) {
			t.Fatalf("WRITE UNSTABLE at %d: status %d, %+v", off, st, w)
		}
		if off == 0 {
			verf = w.verf
		} else if w.verf != verf {
			t.Fatalf("WRITE at %d has verifier %x, the first one %x, with no crash between", off, w.verf, verf)
		}
	}
	return verf
}

// TestNFSBadInput: forged and foreign handles, a client outside --allow,
// garbage and an oversized record on one connection while another is
// served.
func TestNFSBadInput(t *testing.T) {
	c := startFSCluster(t, nil)
	c.cli("format", c.coordArg(), "--volume", "fs2", "--replicas", "2")
	gw := c.startGateway("gw", "fs", "--allow", "127.0.0.1/32", "--no-root-squash")
	gw2 := c.startGateway("gw2", "fs2", "--allow", "127.0.0.1/32", "--no-root-squash")
	gwx := c.startGateway("gwx", "fs", "--allow", "10.9.9.0/24")
	for _, p := range []*proc{gw, gw2, gwx} {
		c.waitGateway(p)
	}

	var root []byte
	t.Run("handles", func(t *testing.T) {
		rc := dialRPC(t, gw.addr, 0, 0)
		var st uint32
		if root, st = rc.mount("/fs"); st != 0 {
			t.Fatalf("MNT /fs: %d", st)
		}
		if _, st := rc.getattr(root); st != nfs3OK {
			t.Fatalf("GETATTR of the root: %d", st)
		}
		if _, st := rc.mount("/fs2"); st != 2 {
			t.Errorf("MNT /fs2 on the gateway of fs: status %d, want MNT3ERR_NOENT (2)", st)
		}
		forged := bytes.Clone(root)
		forged[len(forged)-1] ^= 1
		if _, st := rc.getattr(forged); st != nfs3ErrBadHandle {
			t.Errorf("GETATTR of a handle with a wrong MAC % x: status %d, want NFS3ERR_BADHANDLE (10001)", forged, st)
		}
		otherIno := bytes.Clone(root)
		otherIno[19] ^= 0x40 // another inode under the root's MAC
		if _, st := rc.getattr(otherIno); st != nfs3ErrBadHandle {
			t.Errorf("GETATTR of a handle whose inode was changed % x: status %d, want 10001", otherIno, st)
		}
		for _, h := range [][]byte{root[:20], append(bytes.Clone(root), 0, 0, 0, 0), nil} {
			if _, st := rc.getattr(h); st != nfs3ErrBadHandle {
				t.Errorf("GETATTR of a %d-byte handle: status %d, want 10001", len(h), st)
			}
		}
		rc2 := dialRPC(t, gw2.addr, 0, 0)
		root2, st := rc2.mount("/fs2")
		if st != 0 {
			t.Fatalf("MNT /fs2: %d", st)
		}
		if _, st := rc2.getattr(root2); st != nfs3OK {
			t.Fatalf("GETATTR of fs2's root on its gateway: %d", st)
		}
		if _, st := rc.getattr(root2); st != nfs3ErrStale {
			t.Errorf("GETATTR of fs2's root % x on the gateway of fs: status %d, want NFS3ERR_STALE (70)", root2, st)
		}
		if _, st := rc2.getattr(root); st != nfs3ErrStale {
			t.Errorf("GETATTR of fs's root on the gateway of fs2: status %d, want 70", st)
		}
	})
	if root == nil {
		t.FailNow()
	}
	t.Run("allow", func(t *testing.T) {
		rx := dialRPC(t, gwx.addr, 0, 0)
		r := rx.call(rpcProgMount, mountProcMnt, (&xdrEnc{}).str("/fs").b)
		if r.denied || r.stat != rpcAcceptSuccess {
			t.Fatalf("MNT from outside --allow: %v, want accepted with MNT3ERR_ACCES", r)
		}
		if st := r.body.u32(); st != mnt3ErrAcces {
			t.Errorf("MNT from outside --allow: status %d, want MNT3ERR_ACCES (13)", st)
		}
		r = rx.call(rpcProgNFS, nfsProcGetattr, (&xdrEnc{}).opaque(root).b)
		if !r.denied || r.stat != rpcRejectAuth || r.auth != rpcAuthTooWeak {
			t.Errorf("GETATTR from outside --allow: %v, want MSG_DENIED AUTH_ERROR AUTH_TOOWEAK (5)", r)
		}
		if _, err := mountNFS(t, gwx.addr, "/fs", 0, 0); err == nil {
			t.Errorf("go-nfs-client mounted /fs from outside --allow")
		} else {
			t.Logf("go-nfs-client mount from outside --allow: %v", err)
		}
		b, _ := os.ReadFile(gwx.logPath)
		if !bytes.Contains(b, []byte("outside --allow")) || !bytes.Contains(b, []byte("127.0.0.1")) {
			t.Errorf("gwx logged no refusal of 127.0.0.1; its log:\n%s", b)
		}
	})
	t.Run("garbage", func(t *testing.T) { garbageAndOversized(t, gw.addr, root) })
	c.checkAlive()
}

// garbageAndOversized sends a call with truncated arguments, a record that
// is no call, and a 4 MiB record on connection a, and bytes that are no
// record at all on connection x; connection b is served meanwhile and
// after, and so is a.
func garbageAndOversized(t *testing.T, addr string, root []byte) {
	a, b := dialRPC(t, addr, 0, 0), dialRPC(t, addr, 0, 0)
	getattrOK := func(rc *rpcClient, when string) {
		t.Helper()
		if _, st := rc.getattr(root); st != nfs3OK {
			t.Fatalf("GETATTR %s: status %d", when, st)
		}
	}
	getattrOK(b, "on a second connection first")

	// Truncated arguments: GARBAGE_ARGS.
	xid, h := a.callHeader(rpcProgNFS, nfsProcGetattr)
	a.send(append(h, 0, 0, 0, 44, 1, 2))
	r, err := a.recv()
	if err != nil || r.xid != xid || r.denied || r.stat != rpcGarbageArgs {
		t.Fatalf("GETATTR with a truncated handle: %v, %v; want xid %#x GARBAGE_ARGS (4)", r, err, xid)
	}

	// A record that is no call: dropped without a reply (the next reply
	// on a is the next call's).
	junk := make([]byte, 100)
	rand.Read(junk)
	copy(junk[4:], []byte{0xde, 0xad, 0xbe, 0xef}) // msg_type: neither CALL nor REPLY
	a.send(junk)

	// x: bytes that are no record ("GET " reads as a 1.2 GB fragment).
	x := dialRPC(t, addr, 0, 0)
	x.nc.Write(append([]byte("GET / HTTP/1.1\r\nHost: nfs\r\n\r\n"), junk...))

	// A 4 MiB record whose header is a WRITE call: the gateway reads it to
	// its end, answers GARBAGE_ARGS and goes on. b is served while the
	// record is half sent.
	const big = 4 << 20
	xid, h = a.callHeader(rpcProgNFS, nfsProcWrite)
	rec := make([]byte, 4+big)
	binary.BigEndian.PutUint32(rec, 1<<31|big) // one last fragment
	copy(rec[4:], h)
	a.nc.SetWriteDeadline(time.Now().Add(rpcReplyTimeout))
	if _, err := a.nc.Write(rec[:big/2]); err != nil {
		t.Fatalf("send the first half of a 4 MiB record: %v", err)
	}
	getattrOK(b, "on a second connection while the first is half way through a 4 MiB record")
	if _, err := a.nc.Write(rec[big/2:]); err != nil {
		t.Fatalf("send the second half of a 4 MiB record: %v", err)
	}
	r, err = a.recv()
	if err != nil || r.xid != xid || r.denied || r.stat != rpcGarbageArgs {
		t.Fatalf("a 4 MiB record: %v, %v; want xid %#x GARBAGE_ARGS (4) (and nothing for the record that is no call)", r, err, xid)
	}
	getattrOK(a, "on the connection that sent the garbage and the 4 MiB record")
	x.nc.Close()
	getattrOK(b, "on a second connection after all that")
}

// TestNFSReadOnlyAndRootSquash: a --read-only gateway refuses every
// change with NFS3ERR_ROFS and still reads; a gateway that squashes root
// (the default) serves uid 0 as nobody: refused in the root directory
// (0755, owned by root), allowed in a world-writable one, as 65534.
func TestNFSReadOnlyAndRootSquash(t *testing.T) {
	c := startFSCluster(t, nil)
	mnt := c.mountNode("n1")
	ro := c.startGateway("gwro", "fs", "--allow", "127.0.0.1/32", "--no-root-squash", "--read-only")
	sq := c.startGateway("gwsq", "fs", "--allow", "127.0.0.1/32")
	pub := filepath.Join(mnt, "pub")
	if err := os.Mkdir(pub, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(pub, 0o777); err != nil { // past the umask
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pub, "f"), []byte("hello"), 0o666); err != nil {
		t.Fatal(err)
	}
	var rootSt syscall.Stat_t
	if err := syscall.Stat(mnt, &rootSt); err != nil || rootSt.Uid != 0 || rootSt.Mode&0o7777 != 0o755 {
		t.Fatalf("the root directory: uid %d mode %o (%v), want root's 0755", rootSt.Uid, rootSt.Mode&0o7777, err)
	}
	c.waitGateway(ro)
	c.waitGateway(sq)

	t.Run("read-only", func(t *testing.T) {
		rc := dialRPC(t, ro.addr, 0, 0)
		root, st := rc.mount("/fs")
		if st != 0 {
			t.Fatalf("MNT: %d", st)
		}
		if _, st := rc.create(root, "x", 0o644); st != nfs3ErrROFS {
			t.Errorf("CREATE in the root on a read-only gateway: status %d, want NFS3ERR_ROFS (30)", st)
		}
		pfh, st := rc.lookup(root, "pub")
		if st != nfs3OK {
			t.Fatalf("LOOKUP pub: %d", st)
		}
		ffh, st := rc.lookup(pfh, "f")
		if st != nfs3OK {
			t.Fatalf("LOOKUP pub/f: %d", st)
		}
		if _, st := rc.write(ffh, 0, []byte("HELLO"), stableFileSync); st != nfs3ErrROFS {
			t.Errorf("WRITE on a read-only gateway: status %d, want 30", st)
		}
		if got, st := rc.read(ffh, 0, 100); st != nfs3OK || string(got) != "hello" {
			t.Errorf("READ on a read-only gateway: %q, status %d", got, st)
		}
		if _, err := os.Stat(filepath.Join(mnt, "x")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the refused CREATE made a file: %v", err)
		}
		if got := readFile(t, filepath.Join(pub, "f")); got != "hello" {
			t.Errorf("the refused WRITE changed the file: %q", got)
		}
	})
	t.Run("root-squash", func(t *testing.T) {
		rc := dialRPC(t, sq.addr, 0, 0)
		root, st := rc.mount("/fs")
		if st != 0 {
			t.Fatalf("MNT: %d", st)
		}
		if _, st := rc.create(root, "byroot", 0o644); st != nfs3ErrAcces {
			t.Errorf("CREATE in the root as a squashed uid 0: status %d, want NFS3ERR_ACCES (13)", st)
		}
		if _, err := os.Stat(filepath.Join(mnt, "byroot")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the refused CREATE made a file: %v", err)
		}
		pfh, st := rc.lookup(root, "pub")
		if st != nfs3OK {
			t.Fatalf("LOOKUP pub: %d", st)
		}
		fh, st := rc.create(pfh, "squashed", 0o644)
		if st != nfs3OK {
			t.Fatalf("CREATE in a 0777 directory as a squashed uid 0: status %d", st)
		}
		a, st := rc.getattr(fh)
		if st != nfs3OK || a.uid != 65534 || a.gid != 65534 {
			t.Errorf("the file a squashed uid 0 made: status %d, owner %d:%d, want 65534:65534", st, a.uid, a.gid)
		}
		var fst syscall.Stat_t
		if err := syscall.Stat(filepath.Join(pub, "squashed"), &fst); err != nil || fst.Uid != 65534 {
			t.Errorf("FUSE sees the squashed file owned by %d: %v", fst.Uid, err)
		}
	})
}

// TestNFSFailover: two gateways of one volume. A client's handles from
// the first work on the second (they name the file system, the inode and
// the generation, not a process); after the first is SIGKILLed with its
// data FILE_SYNC'd, the second serves it, and a COMMIT there carries
// another verifier than the first's WRITEs (the first's unstable data
// may be lost: the client resends).
func TestNFSFailover(t *testing.T) {
	_, rng := seed(t)
	c := startFSCluster(t, nil)
	gw1 := c.startGateway("gw1", "fs", "--allow", "127.0.0.1/32", "--no-root-squash")
	gw2 := c.startGateway("gw2", "fs", "--allow", "127.0.0.1/32", "--no-root-squash")
	c.waitGateway(gw1)
	c.waitGateway(gw2)
	rc1 := dialRPC(t, gw1.addr, 0, 0)
	root, st := rc1.mount("/fs")
	if st != 0 {
		t.Fatalf("MNT: %d", st)
	}
	fh, st := rc1.create(root, "f.dat", 0o644)
	if st != nfs3OK {
		t.Fatalf("CREATE: %d", st)
	}
	data := randomBytes(rng, 300<<10+3)
	w, st := rc1.write(fh, 0, data, stableFileSync)
	if st != nfs3OK {
		t.Fatalf("WRITE FILE_SYNC: %d", st)
	}
	c.kill("gw1")
	rc2 := dialRPC(t, gw2.addr, 0, 0)
	var got []byte
	c.waitFor(120*time.Second, "gw2 reads f.dat through gw1's handle", func() (bool, string) {
		got, st = rc2.read(fh, 0, uint32(len(data)))
		return st == nfs3OK, fmt.Sprintf("READ status %d", st)
	})
	sameBytes(t, "f.dat through gw2", got, data)
	// The directory handle from gw1 works on gw2 too.
	if _, st := rc2.lookup(root, "f.dat"); st != nfs3OK {
		t.Fatalf("LOOKUP through gw1's root handle on gw2: %d", st)
	}
	v2, st := rc2.commit(fh)
	if st != nfs3OK {
		t.Fatalf("COMMIT on gw2: %d", st)
	}
	if v2 == w.verf {
		t.Fatalf("gw2's verifier %x is gw1's: a client would not resend what gw1 lost", v2)
	}
}

// TestNFSGatewayRemount: a gateway frozen past its lock lease (SIGSTOP)
// finds its file system stopped when it wakes; it answers
// NFS3ERR_JUKEBOX while it mounts the volume again as a new fs node,
// then serves the same handles: FILE_SYNC'd data is there, new writes
// work and a FUSE mount of another node sees them, and the verifier
// changed (unstable data of the old node may be lost).
func TestNFSGatewayRemount(t *testing.T) {
	_, rng := seed(t)
	c := startFSCluster(t, nil)
	mnt := c.mountNode("n1")
	gw := c.startGateway("gw", "fs", "--allow", "127.0.0.1/32", "--no-root-squash")
	c.waitGateway(gw)
	rc := dialRPC(t, gw.addr, 0, 0)
	root, st := rc.mount("/fs")
	if st != 0 {
		t.Fatalf("MNT: %d", st)
	}
	fh, st := rc.create(root, "a.dat", 0o644)
	if st != nfs3OK {
		t.Fatalf("CREATE: %d", st)
	}
	a := randomBytes(rng, 200<<10)
	w, st := rc.write(fh, 0, a, stableFileSync)
	if st != nfs3OK {
		t.Fatalf("WRITE: %d", st)
	}
	c.pause("gw")
	time.Sleep(25 * time.Second) // past the 15 s lease
	c.resume("gw")
	var got []byte
	c.waitFor(120*time.Second, "the gateway serves a.dat again", func() (bool, string) {
		got, st = rc.read(fh, 0, uint32(len(a)))
		return st == nfs3OK, fmt.Sprintf("READ status %d", st)
	})
	sameBytes(t, "a.dat after the remount", got, a)
	if b, _ := os.ReadFile(gw.logPath); !bytes.Contains(b, []byte("mounts it again")) {
		t.Fatalf("the gateway's log does not say it mounted the file system again")
	}
	bh, st := rc.create(root, "b.dat", 0o644)
	if st != nfs3OK {
		t.Fatalf("CREATE after the remount: %d", st)
	}
	b := randomBytes(rng, 100<<10)
	if _, st := rc.write(bh, 0, b, stableUnstable); st != nfs3OK {
		t.Fatalf("WRITE after the remount: %d", st)
	}
	v, st := rc.commit(bh)
	if st != nfs3OK {
		t.Fatalf("COMMIT after the remount: %d", st)
	}
	if v == w.verf {
		t.Fatal("the verifier did not change across the remount")
	}
	sameBytes(t, "b.dat through FUSE", readWithin(t, filepath.Join(mnt, "b.dat"), 60*time.Second), b)
}
