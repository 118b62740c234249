package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/internal/pki"
)

// Options says what to check besides the machine itself.
type Options struct {
	Coord    []string // coordinator addresses: reachability and clock skew
	Listen   string   // HOST:PORT the server will listen on
	Data     string   // the server's data directory
	SkipFUSE bool     // a node that only runs servers needs no FUSE
	Certs    string   // the certs directory (--certs); "" none
	Insecure bool     // TLS turned off
	// Identity is the one the commands use (loaded from Certs), or
	// IdentityErr why it could not be loaded.
	Identity    *pki.Identity
	IdentityErr error
	Timeout     time.Duration
}

// Run runs every check that applies and returns the results in a fixed
// order: machine, FUSE, listen address, data directory, coordinators.
func Run(ctx context.Context, o Options) []Result {
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	rs := []Result{platform(), nofile(), certificates(o)}
	if !o.SkipFUSE {
		rs = append(rs, fuseDevice(), fuseModule(), fuseMount())
	}
	if o.Listen != "" {
		rs = append(rs, listen(o.Listen))
	}
	if o.Data != "" {
		rs = append(rs, dataDir(o.Data)...)
	}
	for _, a := range o.Coord {
		rs = append(rs, coordinator(ctx, a, o.Timeout)...)
	}
	return rs
}

func certificates(o Options) Result {
	id := o.Identity
	if o.Insecure || o.Certs == "" || o.IdentityErr != nil || id == nil || id.Certificate() == nil {
		err := o.IdentityErr
		if err == nil && !o.Insecure && o.Certs != "" {
			err = errors.New("no certificate loaded")
		}
		return Certificates(o.Certs, o.Insecure, err, "", "", time.Time{}, time.Now())
	}
	return Certificates(o.Certs, false, nil, id.Name(), id.ClusterID(), id.Certificate().NotAfter, time.Now())
}

func platform() Result {
	kernel := "unknown"
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		kernel = unix.ByteSliceToString(u.Release[:])
	}
	return Platform(runtime.GOOS, runtime.GOARCH, kernel, runtime.Version())
}

func nofile() Result {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
		return Result{Check: "open-files", Verdict: Warn, Detail: "getrlimit: " + err.Error()}
	}
	return Nofile(l.Cur, l.Max)
}

func fuseDevice() Result {
	fi, statErr := os.Stat("/dev/fuse")
	charDev := statErr == nil && fi.Mode()&fs.ModeCharDevice != 0
	var openErr error
	if charDev {
		var f *os.File
		if f, openErr = os.OpenFile("/dev/fuse", os.O_RDWR, 0); openErr == nil {
			f.Close()
		}
	}
	return FuseDevice(statErr, charDev, openErr)
}

func fuseModule() Result {
	b, err := os.ReadFile("/proc/filesystems")
	return FuseModule(string(b), err)
}

func fuseMount() Result {
	path, _ := exec.LookPath("fusermount3")
	setuid := false
	if path != "" {
		var st unix.Stat_t
		setuid = unix.Stat(path, &st) == nil && st.Mode&unix.S_ISUID != 0 && st.Uid == 0
	}
	return FuseMount(os.Geteuid(), path, setuid)
}

func listen(addr string) Result {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		ln.Close()
		return Listen(addr, nil, Owner{})
	}
	var owner Owner
	if errors.Is(err, unix.EADDRINUSE) {
		if _, p, serr := net.SplitHostPort(addr); serr == nil {
			if port, perr := strconv.Atoi(p); perr == nil {
				owner = portOwner(port)
			}
		}
	}
	return Listen(addr, err, owner)
}

// portOwner finds the process with a socket listening on port through
// /proc (sockets of other users' processes need root to see).
func portOwner(port int) Owner {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, ino := range ListeningInodes(string(b), port) {
			inodes[fmt.Sprintf("socket:[%d]", ino)] = true
		}
	}
	if len(inodes) == 0 {
		return Owner{}
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		for _, fd := range fds {
			if link, err := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name())); err == nil && inodes[link] {
				comm, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "comm"))
				return Owner{PID: pid, Comm: strings.TrimSpace(string(comm))}
			}
		}
	}
	return Owner{}
}

// dataDir checks the directory (or the ancestor it will be created in)
// and the free space there.
func dataDir(dir string) []Result {
	dir = filepath.Clean(dir)
	existing := dir
	for {
		if _, err := os.Stat(existing); err == nil || existing == filepath.Dir(existing) {
			break
		}
		existing = filepath.Dir(existing)
	}
	fi, err := os.Stat(existing)
	if err != nil {
		return []Result{{Check: "data-dir", Verdict: Fail, Detail: err.Error(), Fix: "give --data a directory path"}}
	}
	var writeErr error
	if fi.IsDir() {
		var f *os.File
		if f, writeErr = os.CreateTemp(existing, ".plumeria-doctor-*"); writeErr == nil {
			f.Close()
			os.Remove(f.Name())
		}
	}
	rs := []Result{DataDir(dir, existing, fi.IsDir(), writeErr)}
	var st unix.Statfs_t
	if err := unix.Statfs(existing, &st); err != nil {
		return append(rs, Result{Check: "disk-space", Verdict: Warn, Detail: "statfs " + existing + ": " + err.Error()})
	}
	return append(rs, Disk(existing, st.Bavail*uint64(st.Bsize), st.Blocks*uint64(st.Bsize)))
}

// coordinator connects to one coordinator, asks for its status and
// estimates the clock skew from the time it answers with.
func coordinator(ctx context.Context, addr string, timeout time.Duration) []Result {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return []Result{Coordinator(addr, err, 0, CoordInfo{}, nil)}
	}
	c.Close()
	conn, err := coordclient.Dial(addr)
	if err != nil {
		return []Result{Coordinator(addr, err, 0, CoordInfo{}, nil)}
	}
	defer conn.Close()
	cl := pb.NewCoordinatorClient(conn)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The first call also sets up the HTTP/2 connection; time the second.
	var resp *pb.StatusResponse
	var t0, t1 time.Time
	for range 2 {
		t0 = time.Now()
		resp, err = cl.Status(ctx, &pb.StatusRequest{})
		t1 = time.Now()
		if err != nil {
			return []Result{Coordinator(addr, nil, 0, CoordInfo{}, errors.New(coordclient.ErrorMessage(err))),
				{Check: "clock " + addr, Verdict: Warn, Detail: "not measured: the coordinator did not answer", Fix: "see the coordinator check above"}}
		}
	}
	var st struct {
		Leader       string            `json:"leader"`
		MapEpoch     uint64            `json:"map_epoch"`
		Coordinators []json.RawMessage `json:"coordinators"`
	}
	var info CoordInfo
	if err := json.Unmarshal(resp.StatusJson, &st); err != nil {
		return []Result{Coordinator(addr, nil, 0, info, fmt.Errorf("unreadable status: %v", err))}
	}
	info = CoordInfo{Leader: st.Leader, MapEpoch: st.MapEpoch, Members: len(st.Coordinators)}
	skew, bound := EstimateSkew(t0, t1, time.Unix(0, resp.TimeUnixNs))
	return []Result{Coordinator(addr, nil, t1.Sub(t0), info, nil), ClockSkew(addr, skew, bound, resp.TimeUnixNs != 0)}
}
