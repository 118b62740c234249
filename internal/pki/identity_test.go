package pki

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// newID returns an identity of ca for name with roles.
func newID(t testing.TB, ca *CA, name string, roles ...string) *Identity {
	t.Helper()
	key, _ := NewKey()
	certPEM, err := ca.Issue(key.Public(), name, roles, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := MarshalKey(key)
	id, err := NewIdentity(ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.Set(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	return id
}

// tlsServer accepts TLS connections with cfg and writes the server's
// certificate serial... it answers each with one byte after the handshake.
func tlsServer(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc, err := ServerHandshake(c, cfg)
				if err != nil {
					return
				}
				_, _ = tc.Write([]byte{1})
			}()
		}
	}()
	return ln.Addr().String()
}

// handshake dials addr with cfg and returns the server's certificate CN.
func handshake(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return "", err
	}
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

func TestIdentityHandshake(t *testing.T) {
	ca := mustCA(t, "c1")
	srv := newID(t, ca, "b1", RoleBrick)
	addr := tlsServer(t, srv.ServerConfig())
	cli := newID(t, ca, "m1", RoleClient)
	if cn, err := handshake(addr, cli.ClientConfig()); err != nil || cn != "b1" {
		t.Fatalf("handshake: %q %v", cn, err)
	}
	// Rotation: new handshakes use the new certificate.
	key, _ := NewKey()
	certPEM, _ := ca.Issue(key.Public(), "b1-renewed", []string{RoleBrick}, time.Hour, time.Now())
	keyPEM, _ := MarshalKey(key)
	if err := srv.Set(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	if cn, err := handshake(addr, cli.ClientConfig()); err != nil || cn != "b1-renewed" {
		t.Fatalf("handshake after Set: %q %v", cn, err)
	}
}

func TestClientRefusesServers(t *testing.T) {
	ca := mustCA(t, "c1")
	cli := newID(t, ca, "m1", RoleClient)
	// A server with only the client role cannot pose as a server.
	addr := tlsServer(t, newID(t, ca, "m2", RoleClient).ServerConfig())
	if _, err := handshake(addr, cli.ClientConfig()); err == nil || !strings.Contains(err.Error(), "needs one of") {
		t.Errorf("handshake with a client-role server: %v", err)
	}
	// A server of another CA.
	addr = tlsServer(t, newID(t, mustCA(t, "c1"), "b1", RoleBrick).ServerConfig())
	if _, err := handshake(addr, cli.ClientConfig()); err == nil || !strings.Contains(err.Error(), "not from this cluster's CA") {
		t.Errorf("handshake with another CA's server: %v", err)
	}
}

func TestServerRefusesOtherCA(t *testing.T) {
	ca := mustCA(t, "c1")
	addr := tlsServer(t, newID(t, ca, "b1", RoleBrick).ServerConfig())
	// The client trusts the cluster CA but presents another CA's
	// certificate: the server ends the handshake.
	foreign := newID(t, mustCA(t, "c1"), "m1", RoleClient)
	cfg := newID(t, ca, "x", RoleClient).ClientConfig()
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return foreign.getCertificate()
	}
	if _, err := handshake(addr, cfg); err == nil {
		t.Error("the server accepted a certificate of another CA")
	}
}

func TestServerHandshakeTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("waits HandshakeTimeout")
	}
	ca := mustCA(t, "c1")
	a, b := net.Pipe()
	defer b.Close()
	start := time.Now()
	_, err := ServerHandshake(a, newID(t, ca, "b1", RoleBrick).ServerConfig())
	if err == nil || time.Since(start) < HandshakeTimeout/2 {
		t.Errorf("silent client: %v after %v", err, time.Since(start))
	}
}

func TestSetRefuses(t *testing.T) {
	ca := mustCA(t, "c1")
	id, _ := NewIdentity(ca.CertPEM)
	key, _ := NewKey()
	other, _ := NewKey()
	certPEM, _ := ca.Issue(key.Public(), "n1", []string{RoleBrick}, time.Hour, time.Now())
	otherPEM, _ := MarshalKey(other)
	if err := id.Set(certPEM, otherPEM); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("Set with another key: %v", err)
	}
	foreignPEM, _ := mustCA(t, "c1").Issue(key.Public(), "n1", []string{RoleBrick}, time.Hour, time.Now())
	keyPEM, _ := MarshalKey(key)
	if err := id.Set(foreignPEM, keyPEM); err == nil {
		t.Error("Set accepted another CA's certificate")
	}
	expired, _ := ca.Issue(key.Public(), "n1", []string{RoleBrick}, time.Minute, time.Now().Add(-time.Hour))
	if err := id.Set(expired, keyPEM); err == nil {
		t.Error("Set accepted an expired certificate")
	}
	if id.Certificate() != nil {
		t.Error("a refused Set left a certificate")
	}
}

func TestIdentitySaveLoad(t *testing.T) {
	ca := mustCA(t, "c1")
	id := newID(t, ca, "n1", RoleCoordinator, RoleBrick)
	dir := filepath.Join(t.TempDir(), "tls")
	if err := id.Save(dir); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, NodeKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("node.key: %v %v", fi.Mode(), err)
	}
	got, err := LoadIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name() != "n1" || strings.Join(got.Roles(), ",") != "coordinator,brick" || got.ClusterID() != "c1" {
		t.Errorf("loaded %q %v %q", got.Name(), got.Roles(), got.ClusterID())
	}
}

func TestLoadSource(t *testing.T) {
	certs := t.TempDir()
	ca := mustCA(t, "c1")
	if err := ca.Save(certs); err != nil {
		t.Fatal(err)
	}
	if err := ca.IssueAdmin(certs, "admin", time.Now()); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "tls")
	s := Source{CertsDir: certs, StateDir: state, Name: "n1", Roles: []string{RoleBrick}}
	id1, err := Load(s, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	id2, err := Load(s, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !id1.Certificate().Equal(id2.Certificate()) {
		t.Error("a restart did not reuse the stored certificate")
	}
	s.Roles = []string{RoleBrick, RoleLock}
	id3, err := Load(s, time.Now())
	if err != nil || id3.Certificate().Equal(id1.Certificate()) || len(id3.Roles()) != 2 {
		t.Errorf("new roles: %v, roles %v", err, id3.Roles())
	}
	// Past two thirds of its life, a certificate is replaced.
	id4, err := Load(s, time.Now().Add(LeafLifetime*3/4))
	if err != nil || id4.Certificate().Equal(id3.Certificate()) {
		t.Errorf("old certificate: %v", err)
	}
	admin, err := Load(Source{CertsDir: certs, Admin: true}, time.Now())
	if err != nil || admin.Name() != "admin" || admin.Roles()[0] != RoleAdmin {
		t.Errorf("admin: %v", err)
	}
	// Without ca.key nothing new can be issued, but a stored certificate
	// is used as it is.
	s2 := Source{CertsDir: certs, StateDir: filepath.Join(t.TempDir(), "tls"), Name: "n3", Roles: []string{RoleLock}}
	id5, err := Load(s2, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(certs, CAKeyFile))
	if id6, err := Load(s2, time.Now()); err != nil || !id6.Certificate().Equal(id5.Certificate()) {
		t.Errorf("Load without ca.key of a stored certificate: %v", err)
	}
	if _, err := Load(Source{CertsDir: certs, Name: "n2", Roles: []string{RoleBrick}}, time.Now()); !errors.Is(err, ErrNoCertificate) {
		t.Errorf("Load without ca.key = %v, want ErrNoCertificate", err)
	}
	if _, err := Load(Source{}, time.Now()); !errors.Is(err, ErrNoCertificate) {
		t.Errorf("Load without certs dir = %v", err)
	}
}
