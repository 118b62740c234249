// Package doctor checks a node's environment for Plumeria and says what
// to fix: one Result per check, each OK, WARN or FAIL. The verdicts and
// thresholds are pure functions of facts (this file); probe.go gathers the
// facts (files, syscalls, the network) and Run puts the two together.
package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/plumeria-fs/plumeria/internal/bytesize"
)

// Verdict is a check's outcome. Any Fail makes `plumeria doctor` exit non-zero.
type Verdict int

const (
	OK Verdict = iota
	Warn
	Fail
)

func (v Verdict) String() string {
	switch v {
	case OK:
		return "OK"
	case Warn:
		return "WARN"
	}
	return "FAIL"
}

// Result is one check's finding and, unless OK, what to do about it.
type Result struct {
	Check   string // short name, e.g. "fuse-device" or "clock 10.0.0.1:7001"
	Verdict Verdict
	Detail  string // what was found
	Fix     string // what to do; empty when nothing needs doing
}

// String is the result as one line: verdict, check, detail, fix.
func (r Result) String() string {
	s := fmt.Sprintf("%-4s  %-30s  %s", r.Verdict, r.Check, r.Detail)
	if r.Fix != "" {
		s += "; fix: " + r.Fix
	}
	return strings.ReplaceAll(s, "\n", " ")
}

// Count returns how many results failed and how many warned.
func Count(rs []Result) (fails, warns int) {
	for _, r := range rs {
		switch r.Verdict {
		case Fail:
			fails++
		case Warn:
			warns++
		}
	}
	return fails, warns
}

// Thresholds.
const (
	// DiskFreeWarnBytes and DiskFreeWarnPercent: below either, the data
	// directory's file system is getting full (bricks refuse writes when
	// full; Raft and pebble need room to compact).
	DiskFreeWarnBytes   = 1 << 30
	DiskFreeWarnPercent = 10
	// DiskFreeFailBytes: below this a server cannot be expected to start.
	DiskFreeFailBytes = 256 << 20
	// NofileWarn and NofileFail bound the hard limit on open files: each
	// client, peer and Raft connection, segment file and pebble table takes one.
	NofileWarn = 65536
	NofileFail = 1024
	// SkewWarn and SkewFail bound the clock difference to a coordinator
	// that certainly exists (the estimate minus its error bound). Leases
	// are measured on each node's own clock, but file times come from the
	// node that writes them: beyond a second, make and rsync see files
	// from the future.
	SkewWarn = 100 * time.Millisecond
	SkewFail = time.Second
)

// Platform: Plumeria runs on Linux only.
func Platform(goos, goarch, kernel, goVersion string) Result {
	r := Result{Check: "os", Detail: fmt.Sprintf("%s/%s, kernel %s, built with %s", goos, goarch, kernel, goVersion)}
	if goos != "linux" {
		r.Verdict, r.Fix = Fail, "run Plumeria servers and mounts on Linux"
	}
	return r
}

// Nofile judges the limits on open files (soft and hard, as this process
// sees them; Go raises the soft limit to the hard one at start).
func Nofile(soft, hard uint64) Result {
	r := Result{Check: "open-files", Detail: fmt.Sprintf("ulimit -n: soft %s, hard %s", limitString(soft), limitString(hard))}
	fix := fmt.Sprintf("raise the hard limit to at least %d: LimitNOFILE=%d in the systemd unit, or `ulimit -Hn %d` in the shell that starts plumeria", NofileWarn, NofileWarn*16, NofileWarn)
	switch {
	case hard < NofileFail:
		r.Verdict, r.Fix = Fail, fix
	case hard < NofileWarn:
		r.Verdict, r.Fix = Warn, fix
	}
	return r
}

func limitString(n uint64) string {
	if n == ^uint64(0) {
		return "unlimited"
	}
	return strconv.FormatUint(n, 10)
}

// FuseDevice judges /dev/fuse from stat and open (read-write) errors.
func FuseDevice(statErr error, charDev bool, openErr error) Result {
	r := Result{Check: "fuse-device"}
	switch {
	case errors.Is(statErr, fs.ErrNotExist):
		r.Verdict, r.Detail = Fail, "/dev/fuse does not exist"
		r.Fix = "load the FUSE module (modprobe fuse); in a container, pass the device (docker run --device /dev/fuse --cap-add SYS_ADMIN)"
	case statErr != nil:
		r.Verdict, r.Detail, r.Fix = Fail, "cannot stat /dev/fuse: "+statErr.Error(), "check the permissions on /dev"
	case !charDev:
		r.Verdict, r.Detail, r.Fix = Fail, "/dev/fuse is not a character device", "remove it and load the FUSE module (modprobe fuse), or create it: mknod /dev/fuse c 10 229"
	case errors.Is(openErr, fs.ErrPermission):
		r.Verdict, r.Detail, r.Fix = Fail, "/dev/fuse exists but cannot be opened: permission denied", "run `plumeria mount` as root, or chmod 0666 /dev/fuse"
	case openErr != nil:
		r.Verdict, r.Detail, r.Fix = Fail, "cannot open /dev/fuse: "+openErr.Error(), "load the FUSE module (modprobe fuse)"
	default:
		r.Detail = "/dev/fuse opens read-write"
	}
	return r
}

// FuseModule judges whether the kernel knows FUSE, from /proc/filesystems.
func FuseModule(procFilesystems string, readErr error) Result {
	r := Result{Check: "fuse-module"}
	if readErr != nil {
		r.Verdict, r.Detail, r.Fix = Warn, "cannot read /proc/filesystems: "+readErr.Error(), "mount /proc"
		return r
	}
	for _, line := range strings.Split(procFilesystems, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[len(f)-1] == "fuse" {
			r.Detail = "the kernel lists file system type fuse"
			return r
		}
	}
	r.Verdict, r.Detail, r.Fix = Fail, "the kernel does not list file system type fuse", "modprobe fuse (and add fuse to /etc/modules-load.d/ to load it at boot)"
	return r
}

// FuseMount judges how `plumeria mount` would mount: as root directly
// (mount(2), no helper), otherwise through a setuid-root fusermount3.
func FuseMount(euid int, fusermount string, setuidRoot bool) Result {
	r := Result{Check: "fuse-mount"}
	switch {
	case euid == 0:
		r.Detail = "running as root: mounts call mount(2) directly (DirectMount), no fusermount3 needed"
	case fusermount == "":
		r.Verdict, r.Detail = Fail, "not root and no fusermount3 in PATH"
		r.Fix = "install fuse3 (apt-get install fuse3), or run `plumeria mount` as root"
	case !setuidRoot:
		r.Verdict, r.Detail = Warn, fusermount+" is not setuid root: mounting as a user will fail"
		r.Fix = "chmod u+s " + fusermount + " (as packaged by fuse3), or run `plumeria mount` as root"
	default:
		r.Detail = "not root: mounts go through " + fusermount
	}
	return r
}

// Owner is the process holding a port, as far as /proc tells; the zero
// value means unknown.
type Owner struct {
	PID  int
	Comm string
}

// Listen judges the --listen address from the error of listening on it
// and, when it is in use, the process holding it.
func Listen(addr string, listenErr error, owner Owner) Result {
	r := Result{Check: "listen " + addr}
	pick := "stop it, or give this server another --listen"
	switch {
	case listenErr == nil:
		r.Detail = "the port is free"
	case errors.Is(listenErr, syscall.EADDRINUSE) && strings.HasPrefix(owner.Comm, "plumeria"):
		r.Detail = fmt.Sprintf("in use by %s (pid %d): a plumeria server runs here already", owner.Comm, owner.PID)
	case errors.Is(listenErr, syscall.EADDRINUSE) && owner.PID != 0:
		r.Verdict, r.Detail, r.Fix = Fail, fmt.Sprintf("in use by %s (pid %d), not plumeria", owner.Comm, owner.PID), pick
	case errors.Is(listenErr, syscall.EADDRINUSE):
		r.Verdict, r.Detail, r.Fix = Warn, "in use by a process doctor cannot see", "run doctor as root to see who holds it; if not plumeria, "+pick
	case errors.Is(listenErr, syscall.EADDRNOTAVAIL):
		r.Verdict, r.Detail, r.Fix = Fail, "the host is not an address of this machine", "give an address of one of its interfaces (ip addr), or 0.0.0.0 with --advertise"
	case errors.Is(listenErr, syscall.EACCES):
		r.Verdict, r.Detail, r.Fix = Fail, "permission denied", "ports below 1024 need root or CAP_NET_BIND_SERVICE; use a higher port"
	default:
		r.Verdict, r.Detail, r.Fix = Fail, listenErr.Error(), "give --listen as HOST:PORT"
	}
	return r
}

// DataDir judges the --data directory: existing is the path that exists
// (dir itself, or the nearest ancestor when dir is still to be created),
// isDir whether that is a directory, writeErr the error of creating a
// file in it.
func DataDir(dir, existing string, isDir bool, writeErr error) Result {
	r := Result{Check: "data-dir"}
	switch {
	case !isDir:
		r.Verdict, r.Detail, r.Fix = Fail, existing+" is not a directory", "give --data a directory path"
	case writeErr != nil:
		r.Verdict, r.Detail, r.Fix = Fail, "cannot write in "+existing+": "+writeErr.Error(), "chown the directory to the user that runs plumeria, or pick another --data"
	case existing != dir:
		r.Detail = fmt.Sprintf("%s does not exist yet; plumeria server creates it (%s is writable)", dir, existing)
	default:
		r.Detail = dir + " is a writable directory"
	}
	return r
}

// Disk judges the free space (available to unprivileged users) of the
// file system holding the data directory.
func Disk(path string, free, total uint64) Result {
	r := Result{Check: "disk-space"}
	pct := 0.0
	if total > 0 {
		pct = float64(free) * 100 / float64(total)
	}
	r.Detail = fmt.Sprintf("%s free of %s (%.1f%%) at %s", bytesize.Format(int64(min(free, 1<<62))), bytesize.Format(int64(min(total, 1<<62))), pct, path)
	fix := "free space or move --data to a larger file system; a brick's --capacity should leave room"
	switch {
	case free < DiskFreeFailBytes:
		r.Verdict, r.Fix = Fail, fix
	case free < DiskFreeWarnBytes || pct < DiskFreeWarnPercent:
		r.Verdict, r.Fix = Warn, fix
	}
	return r
}

// CoordInfo is what a coordinator's Status answer says.
type CoordInfo struct {
	Leader   string
	MapEpoch uint64
	Members  int
}

// Coordinator judges one coordinator address: dialErr is the error of a
// TCP connect, rpcErr that of the Status call (after a connect).
func Coordinator(addr string, dialErr error, rtt time.Duration, info CoordInfo, rpcErr error) Result {
	r := Result{Check: "coordinator " + addr}
	switch {
	case dialErr != nil:
		r.Verdict, r.Detail = Fail, "unreachable: "+dialErr.Error()
		r.Fix = "check the address, that `plumeria server --coordinator` runs there, and firewalls between the nodes"
	case rpcErr != nil:
		r.Verdict, r.Detail = Warn, "reachable, but Status failed: "+rpcErr.Error()
		r.Fix = "if no leader is known, check that a majority of coordinators run (plumeria coord list)"
	case info.Leader == "":
		r.Verdict, r.Detail, r.Fix = Warn, "reachable, but no leader", "check that a majority of coordinators run (plumeria coord list)"
	default:
		r.Detail = fmt.Sprintf("reachable in %v; leader %s, coordinators %d, map epoch %d", rtt.Round(10*time.Microsecond), info.Leader, info.Members, info.MapEpoch)
	}
	return r
}

// EstimateSkew returns how far the coordinator's clock (coord, read while
// a request sent at t0 was answered at t1) is ahead of this node's, and
// the error bound: coord was read somewhere in [t0, t1], so the estimate
// against the midpoint is off by at most half the round trip.
func EstimateSkew(t0, t1, coord time.Time) (skew, bound time.Duration) {
	rtt := t1.Sub(t0)
	mid := t0.Add(rtt / 2)
	return coord.Round(0).Sub(mid.Round(0)), rtt / 2
}

// ClockSkew judges a skew estimate with its bound. known is false when
// the coordinator did not report its time.
func ClockSkew(addr string, skew, bound time.Duration, known bool) Result {
	r := Result{Check: "clock " + addr}
	if !known {
		r.Verdict, r.Detail, r.Fix = Warn, "the coordinator does not report its time (older version)", "upgrade the coordinators"
		return r
	}
	abs := skew
	if abs < 0 {
		abs = -abs
	}
	least := max(abs-bound, 0) // the skew is at least this
	dir := "ahead of"
	if skew < 0 {
		dir = "behind"
	}
	r.Detail = fmt.Sprintf("the coordinator's clock is %v %s this node's (±%v)", abs.Round(100*time.Microsecond), dir, bound.Round(100*time.Microsecond))
	fix := "keep clocks in sync with NTP on every node (chrony or systemd-timesyncd)"
	switch {
	case least > SkewFail:
		r.Verdict, r.Fix = Fail, fix
	case least > SkewWarn:
		r.Verdict, r.Fix = Warn, fix
	case bound > SkewWarn:
		r.Verdict, r.Detail, r.Fix = Warn, r.Detail+": the round trip is too slow to tell", "run doctor again closer to the coordinator, or when the network is quiet"
	}
	return r
}

// ListeningInodes returns the socket inodes of TCP sockets listening on
// port in the text of /proc/net/tcp or /proc/net/tcp6.
func ListeningInodes(procNetTCP string, port int) []uint64 {
	var out []uint64
	for _, line := range strings.Split(procNetTCP, "\n") {
		f := strings.Fields(line)
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		if len(f) < 10 || f[3] != "0A" { // 0A: TCP_LISTEN
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil || int(p) != port {
			continue
		}
		if ino, err := strconv.ParseUint(f[9], 10, 64); err == nil && ino != 0 {
			out = append(out, ino)
		}
	}
	return out
}

// CertExpiryWarn is how close to its end a certificate gets a warning.
const CertExpiryWarn = 30 * 24 * time.Hour

// Certificates judges the certificates this node's commands use (--certs
// or PLUMERIA_CERTS, docs/security.md): dir "" means none were given,
// insecure that TLS is turned off; loadErr is the error of loading the
// admin certificate; name, cluster and notAfter describe it.
func Certificates(dir string, insecure bool, loadErr error, name, cluster string, notAfter, now time.Time) Result {
	r := Result{Check: "tls"}
	switch {
	case insecure:
		r.Detail = "TLS turned off (--insecure): plaintext, no authentication"
	case dir == "":
		r.Verdict, r.Detail = Warn, "no certs directory: commands speak plaintext, which a cluster with TLS refuses"
		r.Fix = "plumeria init --certs DIR once, copy DIR to every machine, export PLUMERIA_CERTS=DIR (or --insecure for a cluster without TLS)"
	case loadErr != nil:
		r.Verdict, r.Detail = Fail, loadErr.Error()
		r.Fix = "give the certs directory made by plumeria init (ca.crt, admin.crt, admin.key)"
	case notAfter.Sub(now) < CertExpiryWarn:
		r.Verdict = Warn
		r.Detail = fmt.Sprintf("certificate %s of cluster %s ends %s (in %v)", name, cluster, notAfter.UTC().Format(time.DateOnly), notAfter.Sub(now).Round(time.Hour))
		r.Fix = "make a new one from the CA before it ends"
	default:
		r.Detail = fmt.Sprintf("certificate %s of cluster %s in %s, valid until %s", name, cluster, dir, notAfter.UTC().Format(time.DateOnly))
	}
	return r
}
