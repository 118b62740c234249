package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// check asserts a verdict and that detail and fix mention the given words.
func check(t *testing.T, r Result, want Verdict, words ...string) {
	t.Helper()
	if r.Verdict != want {
		t.Errorf("%s: verdict %v, want %v: %s", r.Check, r.Verdict, want, r)
	}
	if (r.Fix == "") != (want == OK) {
		t.Errorf("%s: verdict %v with fix %q (a fix is given exactly when not OK)", r.Check, r.Verdict, r.Fix)
	}
	line := r.String()
	if strings.Contains(line, "\n") || !strings.HasPrefix(line, want.String()) {
		t.Errorf("line %q", line)
	}
	for _, w := range words {
		if !strings.Contains(line, w) {
			t.Errorf("%q does not mention %q", line, w)
		}
	}
}

func TestPlatform(t *testing.T) {
	check(t, Platform("linux", "amd64", "6.1.0", "go1.26.8"), OK, "linux/amd64", "6.1.0", "go1.26.8")
	check(t, Platform("darwin", "arm64", "23.0", "go1.26.8"), Fail, "Linux")
}

func TestNofile(t *testing.T) {
	check(t, Nofile(1<<20, 1<<20), OK, "1048576")
	check(t, Nofile(^uint64(0), ^uint64(0)), OK, "unlimited")
	check(t, Nofile(NofileWarn, NofileWarn), OK)
	check(t, Nofile(1024, NofileWarn-1), Warn, "LimitNOFILE")
	check(t, Nofile(1024, NofileFail), Warn)
	check(t, Nofile(256, NofileFail-1), Fail, "ulimit -Hn")
}

func TestFuseDevice(t *testing.T) {
	check(t, FuseDevice(nil, true, nil), OK, "opens")
	check(t, FuseDevice(fs.ErrNotExist, false, nil), Fail, "does not exist", "modprobe fuse", "--device /dev/fuse")
	check(t, FuseDevice(&fs.PathError{Op: "stat", Path: "/dev/fuse", Err: syscall.ENOENT}, false, nil), Fail, "does not exist")
	check(t, FuseDevice(nil, false, nil), Fail, "not a character device")
	check(t, FuseDevice(nil, true, &fs.PathError{Op: "open", Path: "/dev/fuse", Err: syscall.EACCES}), Fail, "permission denied", "root")
	check(t, FuseDevice(nil, true, syscall.ENODEV), Fail, "modprobe")
	check(t, FuseDevice(syscall.EIO, false, nil), Fail, "cannot stat")
}

func TestFuseModule(t *testing.T) {
	const with = "nodev\tsysfs\nnodev\tproc\n\text4\nnodev\tfuse\n\tfuseblk\nnodev\tfusectl\n"
	check(t, FuseModule(with, nil), OK)
	check(t, FuseModule("nodev\tsysfs\n\text4\n\tfuseblk\nnodev\tfusectl\n", nil), Fail, "modprobe fuse")
	check(t, FuseModule("", errors.New("no /proc")), Warn)
}

func TestFuseMount(t *testing.T) {
	check(t, FuseMount(0, "", false), OK, "root", "DirectMount")
	check(t, FuseMount(1000, "/usr/bin/fusermount3", true), OK, "/usr/bin/fusermount3")
	check(t, FuseMount(1000, "/usr/bin/fusermount3", false), Warn, "setuid", "chmod u+s")
	check(t, FuseMount(1000, "", false), Fail, "fuse3", "root")
}

func TestListen(t *testing.T) {
	inUse := &listenErr{syscall.EADDRINUSE}
	check(t, Listen("127.0.0.1:7001", nil, Owner{}), OK, "127.0.0.1:7001", "free")
	check(t, Listen("127.0.0.1:7001", inUse, Owner{PID: 42, Comm: "plumeria"}), OK, "plumeria (pid 42)", "runs here already")
	check(t, Listen("127.0.0.1:7001", inUse, Owner{PID: 42, Comm: "plumeria-race"}), OK)
	check(t, Listen("127.0.0.1:7001", inUse, Owner{PID: 7, Comm: "nginx"}), Fail, "nginx (pid 7)", "another --listen")
	check(t, Listen("127.0.0.1:7001", inUse, Owner{}), Warn, "as root")
	check(t, Listen("10.9.9.9:7001", &listenErr{syscall.EADDRNOTAVAIL}, Owner{}), Fail, "not an address of this machine")
	check(t, Listen("0.0.0.0:80", &listenErr{syscall.EACCES}, Owner{}), Fail, "CAP_NET_BIND_SERVICE")
	check(t, Listen("nonsense", errors.New("missing port in address"), Owner{}), Fail, "missing port")
}

// listenErr wraps an errno the way net.Listen's *net.OpError does.
type listenErr struct{ errno syscall.Errno }

func (e *listenErr) Error() string { return "listen tcp: " + e.errno.Error() }
func (e *listenErr) Unwrap() error { return e.errno }

func TestDataDir(t *testing.T) {
	check(t, DataDir("/var/lib/p", "/var/lib/p", true, nil), OK, "writable directory")
	check(t, DataDir("/var/lib/p/c1", "/var/lib", true, nil), OK, "does not exist yet", "/var/lib is writable")
	check(t, DataDir("/var/lib/p", "/var/lib/p", false, nil), Fail, "not a directory")
	check(t, DataDir("/var/lib/p", "/var/lib/p", true, fs.ErrPermission), Fail, "cannot write", "chown")
}

func TestDisk(t *testing.T) {
	const G = 1 << 30
	check(t, Disk("/d", 50*G, 100*G), OK, "50.0 GiB free of 100.0 GiB (50.0%) at /d")
	check(t, Disk("/d", 11*G, 100*G), OK)
	check(t, Disk("/d", 9*G, 100*G), Warn, "9.0%")       // below 10%
	check(t, Disk("/d", G-1, 2*G), Warn)                 // below 1 GiB
	check(t, Disk("/d", DiskFreeFailBytes-1, 4*G), Fail) // nearly full
	check(t, Disk("/d", 0, 0), Fail)
}

func TestCoordinator(t *testing.T) {
	info := CoordInfo{Leader: "c1", MapEpoch: 7, Members: 3}
	check(t, Coordinator("h:7001", nil, 300*time.Microsecond, info, nil), OK, "leader c1", "coordinators 3", "map epoch 7", "300µs")
	check(t, Coordinator("h:7001", errors.New("connection refused"), 0, CoordInfo{}, nil), Fail, "unreachable", "connection refused")
	check(t, Coordinator("h:7001", nil, 0, CoordInfo{}, errors.New("coord: no leader known yet")), Warn, "no leader", "coord list")
	check(t, Coordinator("h:7001", nil, time.Millisecond, CoordInfo{MapEpoch: 3}, nil), Warn, "no leader")
}

func TestEstimateSkew(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		rtt, coordAt time.Duration // coord read at t0+coordAt on its clock
		skew, bound  time.Duration
	}{
		{rtt: 10 * time.Millisecond, coordAt: 5 * time.Millisecond, skew: 0, bound: 5 * time.Millisecond},
		{rtt: 10 * time.Millisecond, coordAt: 2*time.Second + 5*time.Millisecond, skew: 2 * time.Second, bound: 5 * time.Millisecond},
		{rtt: 2 * time.Millisecond, coordAt: -3 * time.Second, skew: -3*time.Second - time.Millisecond, bound: time.Millisecond},
	} {
		skew, bound := EstimateSkew(t0, t0.Add(tc.rtt), t0.Add(tc.coordAt))
		if skew != tc.skew || bound != tc.bound {
			t.Errorf("rtt %v coord at %v: skew %v ± %v, want %v ± %v", tc.rtt, tc.coordAt, skew, bound, tc.skew, tc.bound)
		}
	}
	// Whatever the coordinator read inside [t0, t1], a true skew lies within the bound.
	for read := time.Duration(0); read <= 10*time.Millisecond; read += time.Millisecond {
		const trueSkew = 250 * time.Millisecond
		skew, bound := EstimateSkew(t0, t0.Add(10*time.Millisecond), t0.Add(read+trueSkew))
		if d := skew - trueSkew; d > bound || -d > bound {
			t.Errorf("read at +%v: estimate %v ± %v misses %v", read, skew, bound, trueSkew)
		}
	}
}

func TestClockSkew(t *testing.T) {
	ms := time.Millisecond
	check(t, ClockSkew("h:1", 2*ms, ms, true), OK, "2ms ahead of", "±1ms")
	check(t, ClockSkew("h:1", -2*ms, ms, true), OK, "behind")
	check(t, ClockSkew("h:1", 150*ms, 10*ms, true), Warn, "NTP")
	check(t, ClockSkew("h:1", 150*ms, 60*ms, true), OK)              // could be 90 ms: not above SkewWarn
	check(t, ClockSkew("h:1", 5*ms, 200*ms, true), Warn, "too slow") // cannot tell
	check(t, ClockSkew("h:1", -3*time.Second, ms, true), Fail, "3s behind", "chrony")
	check(t, ClockSkew("h:1", 1500*ms, 600*ms, true), Warn) // at least 900 ms
	check(t, ClockSkew("h:1", 0, 0, false), Warn, "does not report")
}

func TestListeningInodes(t *testing.T) {
	const tcp = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1B59 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1B59 0100007F:D3A2 01 00000000:00000000 00:00000000 00000000     0        0 9999 1 0000000000000000 20 4 30 10 -1
   2: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 17 1 0000000000000000 100 0 0 10 0
   3: garbage
`
	const tcp6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1B59 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5151 1 0000000000000000 100 0 0 10 0
`
	if got := ListeningInodes(tcp, 7001); !reflect.DeepEqual(got, []uint64{4242}) {
		t.Errorf("tcp port 7001: %v, want [4242] (the established socket is not listening)", got)
	}
	if got := ListeningInodes(tcp, 22); !reflect.DeepEqual(got, []uint64{17}) {
		t.Errorf("tcp port 22: %v", got)
	}
	if got := ListeningInodes(tcp6, 7001); !reflect.DeepEqual(got, []uint64{5151}) {
		t.Errorf("tcp6 port 7001: %v", got)
	}
	if got := ListeningInodes(tcp, 8080); got != nil {
		t.Errorf("port 8080: %v", got)
	}
}

func TestCount(t *testing.T) {
	rs := []Result{{Verdict: OK}, {Verdict: Warn}, {Verdict: Fail}, {Verdict: Fail}}
	if f, w := Count(rs); f != 2 || w != 1 {
		t.Errorf("Count = %d fails, %d warns", f, w)
	}
	if s := fmt.Sprint(Result{Check: "x", Verdict: Fail, Detail: "a\nb", Fix: "c"}); s != "FAIL  x                               a b; fix: c" {
		t.Errorf("String = %q", s)
	}
}

func TestCertificates(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	check(t, Certificates("", true, nil, "", "", time.Time{}, now), OK, "--insecure")
	check(t, Certificates("", false, nil, "", "", time.Time{}, now), Warn, "plaintext", "plumeria init", "PLUMERIA_CERTS")
	check(t, Certificates("/c", false, errors.New("pki: read identity: no admin.crt"), "", "", time.Time{}, now), Fail, "admin.crt", "plumeria init")
	check(t, Certificates("/c", false, nil, "admin", "prod", now.Add(10*24*time.Hour), now), Warn, "admin", "prod", "2026-12-07", "240h")
	check(t, Certificates("/c", false, nil, "admin", "prod", now.Add(CertExpiryWarn+time.Hour), now), OK, "admin", "prod", "/c")
}
