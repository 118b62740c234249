// Package e2e holds Plumeria's multi-process acceptance tests: real
// `plumeria server` processes on loopback ports, driven through the CLI and
// through the volume client, with SIGKILL, restarts and on-disk corruption.
//
// TestMain builds the binary once. Every test starts its own cluster under
// t.TempDir(); each process writes its output to DIR/NAME.log, and the tail
// of every log is printed when a test fails. Every wait polls with a
// deadline and says what it waited for.
//
// Environment:
//
//	PLUMERIA_E2E_SEED=N    replay a run's random choices (printed by each test)
//	PLUMERIA_E2E_RACE=1    build the servers with the race detector (slower)
//	PLUMERIA_E2E_KEEP=1    keep the cluster directories of failed tests
//
// Every process runs with mutual TLS: TestMain makes one CA with
// `plumeria init` and puts it in PLUMERIA_CERTS of every process it
// starts; in-process clients use its admin certificate (pki.SetDefault).
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/plumeria-fs/plumeria/coord"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pki"
	"github.com/plumeria-fs/plumeria/volume"
)

// plumeriaBin is the binary TestMain built, for the CLI; serverBin runs
// the servers (the same binary unless PLUMERIA_E2E_RACE=1).
var plumeriaBin, serverBin string

const (
	pollInterval   = 200 * time.Millisecond
	cliTimeout     = 60 * time.Second // one CLI call, unless the test says otherwise
	stopTimeout    = 10 * time.Second // SIGTERM → exit, before SIGKILL
	logTailLines   = 60
	brickDownAfter = limits.BrickDeadAfter // a silent brick is declared down after this
)

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "plumeria-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	plumeriaBin = filepath.Join(dir, "plumeria")
	serverBin = plumeriaBin
	builds := [][]string{{"build", "-o", plumeriaBin, "github.com/plumeria-fs/plumeria/cmd/plumeria"}}
	if os.Getenv("PLUMERIA_E2E_RACE") == "1" {
		// The CLI stays fast; only the servers pay for the race detector.
		serverBin = filepath.Join(dir, "plumeria-race")
		builds = append(builds, []string{"build", "-race", "-o", serverBin, "github.com/plumeria-fs/plumeria/cmd/plumeria"})
	}
	start := time.Now()
	errs := make(chan error, len(builds))
	for _, args := range builds {
		go func() {
			out, err := exec.Command("go", args...).CombinedOutput()
			if err != nil {
				err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			errs <- err
		}()
	}
	for range builds {
		if err := <-errs; err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	if testing.Verbose() {
		fmt.Printf("e2e: built %s in %v\n", serverBin, time.Since(start).Round(time.Millisecond))
	}
	if err := setupTLS(filepath.Join(dir, "certs")); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// certsDir is the certs directory of every cluster of the run (one CA:
// `plumeria init` runs once), in PLUMERIA_CERTS of every process the
// tests start; in-process clients use its admin certificate.
var certsDir string

// brickPeer is an identity with the brick role, for the tests' own
// brick-to-brick calls (FetchBlock, ShardInventory, ShardRead: what a
// brick asks a peer), which the admin role may not make. nil without TLS.
var brickPeer *pki.Identity

// dialAsBrick dials a brick as a brick peer would (with brickPeer).
func dialAsBrick(addr string) (*grpc.ClientConn, error) {
	id := pki.Default()
	if brickPeer != nil {
		id = brickPeer
	}
	return grpc.NewClient(addr, pki.DialOption(id),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limits.RPCMessageBytesMax), grpc.MaxCallSendMsgSize(limits.RPCMessageBytesMax)))
}

// setupTLS makes the run's CA in dir and turns mutual TLS on for every
// process and in-process client.
func setupTLS(dir string) error {
	if out, err := exec.Command(plumeriaBin, "init", "--certs", dir, "--cluster", "e2e").CombinedOutput(); err != nil {
		return fmt.Errorf("plumeria init: %v\n%s", err, out)
	}
	id, err := pki.Load(pki.Source{CertsDir: dir, Admin: true}, time.Now())
	if err != nil {
		return err
	}
	pki.SetDefault(id)
	if brickPeer, err = pki.Load(pki.Source{CertsDir: dir, Name: "e2e-brick-peer", Roles: []string{pki.RoleBrick}}, time.Now()); err != nil {
		return err
	}
	certsDir = dir
	return os.Setenv("PLUMERIA_CERTS", dir)
}

// seed returns the test's random seed, from PLUMERIA_E2E_SEED if set, and
// logs it so a failure can be replayed.
func seed(t *testing.T) (uint64, *rand.Rand) {
	t.Helper()
	s := uint64(time.Now().UnixNano())
	if env := os.Getenv("PLUMERIA_E2E_SEED"); env != "" {
		v, err := strconv.ParseUint(env, 10, 64)
		if err != nil {
			t.Fatalf("PLUMERIA_E2E_SEED=%q: %v", env, err)
		}
		s = v
	}
	t.Logf("seed %d (replay with PLUMERIA_E2E_SEED=%d)", s, s)
	return s, rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
}

// ports hands out loopback ports, never the same one twice in a run.
var ports struct {
	sync.Mutex
	used map[string]bool
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ports.Lock()
	defer ports.Unlock()
	if ports.used == nil {
		ports.used = map[string]bool{}
	}
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("allocate a loopback port: %v", err)
		}
		addr := l.Addr().String()
		l.Close()
		if !ports.used[addr] {
			ports.used[addr] = true
			return addr
		}
	}
	t.Fatalf("no unused loopback port after 100 tries")
	return ""
}

// deadAddr is a loopback address where nothing answers for the rest of
// the test: a socket bound there and never listening refuses every
// connection, and holds the port, so that no other process's listener
// on an ephemeral port takes it meanwhile (a port freeAddr closed may be
// reused by any process on the machine).
func deadAddr(t *testing.T) string {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("bind a loopback port: %v", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatalf("getsockname: %v", err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
}

// proc is one `plumeria server` process. It keeps its name, address, data
// directory and arguments across restarts.
type proc struct {
	name, addr, data, logPath string
	coordinator, brick        bool
	args                      []string
	env                       []string // added to the test's environment (e.g. PLUMERIA_CERTS= to run without the certs directory)

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the current incarnation exits
	waitErr  error
	expected bool // the test stopped it on purpose
	starts   int
}

func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// cluster is a set of server processes of one test. Subtests use sub(t)
// so that failures and cleanups go to the right test.
type cluster struct {
	t *testing.T
	*clusterState
}

// clusterState is what every view of a cluster shares.
type clusterState struct {
	dir   string
	procs map[string]*proc
	order []string // start order, for logs

	mu         sync.Mutex
	unexpected []string // processes that exited without being told to
	clients    []*coordclient.Client
}

// sub returns a view of c for subtest t.
func (c *cluster) sub(t *testing.T) *cluster { return &cluster{t: t, clusterState: c.clusterState} }

// newCluster makes an empty cluster whose processes are all killed, and
// whose logs are shown on failure, when the test ends.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	dir := t.TempDir()
	if os.Getenv("PLUMERIA_E2E_KEEP") == "1" {
		var err error
		if dir, err = os.MkdirTemp("", "plumeria-e2e-"+strings.ReplaceAll(t.Name(), "/", "_")+"-"); err != nil {
			t.Fatal(err)
		}
	}
	c := &cluster{t: t, clusterState: &clusterState{dir: dir, procs: map[string]*proc{}}}
	// Registered after t.TempDir, so it runs before the directory goes.
	t.Cleanup(c.cleanup)
	return c
}

func (c *cluster) cleanup() {
	t := c.t
	for _, cl := range c.clients {
		cl.Close()
	}
	for _, name := range c.order {
		p := c.procs[name]
		if p.running() {
			p.mu.Lock()
			p.expected = true
			p.cmd.Process.Kill()
			exited := p.exited
			p.mu.Unlock()
			select {
			case <-exited:
			case <-time.After(stopTimeout):
				t.Errorf("process %s (pid %d) did not die after SIGKILL", name, p.cmd.Process.Pid)
			}
		}
	}
	c.mu.Lock()
	for _, u := range c.unexpected {
		t.Errorf("%s", u)
	}
	c.mu.Unlock()
	for _, name := range c.order {
		b, err := os.ReadFile(c.procs[name].logPath)
		if err != nil {
			continue
		}
		for _, bad := range []string{"WARNING: DATA RACE", "panic: ", "fatal error: "} {
			if i := bytes.Index(b, []byte(bad)); i >= 0 {
				t.Errorf("process %s logged %q; see its log below", name, strings.TrimSpace(bad))
			}
		}
	}
	if t.Failed() {
		for _, name := range c.order {
			c.printTail(c.procs[name])
		}
		if p := c.procs["c1"]; p != nil {
			t.Logf("--- brick states by map epoch (from %s's Raft log) ---\n%s", p.name, strings.Join(mapHistory(p), "\n"))
		}
		if os.Getenv("PLUMERIA_E2E_KEEP") == "1" {
			t.Logf("cluster directory kept: %s", c.dir)
		}
	} else if os.Getenv("PLUMERIA_E2E_KEEP") == "1" {
		os.RemoveAll(c.dir)
	}
}

func (c *cluster) printTail(p *proc) {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		c.t.Logf("--- %s: no log: %v", p.name, err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	from := max(0, len(lines)-logTailLines)
	c.t.Logf("--- last %d lines of %s (%s) ---\n%s", len(lines)-from, p.name, p.logPath, strings.Join(lines[from:], "\n"))
}

// coordAddrs lists every coordinator's address, in start order.
func (c *cluster) coordAddrs() []string {
	var out []string
	for _, name := range c.order {
		if p := c.procs[name]; p.coordinator {
			out = append(out, p.addr)
		}
	}
	return out
}

// coordArg is the --coord flag naming every coordinator.
func (c *cluster) coordArg() string { return "--coord=" + strings.Join(c.coordAddrs(), ",") }

// addCoordinator starts a coordinator; the first one bootstraps, later ones
// join the first.
func (c *cluster) addCoordinator(name string) *proc {
	c.t.Helper()
	join := c.coordAddrs()
	p := c.newProc(name)
	p.coordinator = true
	p.args = []string{"server", "--name", name, "--listen", p.addr, "--data", p.data, "--coordinator"}
	if len(join) > 0 {
		p.args = append(p.args, "--join", join[0])
	}
	c.start(p)
	return p
}

// addBrick starts a brick-only process on its own host domain.
func (c *cluster) addBrick(name, host string, extra ...string) *proc {
	c.t.Helper()
	p := c.newProc(name)
	p.brick = true
	p.args = append([]string{"server", "--name", name, "--listen", p.addr, "--data", p.data, "--brick",
		"--coord", strings.Join(c.coordAddrs(), ","), "--domain", "host=" + host}, extra...)
	c.start(p)
	return p
}

func (c *cluster) newProc(name string) *proc {
	c.t.Helper()
	if c.procs[name] != nil {
		c.t.Fatalf("process %s started twice", name)
	}
	p := &proc{name: name, addr: freeAddr(c.t), data: filepath.Join(c.dir, name), logPath: filepath.Join(c.dir, name+".log")}
	c.procs[name] = p
	c.order = append(c.order, name)
	return p
}

func (c *cluster) proc(name string) *proc {
	c.t.Helper()
	p := c.procs[name]
	if p == nil {
		c.t.Fatalf("no process %s in this cluster", name)
	}
	return p
}

// start runs p (again), appending to its log.
func (c *cluster) start(p *proc) {
	c.t.Helper()
	if p.running() {
		c.t.Fatalf("start %s: already running", p.name)
	}
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatalf("open log of %s: %v", p.name, err)
	}
	p.starts++
	fmt.Fprintf(f, "=== e2e: start #%d of %s at %s: plumeria %s\n", p.starts, p.name, time.Now().Format(time.RFC3339Nano), strings.Join(p.args, " "))
	cmd := exec.Command(serverBin, p.args...)
	if p.env != nil {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = procAttr()
	if err := startCmd(cmd); err != nil {
		f.Close()
		c.t.Fatalf("start %s: %v", p.name, err)
	}
	exited := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.exited, p.expected, p.waitErr = cmd, exited, false, nil
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.waitErr = err
		expected := p.expected
		p.mu.Unlock()
		if !expected {
			c.mu.Lock()
			c.unexpected = append(c.unexpected, fmt.Sprintf("process %s (pid %d) exited on its own: %v; see its log", p.name, cmd.Process.Pid, err))
			c.mu.Unlock()
		}
		close(exited)
	}()
}

// kill sends SIGKILL to a running process and waits for it to die.
func (c *cluster) kill(name string) {
	c.t.Helper()
	if err := c.signal(name, syscall.SIGKILL, stopTimeout); err != nil {
		c.t.Fatal(err)
	}
}

// stop sends SIGTERM and waits for a clean exit, killing after stopTimeout.
func (c *cluster) stop(name string) {
	c.t.Helper()
	if err := c.signal(name, syscall.SIGTERM, stopTimeout); err != nil {
		c.t.Errorf("%v; killing it", err)
		c.kill(name)
	}
}

func (c *cluster) signal(name string, sig syscall.Signal, wait time.Duration) error {
	p := c.proc(name)
	if !p.running() {
		return fmt.Errorf("signal %v to %s: not running", sig, name)
	}
	p.mu.Lock()
	p.expected = true
	err := p.cmd.Process.Signal(sig)
	exited := p.exited
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("signal %v to %s: %w", sig, name, err)
	}
	select {
	case <-exited:
		c.logf("%s stopped (signal %d, %v)", name, int(sig), sig)
		return nil
	case <-time.After(wait):
		return fmt.Errorf("%s did not exit within %v of %v", name, wait, sig)
	}
}

// pause freezes a process (SIGSTOP) without killing it; resume (SIGCONT)
// lets it run on. A paused process keeps its sockets: peers see a hang.
func (c *cluster) pause(name string)  { c.t.Helper(); c.sendNoWait(name, syscall.SIGSTOP) }
func (c *cluster) resume(name string) { c.t.Helper(); c.sendNoWait(name, syscall.SIGCONT) }

func (c *cluster) sendNoWait(name string, sig syscall.Signal) {
	c.t.Helper()
	p := c.proc(name)
	if !p.running() {
		c.t.Fatalf("signal %v to %s: not running", sig, name)
	}
	p.mu.Lock()
	err := p.cmd.Process.Signal(sig)
	p.mu.Unlock()
	if err != nil {
		c.t.Fatalf("signal %v to %s: %v", sig, name, err)
	}
	c.logf("%s: sent %v", name, sig)
}

// restart starts a stopped process again with the same data directory.
func (c *cluster) restart(name string) {
	c.t.Helper()
	c.start(c.proc(name))
}

func (c *cluster) logf(format string, args ...any) {
	c.t.Helper()
	c.t.Logf("%s "+format, append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

// checkAlive fails the test at once if a process exited on its own.
func (c *cluster) checkAlive() {
	c.t.Helper()
	c.mu.Lock()
	u := slices.Clone(c.unexpected)
	c.mu.Unlock()
	if len(u) > 0 {
		c.t.Fatalf("%s", strings.Join(u, "\n"))
	}
}

// cliResult is the outcome of one CLI run.
type cliResult struct {
	args           []string
	stdout, stderr []byte
	code           int // exit code; -1 if it did not exit by itself (timeout)
	dur            time.Duration
}

func (r cliResult) String() string {
	return fmt.Sprintf("`plumeria %s` exit %d after %v\nstderr: %s", strings.Join(r.args, " "), r.code,
		r.dur.Round(time.Millisecond), strings.TrimSpace(string(r.stderr)))
}

// run executes the CLI with stdin (may be nil) and a timeout.
func (c *cluster) run(timeout time.Duration, stdin []byte, args ...string) cliResult {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, plumeriaBin, args...)
	cmd.WaitDelay = 5 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	start := time.Now()
	err := cmd.Run()
	r := cliResult{args: args, stdout: out.Bytes(), stderr: errb.Bytes(), dur: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		r.code = -1
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		c.t.Fatalf("run plumeria %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// cli runs the CLI and fails the test unless it exits 0; it returns stdout.
func (c *cluster) cli(args ...string) []byte {
	c.t.Helper()
	r := c.run(cliTimeout, nil, args...)
	if r.code != 0 {
		c.t.Fatalf("%s", r)
	}
	return r.stdout
}

// status runs `plumeria status --json` against every coordinator.
func (c *cluster) status() (*coord.Status, error) {
	r := c.run(20*time.Second, nil, "status", "--json", c.coordArg())
	if r.code != 0 {
		return nil, errors.New(r.String())
	}
	var st coord.Status
	if err := json.Unmarshal(r.stdout, &st); err != nil {
		return nil, fmt.Errorf("status --json: %v: %q", err, r.stdout)
	}
	if st.Version != coord.StatusVersion {
		return nil, fmt.Errorf("status --json: version %d, want %d", st.Version, coord.StatusVersion)
	}
	return &st, nil
}

// waitFor polls cond until it holds, failing the test with what was
// awaited and the last state seen once timeout passes.
func (c *cluster) waitFor(timeout time.Duration, what string, cond func() (bool, string)) {
	c.t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	last := ""
	for {
		c.checkAlive()
		ok, state := cond()
		if ok {
			c.logf("%s (after %v)", what, time.Since(start).Round(time.Millisecond))
			return
		}
		last = state
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out after %v waiting for: %s\nlast state: %s", timeout, what, last)
		}
		time.Sleep(pollInterval)
	}
}

// waitStatus polls status until cond holds.
func (c *cluster) waitStatus(timeout time.Duration, what string, cond func(*coord.Status) (bool, string)) *coord.Status {
	c.t.Helper()
	var got *coord.Status
	c.waitFor(timeout, what, func() (bool, string) {
		st, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		ok, state := cond(st)
		if ok {
			got = st
		}
		return ok, state
	})
	return got
}

func brickOf(st *coord.Status, name string) *coord.BrickStatus {
	for i := range st.Bricks {
		if st.Bricks[i].Name == name {
			return &st.Bricks[i]
		}
	}
	return nil
}

func volumeOf(st *coord.Status, name string) *coord.VolumeStatus {
	for i := range st.Volumes {
		if st.Volumes[i].Name == name {
			return &st.Volumes[i]
		}
	}
	return nil
}

// brickStates summarises bricks for failure messages.
func brickStates(st *coord.Status) string {
	var s []string
	for _, b := range st.Bricks {
		s = append(s, fmt.Sprintf("%s:%s/pgs=%d/seen=%dms", b.Name, b.State, b.PGs, b.LastSeen))
	}
	return strings.Join(s, " ")
}

func volState(st *coord.Status, name string) string {
	v := volumeOf(st, name)
	if v == nil {
		return fmt.Sprintf("no volume %s in status (bricks %s)", name, brickStates(st))
	}
	return fmt.Sprintf("volume %s: chunks=%d degraded_chunks=%d degraded_pgs=%d syncing_pgs=%d of %d pgs; bricks %s",
		name, v.Chunks, v.DegradedChunks, v.DegradedPGs, v.SyncingPGs, v.PGs, brickStates(st))
}

// waitBrickState waits until status shows the brick in state ("up"/"down").
func (c *cluster) waitBrickState(name, state string, timeout time.Duration) {
	c.t.Helper()
	c.waitStatus(timeout, fmt.Sprintf("brick %s %s", name, state), func(st *coord.Status) (bool, string) {
		b := brickOf(st, name)
		return b != nil && b.State == state, brickStates(st)
	})
}

// waitHealthy waits until the volume has no degraded or syncing PG and no
// degraded chunk, and counts at least minChunks chunks (bricks report
// their counts every ~2 s, so a count can lag the map).
func (c *cluster) waitHealthy(vol string, minChunks int64, timeout time.Duration) *coord.Status {
	c.t.Helper()
	what := fmt.Sprintf("volume %s fully replicated with at least %d chunks", vol, minChunks)
	return c.waitStatus(timeout, what, func(st *coord.Status) (bool, string) {
		v := volumeOf(st, vol)
		return v != nil && v.DegradedChunks == 0 && v.DegradedPGs == 0 && v.SyncingPGs == 0 && v.Chunks >= minChunks, volState(st, vol)
	})
}

// startCluster starts coordinators c1..cN (c1 bootstraps) and bricks b1..bM
// on hosts h1..hM, and waits until all are members and up.
func startCluster(t *testing.T, coordinators, bricks int) *cluster {
	t.Helper()
	c := newCluster(t)
	c.addCoordinator("c1")
	c.waitStatus(30*time.Second, "c1 leads", func(st *coord.Status) (bool, string) {
		return st.Leader == "c1", fmt.Sprintf("leader %q", st.Leader)
	})
	for i := 2; i <= coordinators; i++ {
		c.addCoordinator(fmt.Sprintf("c%d", i))
	}
	if coordinators > 1 {
		c.waitStatus(30*time.Second, fmt.Sprintf("%d voting coordinators", coordinators), func(st *coord.Status) (bool, string) {
			voters := 0
			for _, m := range st.Coordinators {
				if m.Voter {
					voters++
				}
			}
			return voters == coordinators && st.Leader != "", fmt.Sprintf("leader %q members %+v", st.Leader, st.Coordinators)
		})
	}
	for i := 1; i <= bricks; i++ {
		c.addBrick(fmt.Sprintf("b%d", i), fmt.Sprintf("h%d", i))
	}
	c.waitStatus(30*time.Second, fmt.Sprintf("%d bricks up", bricks), func(st *coord.Status) (bool, string) {
		up := 0
		for _, b := range st.Bricks {
			if b.State == "up" && b.LastSeen >= 0 {
				up++
			}
		}
		return up == bricks, brickStates(st)
	})
	return c
}

// client returns a coordinator client for every coordinator, closed at the end.
func (c *cluster) client() *coordclient.Client {
	c.t.Helper()
	cl, err := coordclient.New(c.coordAddrs()...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.clients = append(c.clients, cl)
	c.mu.Unlock()
	return cl
}

// createVolume creates a volume through the CLI.
func (c *cluster) createVolume(name string, replicas int, extra ...string) {
	c.t.Helper()
	c.cli(append([]string{"volume", "create", c.coordArg(), name, "--replicas", strconv.Itoa(replicas)}, extra...)...)
}

// open opens a volume through the Go API as writer.
func (c *cluster) open(name, writer string) *volume.Volume {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := volume.Open(ctx, c.client(), name, volume.Options{Writer: writer})
	if err != nil {
		c.t.Fatalf("open volume %s: %v", name, err)
	}
	c.t.Cleanup(v.Close)
	return v
}
