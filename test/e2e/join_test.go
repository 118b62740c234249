package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/internal/pki"
)

var netDialer = net.Dialer{Timeout: 5 * time.Second}

// servedCert returns the certificate a TLS port presents now.
func servedCert(t *testing.T, addr string) *x509.Certificate {
	t.Helper()
	conn, err := tls.DialWithDialer(&netDialer, "tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("TLS to %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

// TestJoinToken: nodes with no certs directory join with tokens (checked
// against the CA the token pins); a token works once per name, only for
// its roles, and not after it expires; a joined member's certificate is
// renewed without a restart (15 s lifetimes here); a revoked node is
// refused at the coordinator and brick ports and cannot renew.
func TestJoinToken(t *testing.T) {
	// The coordinator issues 15-second certificates to nodes that join.
	c := startFSClusterCoord(t, []string{"--cert-lifetime", "15s"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	token := func(roles, ttl string) string {
		out := strings.TrimSpace(string(c.cli("token", "create", c.coordArg(), "--roles", roles, "--ttl", ttl)))
		if _, err := pki.ParseToken(out); err != nil {
			t.Fatalf("token create printed %q: %v", out, err)
		}
		return out
	}
	clientTok := token("client", "10m")
	// plumeria init's token (the coordinator put it in the map).
	b, err := os.ReadFile(filepath.Join(certsDir, "join-token"))
	if err != nil {
		t.Fatal(err)
	}
	brickTok, _, _ := strings.Cut(string(b), "\n")

	// A brick joins with init's token: no certs directory, its certificate
	// in its data directory.
	b4 := c.newProc("b4")
	b4.brick = true
	b4.env = []string{"PLUMERIA_CERTS="}
	b4.args = []string{"server", "--name", "b4", "--listen", b4.addr, "--data", b4.data, "--brick", c.coordArg(), "--domain", "host=h4", "--token", brickTok}
	c.start(b4)
	c.waitBrickState("b4", "up", 60*time.Second)
	if _, err := os.Stat(filepath.Join(b4.data, "tls", "node.crt")); err != nil {
		t.Fatalf("b4 keeps no certificate: %v", err)
	}

	// A client token cannot start a brick; a brick token not a mount.
	bad := c.run(60*time.Second, nil, "server", "--name", "b5", "--listen", freeAddr(t), "--data", filepath.Join(c.dir, "b5"), "--brick", c.coordArg(), "--token", clientTok, "--certs", "")
	if bad.code == 0 || !strings.Contains(bad.String(), "grants roles") {
		t.Fatalf("a brick with a client token: %v", bad)
	}

	// A mount joins with a token and keeps its certificate in --tls-dir.
	m1 := c.newProc("m1")
	mnt := filepath.Join(c.dir, "m1.mnt")
	os.MkdirAll(mnt, 0o755)
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	tlsDir := filepath.Join(c.dir, "m1.tls")
	metrics := freeAddr(t)
	m1.env = []string{"PLUMERIA_CERTS="}
	m1.args = []string{"mount", c.coordArg(), "--volume", "fs", "--name", "m1", "--token", clientTok, "--tls-dir", tlsDir, "--metrics-listen", metrics, "--metrics-insecure", mnt}
	mnt = c.mountNode("m1")
	if err := os.WriteFile(filepath.Join(mnt, "hello"), []byte("joined"), 0o644); err != nil {
		t.Fatal(err)
	}

	// The same token again for the same name: refused.
	again := c.run(60*time.Second, nil, "mount", c.coordArg(), "--volume", "fs", "--name", "m1", "--token", clientTok, "--tls-dir", t.TempDir(), "--certs", "", t.TempDir())
	if again.code == 0 || !strings.Contains(again.String(), "already used") {
		t.Fatalf("a second join as m1 with one token: %v", again)
	}
	// A token that expires while m1's certificate ages (below).
	short := token("client", "10s")
	shortEnds := time.Now().Add(10 * time.Second)

	// Renewal without a restart: the mount's metrics port presents a new
	// certificate once two thirds of the old one's life have passed.
	first := servedCert(t, metrics)
	if life := first.NotAfter.Sub(time.Now()); life > time.Minute {
		t.Fatalf("m1's certificate lives %v: the coordinator should issue 15 s ones", life)
	}
	pid := m1.cmd.Process.Pid
	c.waitFor(60*time.Second, "m1's certificate renewed", func() (bool, string) {
		now := servedCert(t, metrics)
		return now.SerialNumber.Cmp(first.SerialNumber) != 0, "serial " + now.SerialNumber.String()
	})
	if !m1.running() || m1.cmd.Process.Pid != pid {
		t.Fatal("m1 restarted")
	}
	// The expired token: refused.
	time.Sleep(time.Until(shortEnds) + time.Second)
	late := c.run(60*time.Second, nil, "mount", c.coordArg(), "--volume", "fs", "--name", "m9", "--token", short, "--tls-dir", t.TempDir(), "--certs", "", t.TempDir())
	if late.code == 0 || !strings.Contains(late.String(), "expired") {
		t.Fatalf("join with an expired token: %v", late)
	}
	// Past the first certificate's end, the mount still works (new
	// connections use the new certificate).
	time.Sleep(time.Until(first.NotAfter) + time.Second)
	if err := os.WriteFile(filepath.Join(mnt, "after-renewal"), []byte("still here"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "hello")); err != nil || string(b) != "joined" {
		t.Fatalf("read back: %q %v", b, err)
	}

	// Revoke m1: its certificate is refused at the coordinator and at a
	// brick (once the brick has the map), and cannot be renewed.
	c.cli("node", "revoke", c.coordArg(), "m1")
	id, err := pki.LoadIdentity(tlsDir)
	if err != nil {
		t.Fatal(err)
	}
	call := func(addr string, fn func(*grpc.ClientConn) error) error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(id.ClientConfig())))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return fn(conn)
	}
	st, _ := c.status()
	coordAddr := c.coordAddrs()[0]
	err = call(coordAddr, func(cc *grpc.ClientConn) error {
		_, err := pb.NewCoordinatorClient(cc).GetMap(ctx, &pb.GetMapRequest{})
		return err
	})
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("a revoked node at the coordinator: %v", err)
	}
	b1 := brickOf(st, "b1")
	c.waitFor(30*time.Second, "b1 refuses m1", func() (bool, string) {
		err := call(b1.Addr, func(cc *grpc.ClientConn) error {
			_, err := pb.NewBrickClient(cc).Read(ctx, &pb.ReadRequest{})
			return err
		})
		return status.Code(err) == codes.Unauthenticated, "b1 answered " + status.Code(err).String()
	})
	err = call(coordAddr, func(cc *grpc.ClientConn) error {
		csr, err := pki.NewCSR(id.Key(), "m1")
		if err != nil {
			return err
		}
		_, err = pb.NewCoordinatorClient(cc).RenewCertificate(ctx, &pb.RenewCertificateRequest{CsrPem: csr})
		return err
	})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("renewal of a revoked node: %v", err)
	}
	// Its mount can no longer write: a write and fsync of a file it holds
	// fails (the bricks refuse it) instead of hanging; then it unmounts.
	done := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(filepath.Join(mnt, "hello"), os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			_, err = f.Write([]byte(" and revoked"))
			if err == nil {
				err = f.Sync()
			}
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a revoked mount wrote and synced")
		}
		t.Logf("a write on the revoked mount: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("a write on the revoked mount hangs")
	}
	c.stop("m1")
}
