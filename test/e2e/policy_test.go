package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plumeria-fs/plumeria/coord"
)

// startPolicyCluster starts a coordinator with a lock server, bricks
// b1..bN on hosts h1..hN (brickArgs(i) added), formats volume fs with
// replicas copies and mounts it as n1 with the policy mover moving at once
// (--policy-quiet 0, more mount arguments in mountArgs). It returns the
// cluster and the mount point.
func startPolicyCluster(t *testing.T, bricks int, replicas string, brickArgs func(i int) []string, mountArgs ...string) (*cluster, string) {
	t.Helper()
	c := newCluster(t)
	p := c.newProc("c1")
	p.coordinator = true
	p.args = []string{"server", "--name", "c1", "--listen", p.addr, "--data", p.data, "--coordinator", "--lock"}
	c.start(p)
	for i := 1; i <= bricks; i++ {
		c.addBrick(fmt.Sprintf("b%d", i), fmt.Sprintf("h%d", i), brickArgs(i)...)
	}
	c.waitStatus(60*time.Second, fmt.Sprintf("%d bricks up and a lock server", bricks), func(st *coord.Status) (bool, string) {
		up := 0
		for _, b := range st.Bricks {
			if b.State == "up" {
				up++
			}
		}
		return up == bricks && len(st.LockServers) == 1, fmt.Sprintf("%d bricks up, %d lock servers", up, len(st.LockServers))
	})
	c.cli("format", c.coordArg(), "--volume", "fs", "--replicas", replicas)
	n1 := c.newProc("n1")
	mnt := filepath.Join(c.dir, "n1.mnt")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	n1.args = append(append([]string{"mount", c.coordArg(), "--volume", "fs", "--name", "n1", "--policy-quiet", "0"}, mountArgs...), mnt)
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	return c, c.mountNode("n1")
}

// TestPolicies: on six bricks, a directory holding files written with the
// volume's two copies gets `plumeria policy set DIR ec=4+2 --wait`: its
// files move into 4+2 stripes in the background (progress shown), policy
// show reports compliance with every byte in ec=4+2, and the files stay
// readable and writable throughout (a writer appends and a reader checks
// while they move); a file renamed into the directory is moved too; a
// policy that makes no sense is refused and changes nothing; set back to
// the volume's own copies, the data moves home.
func TestPolicies(t *testing.T) {
	fsReady(t)
	_, rng := seed(t)
	c, mnt := startPolicyCluster(t, 6, "2", func(i int) []string { return nil }, "--policy-interval", "3s", "--log-level", "info")

	dir := filepath.Join(mnt, "archive")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for i := range 4 {
		data := make([]byte, 3<<20+rng.IntN(1<<20))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		name := filepath.Join(dir, fmt.Sprintf("f%d", i))
		if err := os.WriteFile(name, data, 0o644); err != nil {
			t.Fatal(err)
		}
		files[name] = data
	}
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("inline in its inode"), 0o644); err != nil {
		t.Fatal(err)
	}
	files[small] = []byte("inline in its inode")
	show := func(path string) map[string]any {
		t.Helper()
		var out map[string]any
		if err := json.Unmarshal(c.cli("policy", "show", path, "--json"), &out); err != nil {
			t.Fatalf("policy show %s: %v", path, err)
		}
		return out
	}
	if before := show(dir); before["compliant"] != true || before["policy"] == "ec=4+2" {
		t.Fatalf("before any policy: %v", before)
	}

	// Bad policies: refused with the reason, nothing set.
	for _, bad := range [][]string{{"ec=4+9x"}, {"ec=8+3"}, {"copies=2", "domain=planet"}} {
		r := c.run(time.Minute, nil, append([]string{"policy", "set", dir}, bad...)...)
		if r.code == 0 {
			t.Errorf("policy set %v accepted", bad)
		}
	}
	if got := show(dir); got["from"] == dir {
		t.Fatalf("a refused policy was set: %v", got)
	}

	// While the files move: a writer appends to one file and a reader
	// checks the others, for the first seconds of the move; what it
	// appended after a pass moved its file, a later pass moves.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	live := filepath.Join(dir, "live")
	var liveData []byte
	writerDone := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(live, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			writerDone <- err
			return
		}
		defer f.Close()
		for i := 0; ctx.Err() == nil; i++ {
			b := bytes.Repeat([]byte{byte(i)}, 64<<10)
			if _, err := f.Write(b); err != nil {
				writerDone <- err
				return
			}
			liveData = append(liveData, b...)
			for name, want := range files {
				if got, err := os.ReadFile(name); err != nil || !bytes.Equal(got, want) {
					writerDone <- fmt.Errorf("%s read wrong while moving: %v", name, err)
					return
				}
				break
			}
		}
		writerDone <- f.Sync()
	}()
	r := c.run(4*time.Minute, nil, "policy", "set", dir, "ec=4+2", "--wait", "--timeout", "3m")
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}
	files[live] = liveData
	if r.code != 0 || !strings.Contains(string(r.stdout), "compliant") {
		t.Fatalf("policy set --wait: %s", r)
	}
	t.Logf("policy set --wait: %s", bytes.TrimSpace(r.stdout))
	got := show(dir)
	layouts, _ := got["layouts"].(map[string]any)
	if got["compliant"] != true || got["policy"] != "ec=4+2" || layouts["ec=4+2"] == nil || layouts["home"] != nil && layouts["home"].(float64) != 0 {
		t.Fatalf("after the move: %v", got)
	}
	for name, want := range files {
		if b, err := os.ReadFile(name); err != nil || !bytes.Equal(b, want) {
			t.Fatalf("%s after the move: %d bytes, %v", name, len(b), err)
		}
	}

	// A file renamed in from elsewhere moves too.
	outside := filepath.Join(mnt, "outside")
	data := bytes.Repeat([]byte("moved in "), 300_000)
	if err := os.WriteFile(outside, data, 0o644); err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(dir, "moved-in")
	if err := os.Rename(outside, moved); err != nil {
		t.Fatal(err)
	}
	c.waitFor(2*time.Minute, "the renamed file in ec=4+2", func() (bool, string) {
		s := show(moved)
		return s["compliant"] == true, fmt.Sprint(s)
	})
	if b, err := os.ReadFile(moved); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("renamed file: %d bytes, %v", len(b), err)
	}
	files[moved] = data

	// Back to the volume's own two copies: the data moves home.
	if r := c.run(4*time.Minute, nil, "policy", "set", dir, "copies=2", "--wait", "--timeout", "3m"); r.code != 0 {
		t.Fatalf("policy set copies=2 --wait: %s", r)
	}
	got = show(dir)
	layouts, _ = got["layouts"].(map[string]any)
	if got["compliant"] != true || layouts["ec=4+2"] != nil && layouts["ec=4+2"].(float64) != 0 {
		t.Fatalf("after moving home: %v", got)
	}
	for name, want := range files {
		if b, err := os.ReadFile(name); err != nil || !bytes.Equal(b, want) {
			t.Fatalf("%s after moving home: %d bytes, %v", name, len(b), err)
		}
	}
}
