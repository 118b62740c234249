package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Names: every run owns a prefix plcNNN (NNN = pid % 1000, bumped while
// a live run holds it): namespaces plcNNN-HOST and plcNNN-hub (the
// bridge); the veths live inside them, so deleting the namespaces removes
// everything. /run/plumeria-chaos/plcNNN holds the owner's pid, so a
// later run sweeps what a killed one left and leaves live runs alone.
const ownerDir = "/run/plumeria-chaos"

var nsName = regexp.MustCompile(`^(plc[0-9]{3})-`)

// cleanups run at the end of a test, on SIGINT/SIGTERM and from TestMain,
// each once.
var cleanups struct {
	sync.Mutex
	next int
	fns  map[int]func()
}

// atCleanup registers fn; the returned func runs it now (once) instead.
func atCleanup(fn func()) func() {
	cleanups.Lock()
	defer cleanups.Unlock()
	if cleanups.fns == nil {
		cleanups.fns = map[int]func(){}
	}
	id := cleanups.next
	cleanups.next++
	cleanups.fns[id] = fn
	return func() {
		cleanups.Lock()
		f, ok := cleanups.fns[id]
		delete(cleanups.fns, id)
		cleanups.Unlock()
		if ok {
			f()
		}
	}
}

func cleanupAll() {
	cleanups.Lock()
	var ids []int
	for id := range cleanups.fns {
		ids = append(ids, id)
	}
	fns := cleanups.fns
	cleanups.fns = nil
	cleanups.Unlock()
	slices.Sort(ids)
	for i := len(ids) - 1; i >= 0; i-- { // last registered first
		fns[ids[i]]()
	}
}

// sh runs a command with a timeout and returns its combined output.
func sh(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// host is one machine of the cluster: a network namespace with one
// address on the run's bridge, or an address on loopback.
type host struct {
	name string
	ns   string // network namespace; "" on loopback
	ip   string
}

func (h *host) nsPath() string {
	if h.ns == "" {
		return ""
	}
	return "/run/netns/" + h.ns
}

// exec runs a command inside the host's network namespace.
func (h *host) exec(name string, args ...string) (string, error) {
	if h.ns == "" {
		return sh(30*time.Second, name, args...)
	}
	return sh(30*time.Second, "ip", append([]string{"netns", "exec", h.ns, name}, args...)...)
}

// network is a run's namespaces: a hub namespace holding the bridge, one
// namespace per host with a veth to the bridge, and ctl, a host the CLI
// runs in. The bridge lives in its own namespace so the machine's own
// firewall (a FORWARD policy of DROP with br_netfilter, as Docker sets
// up) never sees the cluster's packets.
type network struct {
	prefix string
	hub    string // namespace of the bridge
	subnet string // first three octets of the /24
	hosts  []*host
	ctl    *host
	remove func()
}

// netnsUsable says why network namespaces cannot be used here, or "".
func netnsUsable() string {
	if _, err := exec.LookPath("ip"); err != nil {
		return "no ip command (iproute2)"
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return "no iptables"
	}
	probe := fmt.Sprintf("plcprobe%d", os.Getpid()%100000)
	if _, err := sh(10*time.Second, "ip", "netns", "add", probe); err != nil {
		return "ip netns unavailable: " + err.Error()
	}
	sh(10*time.Second, "ip", "netns", "del", probe)
	return ""
}

// claimPrefix picks a free prefix for this process and records the owner.
func claimPrefix() (string, error) {
	if err := os.MkdirAll(ownerDir, 0o755); err != nil {
		return "", err
	}
	for i := 0; i < 1000; i++ {
		p := fmt.Sprintf("plc%03d", (os.Getpid()+i)%1000)
		f := filepath.Join(ownerDir, p)
		b, err := os.ReadFile(f)
		if err == nil {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			if pid == os.Getpid() {
				return p, nil
			}
			if alive(pid) {
				continue
			}
		}
		if err := os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return "", err
		}
		return p, nil
	}
	return "", errors.New("no free network prefix (1000 live chaos runs?)")
}

// alive reports whether pid is a running process other than a zombie.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) S ...
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// sweepStale removes the namespaces, bridges and mounts of chaos runs
// whose process is gone.
func sweepStale() {
	out, _ := sh(10*time.Second, "ip", "netns", "list")
	dead := map[string]bool{}
	owned := func(prefix string) bool {
		b, err := os.ReadFile(filepath.Join(ownerDir, prefix))
		if err != nil {
			return false
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return pid == os.Getpid() || alive(pid)
	}
	for _, line := range strings.Split(out, "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		m := nsName.FindStringSubmatch(name)
		if m == nil || owned(m[1]) {
			continue
		}
		dead[m[1]] = true
		sh(10*time.Second, "ip", "netns", "del", name)
	}
	for p := range dead {
		os.Remove(filepath.Join(ownerDir, p))
	}
	sweepMounts()
}

// sweepMounts lazily unmounts what dead runs left mounted under
// plumeria-chaos-* directories (FUSE mounts of killed fs nodes, tmpfs).
func sweepMounts() {
	for _, m := range mountsUnder(os.TempDir() + "/plumeria-chaos-") {
		runDir := m
		for filepath.Dir(runDir) != filepath.Clean(os.TempDir()) && runDir != "/" {
			runDir = filepath.Dir(runDir)
		}
		b, err := os.ReadFile(filepath.Join(runDir, "owner"))
		if err == nil {
			if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid == os.Getpid() || alive(pid) {
				continue
			}
		}
		unix.Unmount(m, unix.MNT_DETACH)
	}
}

// mountsUnder lists mount points that start with prefix, deepest first.
func mountsUnder(prefix string) []string {
	b, _ := os.ReadFile("/proc/self/mounts")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && strings.HasPrefix(unescapeMount(f[1]), prefix) {
			out = append(out, unescapeMount(f[1]))
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// unmountUnder detaches every mount under dir.
func unmountUnder(dir string) {
	for _, m := range mountsUnder(dir + "/") {
		unix.Unmount(m, unix.MNT_DETACH)
	}
}

// mounted reports whether a FUSE file system of plumeria is mounted at dir.
func mounted(dir string) bool {
	b, _ := os.ReadFile("/proc/self/mounts")
	return bytes.Contains(b, []byte(" "+dir+" fuse.plumeria "))
}

// newNetwork makes the hub, the bridge and one namespace per host name.
func newNetwork(names []string) (*network, error) {
	sweepStale()
	prefix, err := claimPrefix()
	if err != nil {
		return nil, err
	}
	n := &network{prefix: prefix, hub: prefix + "-hub", subnet: freeSubnet()}
	n.remove = atCleanup(n.teardown)
	steps := [][]string{
		{"netns", "add", n.hub},
		{"-n", n.hub, "link", "add", "br0", "type", "bridge"},
		{"-n", n.hub, "link", "set", "br0", "up"},
		{"-n", n.hub, "link", "set", "lo", "up"},
	}
	all := append([]string{"ctl"}, names...)
	for i, name := range all {
		h := &host{name: name, ns: prefix + "-" + name, ip: fmt.Sprintf("%s.%d", n.subnet, 9+i)}
		if name == "ctl" {
			n.ctl = h
		} else {
			n.hosts = append(n.hosts, h)
		}
		veth := "v" + name
		steps = append(steps,
			[]string{"netns", "add", h.ns},
			[]string{"-n", n.hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns},
			[]string{"-n", n.hub, "link", "set", veth, "master", "br0", "up"},
			[]string{"-n", h.ns, "addr", "add", h.ip + "/24", "dev", "eth0"},
			[]string{"-n", h.ns, "link", "set", "eth0", "up"},
			[]string{"-n", h.ns, "link", "set", "lo", "up"})
	}
	for _, s := range steps {
		if _, err := sh(30*time.Second, "ip", s...); err != nil {
			n.remove()
			return nil, err
		}
	}
	return n, nil
}

// freeSubnet picks a 10.x.y.0/24 that no interface or route here uses.
func freeSubnet() string {
	routes, _ := sh(10*time.Second, "ip", "-4", "route", "show", "table", "all")
	addrs, _ := sh(10*time.Second, "ip", "-4", "addr")
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(time.Now().UnixNano())))
	for {
		s := fmt.Sprintf("10.%d.%d", 64+rng.IntN(128), rng.IntN(256))
		if !strings.Contains(routes, s+".") && !strings.Contains(addrs, s+".") {
			return s
		}
	}
}

func (n *network) teardown() {
	for _, h := range append([]*host{n.ctl}, n.hosts...) {
		if h != nil {
			sh(30*time.Second, "ip", "netns", "del", h.ns)
		}
	}
	sh(30*time.Second, "ip", "netns", "del", n.hub)
	os.Remove(filepath.Join(ownerDir, n.prefix))
}

// netemAvailable probes once whether the kernel has sch_netem.
var netemProbe struct {
	once sync.Once
	ok   bool
}

func netemAvailable(h *host) bool {
	netemProbe.once.Do(func() {
		if _, err := h.exec("tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", "1ms"); err == nil {
			netemProbe.ok = true
			h.exec("tc", "qdisc", "del", "dev", "eth0", "root")
		}
	})
	return netemProbe.ok
}
