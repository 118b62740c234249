//go:build linux

// Package docker tests Plumeria's container deployment end to end: the
// image from the repository's Dockerfile, the three-node cluster of
// deploy/compose.yaml, and a FUSE mount on this host that reaches the
// containers at their bridge addresses, as docs/operations.md
// ("Containers") describes.
//
// It skips when docker, docker-compose (or the Compose v2 plugin) or the
// daemon is missing, when FUSE is not available, and under -short. Each run
// builds its own binary and image and uses its own compose project and /24
// (never make cluster-up's 172.31.77.0/24); everything it creates is
// removed when the test ends. Every wait has a deadline and says what it
// waited for; on failure the containers' logs and the mount's log are
// printed.
//
// Environment:
//
//	PLUMERIA_DOCKER_KEEP=1  keep the containers, volumes and image of a failed run
package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plumeria-fs/plumeria/coord"
	"github.com/plumeria-fs/plumeria/dashboard"
	"github.com/plumeria-fs/plumeria/internal/pki"
)

const (
	pollInterval  = 250 * time.Millisecond
	dockerTimeout = 3 * time.Minute  // one docker or compose command
	cliTimeout    = 30 * time.Second // one plumeria CLI call
	logTailLines  = 60
)

// cluster is one compose project of the test, and the binary that drives it.
type cluster struct {
	t       *testing.T
	root    string   // repository root
	bin     string   // static plumeria built for this run
	compose []string // docker-compose, or docker compose
	certs   string   // the certs directory of plumeria init
	project string
	image   string
	net     string // first three octets of the /24
}

// requireDocker skips unless docker, a compose and the daemon answer, and
// FUSE can mount here. It returns the compose command.
func requireDocker(t *testing.T) []string {
	t.Helper()
	if testing.Short() {
		t.Skip("docker cluster test skipped in -short mode")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("docker not available: no docker in PATH")
	}
	if out, err := output(20*time.Second, nil, "docker", "info", "--format", "{{.ServerVersion}}"); err != nil {
		t.Skipf("docker not available: daemon unreachable: %v", firstLine(out, err))
	}
	var compose []string
	if _, err := exec.LookPath("docker-compose"); err == nil {
		if _, err := output(20*time.Second, nil, "docker-compose", "version"); err == nil {
			compose = []string{"docker-compose"}
		}
	}
	if compose == nil {
		if _, err := output(20*time.Second, nil, "docker", "compose", "version"); err == nil {
			compose = []string{"docker", "compose"}
		}
	}
	if compose == nil {
		t.Skip("docker not available: neither docker-compose nor docker compose found")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse: the host mount needs it (make deps installs fuse3)")
	}
	if os.Geteuid() != 0 {
		t.Skip("the host mount runs as root")
	}
	return compose
}

// newCluster builds the binary and the image of this run; nothing runs yet.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	compose := requireDocker(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "deploy", "compose.yaml")); err != nil {
		t.Fatalf("repository root %s: %v", root, err)
	}
	id := fmt.Sprintf("%d%04d", os.Getpid(), rand.IntN(10000))
	c := &cluster{t: t, root: root, compose: compose, project: "plumeriatest" + id, image: "plumeria-test:" + id}

	buildCtx := t.TempDir() // the image's build context: bin/plumeria only
	c.bin = filepath.Join(buildCtx, "bin", "plumeria")
	start := time.Now()
	build := exec.Command("go", "build", "-o", c.bin, "./cmd/plumeria")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	c.logf("built %s in %v", c.bin, time.Since(start).Round(time.Millisecond))

	// Mutual TLS: the cluster's CA, bound into every container at /certs
	// (compose.yaml), and PLUMERIA_CERTS for the CLI and mounts here.
	c.certs = filepath.Join(t.TempDir(), "certs")
	if out, err := exec.Command(c.bin, "init", "--certs", c.certs, "--cluster", "docker").CombinedOutput(); err != nil {
		t.Fatalf("plumeria init: %v\n%s", err, out)
	}
	t.Setenv("PLUMERIA_CERTS", c.certs)

	start = time.Now()
	args := []string{"build", "-f", filepath.Join(root, "Dockerfile"), "-t", c.image, buildCtx}
	out, err := output(dockerTimeout, nil, "docker", args...)
	if err != nil && (strings.Contains(out, "buildx") || strings.Contains(out, "BuildKit")) {
		c.logf("docker build needs buildx here; retrying with the classic builder (DOCKER_BUILDKIT=0)")
		out, err = output(dockerTimeout, []string{"DOCKER_BUILDKIT=0"}, "docker", args...)
	}
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	c.logf("built image %s in %v", c.image, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if c.keep() {
			return
		}
		if out, err := output(dockerTimeout, nil, "docker", "rmi", "-f", c.image); err != nil {
			t.Errorf("remove image %s: %v\n%s", c.image, err, out)
		}
	})
	return c
}

func (c *cluster) keep() bool {
	return c.t.Failed() && os.Getenv("PLUMERIA_DOCKER_KEEP") == "1"
}

// up starts the project on a free /24 of 172.31.100-249.0/24 and waits
// until the three nodes are Raft voters with a leader, their bricks and
// lock servers up.
func (c *cluster) up() {
	c.t.Helper()
	c.t.Cleanup(c.down)
	for try := 1; ; try++ {
		c.net = fmt.Sprintf("172.31.%d", 100+rand.IntN(150))
		out, err := c.composeRun("up", "-d")
		if err == nil {
			break
		}
		if !strings.Contains(out, "overlap") || try == 5 {
			c.t.Fatalf("compose up on %s.0/24: %v\n%s", c.net, err, out)
		}
		c.logf("subnet %s.0/24 is taken; trying another", c.net)
		c.composeRun("down", "--volumes", "--remove-orphans")
	}
	c.logf("project %s up on %s.0/24", c.project, c.net)
	c.reachable(c.addr("n1"), 30*time.Second)
	c.waitStatus(90*time.Second, "3 voting coordinators with a leader, 3 bricks and 3 lock servers up", func(st *coord.Status) (bool, string) {
		voters, bricks, locks := 0, 0, 0
		for _, m := range st.Coordinators {
			if m.Voter && m.Up {
				voters++
			}
		}
		for _, b := range st.Bricks {
			if b.State == "up" && b.LastSeen >= 0 {
				bricks++
			}
		}
		for _, l := range st.LockServers {
			if l.State == "up" {
				locks++
			}
		}
		return voters == 3 && st.Leader != "" && bricks == 3 && locks == 3, summary(st, "")
	})
}

// reachable fails the test, with the likely reason, unless this host can
// open a TCP connection to addr within timeout.
func (c *cluster) reachable(addr string, timeout time.Duration) {
	c.t.Helper()
	start := time.Now()
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return
		}
		if time.Since(start) > timeout {
			c.t.Fatalf("this host cannot reach %s on the containers' bridge network after %v: %v "+
				"(the test needs Linux with the containers on this host's Docker Engine: not Docker Desktop, "+
				"not a test running inside a container)", addr, timeout, err)
		}
		time.Sleep(pollInterval)
	}
}

// down prints the containers' logs if the test failed, then removes the
// containers, the network and the volumes (unless PLUMERIA_DOCKER_KEEP=1).
func (c *cluster) down() {
	t := c.t
	if t.Failed() {
		out, _ := c.composeRun("logs", "--no-color", "--tail", fmt.Sprint(logTailLines))
		t.Logf("--- last %d lines of each container ---\n%s", logTailLines, out)
	}
	if c.keep() {
		t.Logf("kept compose project %s (%s.0/24); remove it with: PLUMERIA_NET=%s %s -f %s -p %s down -v",
			c.project, c.net, c.net, strings.Join(c.compose, " "), filepath.Join(c.root, "deploy", "compose.yaml"), c.project)
		return
	}
	if out, err := c.composeRun("down", "--volumes", "--remove-orphans", "--timeout", "10"); err != nil {
		t.Errorf("compose down: %v\n%s", err, out)
	}
	out, err := output(30*time.Second, nil, "docker", "volume", "ls", "-q", "--filter", "label=com.docker.compose.project="+c.project)
	if err == nil && strings.TrimSpace(out) != "" {
		t.Errorf("volumes of %s left after down -v: %s", c.project, out)
	}
}

func (c *cluster) composeRun(args ...string) (string, error) {
	full := slices.Concat(c.compose[1:], []string{"-f", filepath.Join(c.root, "deploy", "compose.yaml"), "-p", c.project}, args)
	return output(dockerTimeout, []string{"PLUMERIA_IMAGE=" + c.image, "PLUMERIA_NET=" + c.net, "PLUMERIA_CERTS_DIR=" + c.certs}, c.compose[0], full...)
}

// docker runs a docker command and fails the test unless it succeeds.
func (c *cluster) docker(args ...string) string {
	c.t.Helper()
	out, err := output(dockerTimeout, nil, "docker", args...)
	if err != nil {
		c.t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(out)
}

// container returns the id of a service's container.
func (c *cluster) container(service string) string {
	c.t.Helper()
	out, err := c.composeRun("ps", "-q", service)
	id := strings.TrimSpace(out)
	if err != nil || id == "" || strings.Contains(id, "\n") {
		c.t.Fatalf("container of service %s: %v: %q", service, err, out)
	}
	return id
}

func (c *cluster) addr(node string) string {
	return fmt.Sprintf("%s.%d:7001", c.net, 10+int(node[1]-'0'))
}

func (c *cluster) coordArg() string {
	return "--coord=" + c.addr("n1") + "," + c.addr("n2") + "," + c.addr("n3")
}

// cli runs the plumeria CLI on the host and fails the test unless it exits 0.
func (c *cluster) cli(args ...string) string {
	c.t.Helper()
	out, err := output(cliTimeout, nil, c.bin, args...)
	if err != nil {
		c.t.Fatalf("plumeria %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (c *cluster) status() (*coord.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, "status", "--json", c.coordArg())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("status --json: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	var st coord.Status
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("status --json: %v: %q", err, out)
	}
	if st.Version != coord.StatusVersion {
		return nil, fmt.Errorf("status --json: version %d, want %d", st.Version, coord.StatusVersion)
	}
	return &st, nil
}

// waitDashboard polls the dashboard's view (/api/view on node's
// --metrics-listen, port 7080) until it shows brick in state.
func (c *cluster) waitDashboard(timeout time.Duration, node, brick, state string) {
	c.t.Helper()
	url := fmt.Sprintf("https://%s.%d:7080/api/view", c.net, 10+int(node[1]-'0'))
	// HTTPS with the operator's certificate: the port asks for one.
	admin, err := pki.Load(pki.Source{CertsDir: c.certs, Admin: true}, time.Now())
	if err != nil {
		c.t.Fatal(err)
	}
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: admin.ClientConfig()}}
	last := ""
	for deadline := time.Now().Add(timeout); ; {
		var v dashboard.View
		resp, err := cl.Get(url)
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
		}
		if err == nil {
			for _, b := range v.Bricks {
				if b.Name == brick {
					last = b.State
				}
			}
			if last == state {
				c.logf("dashboard at %s shows %s %s", url, brick, state)
				return
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("dashboard at %s: brick %s not %s after %v (last: %s)", url, brick, state, timeout, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitStatus polls status until cond holds and returns that status.
func (c *cluster) waitStatus(timeout time.Duration, what string, cond func(*coord.Status) (bool, string)) *coord.Status {
	c.t.Helper()
	start := time.Now()
	last := ""
	for {
		st, err := c.status()
		if err == nil {
			var ok bool
			if ok, last = cond(st); ok {
				c.logf("%s (after %v)", what, time.Since(start).Round(time.Millisecond))
				return st
			}
		} else {
			last = err.Error()
		}
		if time.Since(start) > timeout {
			c.t.Fatalf("timed out after %v waiting for: %s\nlast state: %s", timeout, what, last)
		}
		time.Sleep(pollInterval)
	}
}

func (c *cluster) logf(format string, args ...any) {
	c.t.Helper()
	c.t.Logf("%s "+format, append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

// hostMount is `plumeria mount` running on this host.
type hostMount struct {
	dir, log string
	cmd      *exec.Cmd
	exited   chan struct{}
	err      error // valid once exited is closed
}

// mount starts `plumeria mount` as a child process and waits until the
// kernel shows the mount. The mount is taken down when the test ends.
func (c *cluster) mount(volume, name string) *hostMount {
	c.t.Helper()
	tmp := c.t.TempDir()
	m := &hostMount{dir: filepath.Join(tmp, "mnt"), log: filepath.Join(tmp, "mount.log"), exited: make(chan struct{})}
	if err := os.Mkdir(m.dir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	f, err := os.Create(m.log)
	if err != nil {
		c.t.Fatal(err)
	}
	m.cmd = exec.Command(c.bin, "mount", c.coordArg(), "--volume", volume, "--name", name, m.dir)
	m.cmd.Stdout, m.cmd.Stderr = f, f
	if err := startChild(m.cmd); err != nil {
		f.Close()
		c.t.Fatalf("start plumeria mount: %v", err)
	}
	go func() { m.err = m.cmd.Wait(); f.Close(); close(m.exited) }()
	// Registered after t.TempDir, so it runs before the directory goes.
	c.t.Cleanup(func() {
		select {
		case <-m.exited:
		default:
			m.cmd.Process.Kill()
			<-m.exited
		}
		unix.Unmount(m.dir, unix.MNT_DETACH) // a killed server leaves the mount behind
		if c.t.Failed() {
			c.t.Logf("--- mount log (%s) ---\n%s", m.log, tail(m.log))
		}
	})
	start := time.Now()
	for !mounted(m.dir) {
		select {
		case <-m.exited:
			c.t.Fatalf("plumeria mount exited before mounting: %v\n%s", m.err, tail(m.log))
		case <-time.After(pollInterval):
		}
		if time.Since(start) > 60*time.Second {
			c.t.Fatalf("%s not mounted after 60 s\n%s", m.dir, tail(m.log))
		}
	}
	c.logf("volume %s mounted on %s as %s (after %v)", volume, m.dir, name, time.Since(start).Round(time.Millisecond))
	return m
}

// unmount asks the mount to leave (SIGTERM, as an operator's Ctrl-C) and
// requires a clean exit: everything written back, the mount gone.
func (m *hostMount) unmount(t *testing.T, timeout time.Duration) {
	t.Helper()
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("signal plumeria mount: %v", err)
	}
	select {
	case <-m.exited:
	case <-time.After(timeout):
		t.Fatalf("plumeria mount did not exit within %v of SIGTERM\n%s", timeout, tail(m.log))
	}
	if m.err != nil {
		t.Fatalf("plumeria mount exited with %v\n%s", m.err, tail(m.log))
	}
	if mounted(m.dir) {
		t.Fatalf("%s still mounted after plumeria mount exited", m.dir)
	}
}

func mounted(dir string) bool {
	b, _ := os.ReadFile("/proc/self/mounts")
	return bytes.Contains(b, []byte(" "+dir+" fuse.plumeria "))
}

// within runs fn and fails the test if it errs or takes longer than d (a
// hung FUSE call must not hang the test; the cleanup detaches the mount).
func within(t *testing.T, d time.Duration, what string, fn func() error) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s %s (%v)", time.Now().Format("15:04:05.000"), what, time.Since(start).Round(time.Millisecond))
	case <-time.After(d):
		t.Fatalf("%s: not done after %v", what, d)
	}
}

// output runs a command with extra environment and a timeout, returning
// its combined output.
func output(timeout time.Duration, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (timeout %v)", ctx.Err(), timeout)
	}
	return string(out), err
}

func firstLine(out string, err error) string {
	if l, _, _ := strings.Cut(strings.TrimSpace(out), "\n"); l != "" {
		return l
	}
	return err.Error()
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-logTailLines):], "\n")
}

// summary describes the cluster (and volume vol, if given) for failure messages.
func summary(st *coord.Status, vol string) string {
	var s []string
	s = append(s, fmt.Sprintf("leader %q", st.Leader))
	for _, m := range st.Coordinators {
		s = append(s, fmt.Sprintf("coord %s up=%v voter=%v", m.Name, m.Up, m.Voter))
	}
	for _, b := range st.Bricks {
		s = append(s, fmt.Sprintf("brick %s %s pgs=%d", b.Name, b.State, b.PGs))
	}
	for _, l := range st.LockServers {
		s = append(s, fmt.Sprintf("lock %s %s groups=%d", l.Name, l.State, l.Groups))
	}
	if v := volumeOf(st, vol); v != nil {
		s = append(s, fmt.Sprintf("volume %s chunks=%d degraded_chunks=%d degraded_pgs=%d syncing_pgs=%d",
			v.Name, v.Chunks, v.DegradedChunks, v.DegradedPGs, v.SyncingPGs))
	}
	return strings.Join(s, "; ")
}

func volumeOf(st *coord.Status, name string) *coord.VolumeStatus {
	for i := range st.Volumes {
		if st.Volumes[i].Name == name {
			return &st.Volumes[i]
		}
	}
	return nil
}

func brickOf(st *coord.Status, name string) *coord.BrickStatus {
	for i := range st.Bricks {
		if st.Bricks[i].Name == name {
			return &st.Bricks[i]
		}
	}
	return nil
}
