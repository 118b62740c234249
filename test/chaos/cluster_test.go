package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plumeria-fs/plumeria/coord"
	"github.com/plumeria-fs/plumeria/test/chaos/check"
)

const (
	serverPort = 7001 // coordinator + brick (one port, netmux)
	lockPort   = 7002 // lock server, its own process so it can be cut off alone
	volumeName = "fs"
)

// healWait bounds the wait for the cluster to be whole after healing;
// mountWait one mount attempt (incl. waiting out the lease of the node's
// last session and its recovery). Shorter in the short mode, which runs
// under go test's default 10-minute timeout.
func healWait() time.Duration {
	if long() {
		return 5 * time.Minute
	}
	return 2 * time.Minute
}

func mountWait() time.Duration {
	if long() {
		return 3 * time.Minute
	}
	return time.Minute
}

// clusterOpts shapes a run's cluster.
type clusterOpts struct {
	netns        bool // hosts in network namespaces; else loopback addresses
	servers      int  // server hosts (s1..)
	coordinators int  // how many of them run a coordinator (1 or all)
	fsNodes      int  // fs node hosts (f1..)
	replicas     int
	lockAlone    bool // lock servers as their own processes on lockPort
	brickMiB     int  // > 0: each brick's directory is a tmpfs of this size
	fileVersions bool // the volume keeps file versions (format --file-versions)
	// policy, if set, is the availability policy of the file system's root
	// (e.g. "ec=2+1"): every fs node's mover codes files into stripes in
	// the background (--policy-quiet 0, a pass every few seconds) while
	// the workload and the faults run.
	policy string
}

// world is one run: hosts, processes, fs nodes and what was found.
type world struct {
	t     *testing.T
	name  string
	seed  uint64
	dir   string
	bin   string
	opts  clusterOpts
	net   *network
	hosts map[string]*host
	procs map[string]*proc
	order []string
	fs    map[string]*fsNode
	fsOrd []string
	start time.Time // monotonic origin of every recorded time

	closing atomic.Bool
	mu      sync.Mutex
	sum     check.Summary
	found   []check.Anomaly // found by the harness itself (crashes, no progress, fsck)

	lastStderr string              // of the last CLI call that succeeded
	inodes     map[uint64][]string // inode number → the workload files it was given to
	histories  map[string][]check.Op
	syncs      map[string]time.Duration // "node#inc" → latest start of an fsync that returned OK
}

// noteSync records that an fsync of f's incarnation inc, started at at,
// returned OK.
func (w *world) noteSync(f *fsNode, inc int, at time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.syncs == nil {
		w.syncs = map[string]time.Duration{}
	}
	k := fmt.Sprintf("%s#%d", f.name, inc)
	if at > w.syncs[k] {
		w.syncs[k] = at
	}
}

func (w *world) syncedFrom(node string, inc int) (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.syncs[fmt.Sprintf("%s#%d", node, inc)]
	return at, ok
}

func (w *world) crashed(node string, inc int) bool {
	f := w.fs[node]
	return f != nil && f.wasCrashed(inc)
}

// fsNode is one fs node: a mount process and its mount point. Workers
// read gen before and after each operation: if it changed, or the node
// was down, the operation overlapped a crash or remount.
type fsNode struct {
	w    *world
	name string
	p    *proc
	mnt  string

	mu         sync.Mutex
	up         bool
	gen        int          // bumped on every up/down change
	inc        int          // successful mounts so far
	crashed    map[int]bool // incarnations that ended by kill, fence or lost lease
	remounting bool
}

func (f *fsNode) state() (gen int, up bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen, f.up
}

func (f *fsNode) incarnation() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inc
}

func (f *fsNode) wasCrashed(inc int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.crashed[inc]
}

// setDown marks the node down; crashed: its current incarnation ended
// without writing back.
func (f *fsNode) setDown(crashed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.up {
		f.up = false
		f.gen++
	}
	if crashed {
		f.crashed[f.inc] = true
	}
}

func newWorld(t *testing.T, name string, seed uint64, o clusterOpts) *world {
	t.Helper()
	w := &world{t: t, name: name, seed: seed, dir: runDir(t, name), bin: plumeriaBin(t), opts: o,
		hosts: map[string]*host{}, procs: map[string]*proc{}, fs: map[string]*fsNode{}}
	os.WriteFile(filepath.Join(w.dir, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o644)
	var names []string
	for i := 1; i <= o.servers; i++ {
		names = append(names, fmt.Sprintf("s%d", i))
	}
	for i := 1; i <= o.fsNodes; i++ {
		names = append(names, fmt.Sprintf("f%d", i))
	}
	if o.netns {
		n, err := newNetwork(names)
		if err != nil {
			t.Fatalf("network: %v", err)
		}
		w.net = n
		for _, h := range n.hosts {
			w.hosts[h.name] = h
		}
	} else {
		base := 1 + os.Getpid()%200
		for i, name := range names {
			w.hosts[name] = &host{name: name, ip: fmt.Sprintf("127.%d.%d.%d", base, 1+time.Now().Nanosecond()%200, 10+i)}
		}
	}
	// Registered after runDir's cleanup, so it runs before: stop every
	// process, detach the mounts, tear the network down.
	remove := atCleanup(w.teardown)
	t.Cleanup(remove)
	w.start = time.Now()
	w.sum.Runs, w.sum.Seeds = 1, []uint64{seed}
	return w
}

// now is the monotonic time since the run started.
func (w *world) now() time.Duration { return time.Since(w.start) }

func (w *world) logf(format string, args ...any) {
	w.t.Logf("%7.2fs %s", w.now().Seconds(), fmt.Sprintf(format, args...))
}

// anomaly records a problem the harness saw itself.
func (w *world) anomaly(a check.Anomaly) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.found = append(w.found, a)
}

func (w *world) foundCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.found)
}

func (w *world) fault(kind string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sum.Fault(kind)
}

func (w *world) note(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sum.Note(s)
}

func (w *world) teardown() {
	w.closing.Store(true)
	for i := len(w.order) - 1; i >= 0; i-- {
		p := w.procs[w.order[i]]
		p.signal(syscall.SIGCONT)
		p.stop(syscall.SIGKILL, time.Second)
	}
	for _, f := range w.fs {
		for mounted(f.mnt) {
			if unix.Unmount(f.mnt, unix.MNT_DETACH) != nil {
				break
			}
		}
	}
	unmountUnder(w.dir)
	if w.net != nil {
		w.net.remove()
	}
}

func (w *world) serverAddr(h *host) string { return fmt.Sprintf("%s:%d", h.ip, serverPort) }

// coordArg names every coordinator.
func (w *world) coordArg() string {
	var a []string
	for i := 1; i <= w.opts.coordinators; i++ {
		a = append(a, w.serverAddr(w.hosts[fmt.Sprintf("s%d", i)]))
	}
	return "--coord=" + strings.Join(a, ",")
}

func (w *world) newProc(name, role string, h *host, args ...string) *proc {
	p := &proc{name: name, role: role, host: h, bin: w.bin, args: args, logPath: filepath.Join(w.dir, name+".log")}
	w.procs[name] = p
	w.order = append(w.order, name)
	return p
}

// cli runs the plumeria CLI on the ctl host (or here, on loopback).
func (w *world) cli(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, w.bin, args...)
	cmd.WaitDelay = 5 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	ns := ""
	if w.net != nil {
		ns = w.net.ctl.nsPath()
	}
	err := startIn(ns, cmd)
	if err == nil {
		err = cmd.Wait()
	}
	if ctx.Err() != nil {
		return out.String(), fmt.Errorf("plumeria %s: timed out after %v\nstderr: %s", strings.Join(args, " "), timeout, errb.String())
	}
	if err != nil {
		return out.String(), fmt.Errorf("plumeria %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	w.mu.Lock()
	w.lastStderr = errb.String()
	w.mu.Unlock()
	return out.String(), nil
}

func (w *world) status() (*coord.Status, error) {
	out, err := w.cli(20*time.Second, "status", "--json", w.coordArg())
	if err != nil {
		return nil, err
	}
	var st coord.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return nil, fmt.Errorf("status --json: %v: %q", err, out)
	}
	return &st, nil
}

// waitStatus polls status until cond holds or timeout passes.
func (w *world) waitStatus(timeout time.Duration, what string, cond func(*coord.Status) (bool, string)) error {
	start := time.Now()
	last := ""
	for time.Since(start) < timeout {
		st, err := w.status()
		if err != nil {
			last = err.Error()
		} else {
			ok, s := cond(st)
			if ok {
				w.logf("%s (after %v)", what, time.Since(start).Round(time.Millisecond))
				return nil
			}
			last = s
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("timed out after %v waiting for %s; last state: %s", timeout, what, last)
}

func brickSummary(st *coord.Status) (up int, s string) {
	var parts []string
	for _, b := range st.Bricks {
		if b.State == "up" {
			up++
		}
		parts = append(parts, b.Name+":"+b.State)
	}
	return up, strings.Join(parts, " ")
}

func lockSummary(st *coord.Status) (up int, s string) {
	var parts []string
	for _, l := range st.LockServers {
		if l.State == "up" {
			up++
		}
		parts = append(parts, fmt.Sprintf("%s:%s/%d", l.Name, l.State, l.Groups))
	}
	return up, strings.Join(parts, " ")
}

// startCluster starts every server and lock server, formats the volume
// and mounts every fs node.
func (w *world) startCluster() {
	t, o := w.t, w.opts
	for i := 1; i <= o.servers; i++ {
		name := fmt.Sprintf("s%d", i)
		h := w.hosts[name]
		data := filepath.Join(w.dir, name)
		if o.brickMiB > 0 {
			w.tmpfs(filepath.Join(data, "brick"), o.brickMiB)
		}
		args := []string{"server", "--name", name, "--listen", w.serverAddr(h), "--data", data, "--brick", "--domain", "host=" + name}
		switch {
		case i <= o.coordinators && i == 1:
			args = append(args, "--coordinator")
		case i <= o.coordinators:
			args = append(args, "--coordinator", "--join", w.serverAddr(w.hosts["s1"]))
		default:
			args = append(args, "--coord", strings.TrimPrefix(w.coordArg(), "--coord="))
		}
		if !o.lockAlone {
			args = append(args, "--lock")
		}
		p := w.newProc(name, "server", h, args...)
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if err := w.waitStatus(time.Minute, "s1 leads", func(st *coord.Status) (bool, string) {
				return st.Leader == "s1", "leader " + st.Leader
			}); err != nil {
				w.fatal(err)
			}
		}
	}
	err := w.waitStatus(time.Minute, "coordinators and bricks up", func(st *coord.Status) (bool, string) {
		voters := 0
		for _, c := range st.Coordinators {
			if c.Voter {
				voters++
			}
		}
		up, s := brickSummary(st)
		return voters == o.coordinators && up == o.servers && st.Leader != "", fmt.Sprintf("%d voters; bricks %s", voters, s)
	})
	if err != nil {
		w.fatal(err)
	}
	if o.lockAlone {
		coords := strings.TrimPrefix(w.coordArg(), "--coord=")
		for i := 1; i <= o.servers; i++ {
			h := w.hosts[fmt.Sprintf("s%d", i)]
			name := fmt.Sprintf("l%d", i)
			p := w.newProc(name, "lock", h, "server", "--name", name, "--listen", fmt.Sprintf("%s:%d", h.ip, lockPort),
				"--data", filepath.Join(w.dir, name), "--lock", "--coord", coords)
			if err := p.start(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.waitStatus(time.Minute, "lock servers up", func(st *coord.Status) (bool, string) {
		up, s := lockSummary(st)
		return up == o.servers || (!o.lockAlone && up >= 1), s
	}); err != nil {
		w.fatal(err)
	}
	args := []string{"format", w.coordArg(), "--volume", volumeName, "--replicas", strconv.Itoa(o.replicas)}
	if o.fileVersions {
		args = append(args, "--file-versions")
	}
	if _, err := w.cli(2*time.Minute, args...); err != nil {
		w.fatal(err)
	}
	for i := 1; i <= o.fsNodes; i++ {
		name := fmt.Sprintf("f%d", i)
		mnt := filepath.Join(w.dir, name+".mnt")
		if err := os.MkdirAll(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		args := []string{"mount", w.coordArg(), "--volume", volumeName, "--name", name, "--log-level", "info"}
		if o.policy != "" {
			args = append(args, "--policy-quiet", "0", "--policy-interval", "5s")
		}
		p := w.newProc(name, "fs", w.hosts[name], append(args, mnt)...)
		f := &fsNode{w: w, name: name, p: p, mnt: mnt, crashed: map[int]bool{}}
		w.fs[name] = f
		w.fsOrd = append(w.fsOrd, name)
		if err := f.mount(); err != nil {
			w.fatal(err)
		}
	}
	if o.policy != "" {
		root := w.fs[w.fsOrd[0]].mnt
		if err := unix.Setxattr(root, "user.plumeria.policy", []byte(o.policy), 0); err != nil {
			w.fatal(fmt.Errorf("policy %s on the root: %w", o.policy, err))
		}
	}
}

// fatal ends the run with err and the tails of every log.
func (w *world) fatal(err error) {
	w.t.Helper()
	w.dumpLogs()
	w.t.Fatalf("seed %d: %v", w.seed, err)
}

func (w *world) dumpLogs() {
	for _, name := range w.order {
		w.t.Logf("--- last lines of %s (%s) ---\n%s", name, w.procs[name].logPath, w.procs[name].tail(40))
	}
}

// tmpfs mounts a tmpfs of size MiB at dir (a brick's disk that can fill up).
func (w *world) tmpfs(dir string, mib int) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%dm", mib)); err != nil {
		w.t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
}

// mount starts the fs node's mount process and waits for the kernel to
// show the mount. It bumps gen and inc when the node is up.
func (f *fsNode) mount() error {
	f.setDown(false)
	for i := 0; mounted(f.mnt) && i < 10; i++ {
		unix.Unmount(f.mnt, unix.MNT_DETACH)
	}
	if f.p.running() {
		f.p.stop(syscall.SIGKILL, time.Second)
	}
	start := time.Now()
	if err := f.p.start(); err != nil {
		return err
	}
	f.p.mu.Lock()
	exited := f.p.exited
	f.p.mu.Unlock()
	for !mounted(f.mnt) {
		select {
		case <-exited:
			return fmt.Errorf("mount %s exited: %v\n%s", f.name, f.p.exitErr(), lastLines(f.p.logSince(), 10))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Since(start) > mountWait() {
			f.p.stop(syscall.SIGKILL, time.Second)
			return fmt.Errorf("mount %s: not mounted after %v\n%s", f.name, mountWait(), lastLines(f.p.logSince(), 10))
		}
		if f.w.closing.Load() {
			return errors.New("run closing")
		}
	}
	f.mu.Lock()
	f.up = true
	f.gen++
	f.inc++
	f.mu.Unlock()
	f.w.logf("%s mounted (incarnation %d) after %v", f.name, f.incarnation(), time.Since(start).Round(time.Millisecond))
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// kill SIGKILLs the fs node; it stays down until remounted.
func (f *fsNode) kill() {
	f.setDown(true)
	f.p.stop(syscall.SIGKILL, time.Second)
}

// remountAsync kills the node if it runs and mounts it again, retrying
// until it is up or the run closes. done (may be nil) is called after.
func (f *fsNode) remountAsync(why string, done func()) {
	f.mu.Lock()
	if f.remounting {
		f.mu.Unlock()
		if done != nil {
			done()
		}
		return
	}
	f.remounting = true
	f.mu.Unlock()
	go func() {
		defer func() {
			f.mu.Lock()
			f.remounting = false
			f.mu.Unlock()
			if done != nil {
				done()
			}
		}()
		f.w.logf("%s: remount (%s)", f.name, why)
		if f.p.running() {
			f.kill()
		}
		for attempt := 1; !f.w.closing.Load(); attempt++ {
			err := f.mount()
			if err == nil {
				return
			}
			f.w.logf("%s: mount attempt %d failed: %v", f.name, attempt, err)
			time.Sleep(2 * time.Second)
		}
	}()
}

func (f *fsNode) isRemounting() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.remounting
}

// unmount stops the node cleanly (SIGTERM: unmount, write back, free the
// log slot) and reports how it went.
func (f *fsNode) unmount() error {
	f.setDown(false)
	if !f.p.running() {
		return fmt.Errorf("%s not running", f.name)
	}
	err := f.p.stop(syscall.SIGTERM, 90*time.Second)
	if err == nil {
		if e := f.p.exitErr(); e != nil {
			err = fmt.Errorf("exit: %v", e)
		}
	}
	for i := 0; mounted(f.mnt) && i < 10; i++ {
		unix.Unmount(f.mnt, unix.MNT_DETACH)
	}
	if err != nil {
		return fmt.Errorf("unmount %s: %w\n%s", f.name, err, lastLines(f.p.logSince(), 15))
	}
	return nil
}

// doctor keeps the cluster in the shape the nemesis left it: it restarts
// lock servers that stopped themselves (documented: a lock server the
// coordinator no longer vouches for exits), remounts fs nodes that lost
// their lease (documented: remount needed), and reports any other process
// that died on its own. It returns when ctx ends.
func (w *world) doctor(ctx context.Context) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	lastStart := map[string]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if w.closing.Load() {
			return
		}
		for _, name := range w.order {
			p := w.procs[name]
			if p.role == "fs" || p.isHeld() || p.running() {
				continue
			}
			if time.Since(lastStart[name]) < 2*time.Second {
				continue
			}
			lastStart[name] = time.Now()
			if p.role == "lock" {
				w.note("lock servers the coordinator stopped vouching for exited and were restarted (documented behaviour)")
				w.mu.Lock()
				w.sum.Fault("restart-lock (after it stopped itself)")
				w.mu.Unlock()
			} else if p.starts > 0 {
				w.anomaly(check.Anomaly{Kind: "process died", Key: name,
					Detail: fmt.Sprintf("%s exited on its own: %v\n%s", name, p.exitErr(), lastLines(p.logSince(), 15))})
			}
			w.logf("%s not running (%v): restarting", name, p.exitErr())
			if err := p.start(); err != nil {
				w.logf("restart %s: %v", name, err)
			}
		}
		for _, name := range w.fsOrd {
			f := w.fs[name]
			_, up := f.state()
			if !up || f.isRemounting() {
				continue
			}
			f.p.mu.Lock()
			paused := f.p.paused
			f.p.mu.Unlock()
			if paused {
				continue
			}
			switch {
			case !f.p.running():
				w.anomaly(check.Anomaly{Kind: "process died", Key: name,
					Detail: fmt.Sprintf("fs node %s exited on its own: %v\n%s", name, f.p.exitErr(), lastLines(f.p.logSince(), 15))})
				f.setDown(true)
				f.remountAsync("exited on its own", nil)
			case strings.Contains(f.p.logSince(), "remount needed"):
				w.mu.Lock()
				w.sum.Fault("remount (fs node stopped: lease lost or fenced)")
				w.mu.Unlock()
				f.setDown(true)
				why := firstMatch(f.p.logSince(), "remount needed")
				if lost := firstMatch(f.p.logSince(), `msg="lock lease lost"`); lost != "" {
					why += "; " + lost // the clerk's reason
				}
				f.remountAsync("it stopped itself: "+why, nil)
			}
		}
	}
}

func firstMatch(log, s string) string {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, s) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// scanLogs reports panics, fatal errors and races in any process log.
func (w *world) scanLogs() {
	for _, name := range w.order {
		b, _ := os.ReadFile(w.procs[name].logPath)
		for _, bad := range []string{"panic: ", "fatal error: ", "WARNING: DATA RACE"} {
			if i := bytes.Index(b, []byte(bad)); i >= 0 {
				end := min(len(b), i+3000)
				w.anomaly(check.Anomaly{Kind: "process crashed", Key: name,
					Detail: fmt.Sprintf("%s logged %q:\n%s", name, strings.TrimSpace(bad), b[i:end])})
			}
		}
	}
}

// verifyReplicas runs `plumeria vdisk verify` (no writes may be under way):
// a difference may be a fault its primary is still reporting, so it must
// last over a few tries.
func (w *world) verifyReplicas() error {
	var err error
	for try := 0; try < 3; try++ {
		if try > 0 {
			time.Sleep(5 * time.Second)
		}
		var out string
		if out, err = w.cli(5*time.Minute, "vdisk", "verify", w.coordArg(), "--volume", volumeName); err == nil {
			w.logf("%s", strings.TrimSpace(out))
			return nil
		}
	}
	return err
}

// fsck runs the offline checker; everything must be unmounted.
func (w *world) fsck() error {
	_, err := w.cli(10*time.Minute, "fsck", w.coordArg(), "--volume", volumeName)
	if err != nil {
		return err
	}
	w.mu.Lock()
	summary := lastLines(w.lastStderr, 1)
	w.mu.Unlock()
	w.logf("fsck clean: %s", strings.TrimSpace(summary))
	return nil
}
