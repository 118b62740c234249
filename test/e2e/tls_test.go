package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/coord"
	"github.com/plumeria-fs/plumeria/internal/netmux"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/internal/pki"
	"github.com/plumeria-fs/plumeria/lock/lockpb"
)

// tlsIdentity issues an identity for name and roles from the run's CA,
// or, with other, from a CA of its own (another cluster).
func tlsIdentity(t *testing.T, other bool, name string, roles ...string) *pki.Identity {
	t.Helper()
	var ca *pki.CA
	var err error
	if other {
		ca, err = pki.NewCA("other", time.Now())
	} else {
		ca, err = pki.LoadCA(certsDir)
	}
	if err != nil {
		t.Fatal(err)
	}
	id, err := ca.NewIdentity(name, roles, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// certless is a client that trusts the run's CA but has no certificate.
func certless(t *testing.T) *pki.Identity {
	t.Helper()
	ca, err := pki.LoadCA(certsDir)
	if err != nil {
		t.Fatal(err)
	}
	id, err := pki.NewIdentity(ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// foreignCreds presents a certificate of another CA (and trusts the
// run's CA, so only the server's check can refuse it).
func foreignCreds(t *testing.T) grpc.DialOption {
	t.Helper()
	foreign := tlsIdentity(t, true, "intruder", pki.RoleAdmin)
	cfg := certless(t).ClientConfig()
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		c := foreign.Certificate()
		return &tls.Certificate{Certificate: [][]byte{c.Raw}, PrivateKey: foreign.Key(), Leaf: c}, nil
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg))
}

// tlsRPC makes one call of kind at addr with the given credentials.
func tlsRPC(t *testing.T, addr string, creds grpc.DialOption, kind string) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, creds)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch kind {
	case "GetMap":
		_, err = pb.NewCoordinatorClient(conn).GetMap(ctx, &pb.GetMapRequest{})
	case "Status":
		_, err = pb.NewCoordinatorClient(conn).Status(ctx, &pb.StatusRequest{})
	case "RegisterBrick":
		_, err = pb.NewCoordinatorClient(conn).RegisterBrick(ctx, &pb.RegisterBrickRequest{Name: "evil", Addr: "127.0.0.1:1"})
	case "RegisterLockServer":
		_, err = pb.NewCoordinatorClient(conn).RegisterLockServer(ctx, &pb.RegisterLockServerRequest{Name: "evil", Addr: "127.0.0.1:1"})
	case "Heartbeat":
		_, err = pb.NewCoordinatorClient(conn).Heartbeat(ctx, &pb.HeartbeatRequest{Name: "b1"})
	case "SGSynced":
		_, err = pb.NewCoordinatorClient(conn).SGSynced(ctx, &pb.SGSyncedRequest{})
	case "ShardPut":
		_, err = pb.NewBrickClient(conn).ShardPut(ctx, &pb.ShardPutRequest{})
	case "Read":
		_, err = pb.NewBrickClient(conn).Read(ctx, &pb.ReadRequest{})
	case "Replicate":
		_, err = pb.NewBrickClient(conn).Replicate(ctx, &pb.ReplicateRequest{})
	case "Session":
		var s lockpb.Lock_SessionClient
		if s, err = lockpb.NewLockClient(conn).Session(ctx); err == nil {
			_, err = s.Recv()
		}
	default:
		t.Fatalf("no rpc %s", kind)
	}
	return err
}

// TestTLS: a cluster of processes with mutual TLS (coordinator c1, brick
// b1, lock server l1). At each role's port, a client without a
// certificate, one with another CA's, and a plaintext one are refused; a
// mount's certificate cannot call RegisterBrick or brick-to-brick RPCs;
// the admin's can call Status; Raft streams are refused to all but
// coordinators; garbage and broken handshakes leave the servers serving.
// The HTTP port asks for a client certificate unless --metrics-insecure.
func TestTLS(t *testing.T) {
	if certsDir == "" {
		t.Skip("the run has no CA")
	}
	c := newCluster(t)
	c1HTTP, b1HTTP := freeAddr(t), freeAddr(t)
	p := c.newProc("c1")
	p.coordinator = true
	p.args = []string{"server", "--name", "c1", "--listen", p.addr, "--data", p.data, "--coordinator", "--metrics-listen", c1HTTP}
	c.start(p)
	c.waitStatus(30*time.Second, "c1 leads", func(st *coord.Status) (bool, string) {
		return st.Leader == "c1", fmt.Sprintf("leader %q", st.Leader)
	})
	c.addBrick("b1", "h1", "--metrics-listen", b1HTTP, "--metrics-insecure")
	l := c.newProc("l1")
	l.args = []string{"server", "--name", "l1", "--listen", l.addr, "--data", l.data, "--lock", "--coord", c.proc("c1").addr}
	c.start(l)
	c.waitStatus(30*time.Second, "b1 up and l1 registered", func(st *coord.Status) (bool, string) {
		return brickOf(st, "b1") != nil && brickOf(st, "b1").State == "up" && len(st.LockServers) == 1, brickStates(st)
	})
	coordAddr, brickAddr, lockAddr := c.proc("c1").addr, c.proc("b1").addr, l.addr

	admin := pki.DialOption(pki.Default())
	mount := pki.DialOption(tlsIdentity(t, false, "m1", pki.RoleClient))
	plain := grpc.WithTransportCredentials(insecure.NewCredentials())
	for _, port := range []struct{ role, addr, call string }{
		{"coordinator", coordAddr, "GetMap"},
		{"brick", brickAddr, "Read"},
		{"lock", lockAddr, "Session"},
	} {
		if err := tlsRPC(t, port.addr, pki.DialOption(certless(t)), port.call); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s port, %s without a certificate: %v, want Unauthenticated", port.role, port.call, err)
		} else {
			t.Logf("%s port, no certificate: %v", port.role, err)
		}
		if err := tlsRPC(t, port.addr, foreignCreds(t), port.call); err == nil || status.Code(err) == codes.Unimplemented {
			t.Errorf("%s port, %s with another CA's certificate: %v, want a refused handshake", port.role, port.call, err)
		} else {
			t.Logf("%s port, another CA: %v", port.role, err)
		}
		if err := tlsRPC(t, port.addr, plain, port.call); status.Code(err) != codes.Unavailable {
			t.Errorf("%s port, %s in plaintext: %v, want Unavailable", port.role, port.call, err)
		} else {
			t.Logf("%s port, plaintext: %v", port.role, err)
		}
	}

	// Roles: a mount cannot register a brick nor replicate to one.
	err := tlsRPC(t, coordAddr, mount, "RegisterBrick")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "RegisterBrick") || !strings.Contains(err.Error(), `"m1"`) {
		t.Errorf("mount RegisterBrick: %v, want PermissionDenied naming the method and the caller", err)
	} else {
		t.Logf("mount RegisterBrick: %v", err)
	}
	for _, tc := range []struct{ addr, call string }{
		{brickAddr, "Replicate"}, {brickAddr, "ShardPut"},
		{coordAddr, "RegisterLockServer"}, {coordAddr, "Heartbeat"}, {coordAddr, "SGSynced"},
	} {
		if err := tlsRPC(t, tc.addr, mount, tc.call); status.Code(err) != codes.PermissionDenied {
			t.Errorf("mount %s: %v, want PermissionDenied", tc.call, err)
		}
	}
	// The operator's certificate administers, but is no brick.
	if err := tlsRPC(t, brickAddr, admin, "ShardPut"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("admin ShardPut: %v, want PermissionDenied", err)
	}
	if err := tlsRPC(t, coordAddr, admin, "Status"); err != nil {
		t.Errorf("admin Status: %v", err)
	}
	if err := tlsRPC(t, coordAddr, mount, "GetMap"); err != nil {
		t.Errorf("mount GetMap: %v", err)
	}

	// Raft: only a coordinator's certificate opens a stream.
	for _, tc := range []struct {
		what string
		cfg  *tls.Config // nil: plaintext
	}{
		{"plaintext", nil},
		{"no certificate", certless(t).ClientConfigFor(pki.RoleCoordinator)},
		{"a brick's certificate", tlsIdentity(t, false, "b9", pki.RoleBrick).ClientConfigFor(pki.RoleCoordinator)},
		{"another CA's coordinator", tlsIdentity(t, true, "c9", pki.RoleCoordinator).ClientConfigFor(pki.RoleCoordinator)},
	} {
		if err := raftStream(coordAddr, tc.cfg, 16); err == nil {
			t.Errorf("Raft stream with %s: accepted", tc.what)
		} else {
			t.Logf("Raft stream with %s: %v", tc.what, err)
		}
	}
	// The control: a coordinator's certificate keeps its stream open.
	if err := raftStream(coordAddr, tlsIdentity(t, false, "c9", pki.RoleCoordinator).ClientConfigFor(pki.RoleCoordinator), 0); err != nil {
		t.Errorf("Raft stream with a coordinator's certificate: %v, want it kept open", err)
	}

	// Garbage, a TLS record header with junk, a silent client: the
	// servers go on serving.
	r := rand.New(rand.NewPCG(1, 2))
	for _, addr := range []string{coordAddr, brickAddr, lockAddr, c1HTTP} {
		for i := range 5 {
			junk := make([]byte, 1+r.IntN(4096))
			for j := range junk {
				junk[j] = byte(r.Uint32())
			}
			if i == 1 {
				copy(junk, []byte{0x16, 0x03, 0x01, 0xff, 0xff}) // a handshake record that lies about its length
			}
			if i == 2 {
				junk[0] = netmux.RaftMagic
			}
			sendAndClose(t, addr, junk)
		}
	}
	silent, err := net.Dial("tcp", coordAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if err := tlsRPC(t, coordAddr, admin, "Status"); err != nil {
		t.Errorf("admin Status after garbage: %v", err)
	}
	if err := tlsRPC(t, brickAddr, mount, "Read"); status.Code(err) == codes.Unauthenticated || status.Code(err) == codes.PermissionDenied || status.Code(err) == codes.Unavailable {
		t.Errorf("mount Read at the brick after garbage: %v", err)
	}
	c.cli("status", c.coordArg())
	c.checkAlive()
	// The CLI without certificates: refused, and told why.
	if code, stderr := runNoCerts(t, "status", c.coordArg()); code == 0 || !strings.Contains(stderr, "no --certs given") {
		t.Errorf("status without certificates: exit %d, %q; want a hint about --certs", code, stderr)
	}

	// HTTP: c1 asks for a client certificate, b1 (--metrics-insecure) not.
	if _, err := httpsGet(t, c1HTTP, nil); err == nil {
		t.Errorf("c1's HTTP port served a client without a certificate")
	} else {
		t.Logf("c1 HTTP without a certificate: %v", err)
	}
	adminCert, err := tls.LoadX509KeyPair(filepath.Join(certsDir, pki.AdminCertFile), filepath.Join(certsDir, pki.AdminKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if body, err := httpsGet(t, c1HTTP, &adminCert); err != nil || !strings.Contains(body, "go_goroutines") {
		t.Errorf("c1 /metrics with the admin certificate: %v", err)
	}
	if body, err := httpsGet(t, b1HTTP, nil); err != nil || !strings.Contains(body, "go_goroutines") {
		t.Errorf("b1 /metrics (--metrics-insecure) without a certificate: %v", err)
	}
	// Plain HTTP gets Go's "400 Client sent an HTTP request to an HTTPS
	// server", never the metrics.
	if resp, err := http.Get("http://" + c1HTTP + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("c1's HTTP port served plain HTTP")
		}
	}
	c.checkAlive()
}

// raftStream opens a Raft stream to addr (TLS with cfg, or plaintext) and
// reports whether the server kept it open: an error when it refused.
func raftStream(addr string, cfg *tls.Config, junk int) error {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if cfg != nil {
		tc := tls.Client(conn, cfg)
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			return err
		}
		conn = tc
	}
	// The magic byte and junk bytes: in plaintext the server's TLS
	// handshake sees a record that is not one and gives up at once.
	if _, err := conn.Write(append([]byte{netmux.RaftMagic}, make([]byte, junk)...)); err != nil {
		return err
	}
	// A refused stream is closed at once; an accepted one waits for Raft
	// messages and stays silent.
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return nil
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return err
}

func sendAndClose(t *testing.T, addr string, b []byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	_, _ = conn.Write(b)
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.Copy(io.Discard, conn)
}

// httpsGet fetches /metrics over TLS, trusting the run's CA, presenting
// cert (nil: none).
func httpsGet(t *testing.T, addr string, cert *tls.Certificate) (string, error) {
	cfg := certless(t).ClientConfigFor(pki.Roles...)
	if cert != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	resp, err := cl.Get("https://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %s", resp.Status)
	}
	return string(b), err
}

// runNoCerts runs the CLI without PLUMERIA_CERTS in its environment.
func runNoCerts(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, plumeriaBin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PLUMERIA_CERTS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run plumeria %s: %v", strings.Join(args, " "), err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// TestTLSCommands: init refuses to overwrite a CA; a server or mount
// with neither certificates nor --insecure refuses to start with a
// one-line reason naming plumeria init and --insecure.
func TestTLSCommands(t *testing.T) {
	if certsDir == "" {
		t.Skip("the run has no CA")
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"init", "--certs", certsDir}, []string{"already exists", "refusing to overwrite"}},
		{[]string{"init"}, []string{"give --certs DIR"}},
		{[]string{"init", "--certs", filepath.Join(dir, "c"), "--cluster", "Bad Name"}, []string{"cluster id"}},
		{[]string{"server", "--name", "s", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "s"), "--brick"}, []string{"plumeria init", "--insecure"}},
		{[]string{"mount", "--volume", "v", "--name", "m", filepath.Join(dir, "mnt")}, []string{"plumeria init", "--insecure"}},
		{[]string{"server", "--name", "s", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "s"), "--brick", "--certs", filepath.Join(dir, "none")}, []string{"plumeria init"}},
	} {
		code, stderr := runNoCerts(t, tc.args...)
		lines := strings.Count(strings.TrimSpace(stderr), "\n") + 1
		ok := code != 0 && lines == 1
		for _, w := range tc.want {
			ok = ok && strings.Contains(stderr, w)
		}
		if !ok {
			t.Errorf("plumeria %s: exit %d, stderr %q; want a one-line error with %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
	// A new CA: init prints what it made and the export line.
	out, err := exec.Command(plumeriaBin, "init", "--certs", filepath.Join(dir, "new"), "--cluster", "t").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "export PLUMERIA_CERTS=") || !strings.Contains(string(out), "admin.crt") {
		t.Errorf("plumeria init: %v\n%s", err, out)
	}
}
