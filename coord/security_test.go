package coord

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/netmux"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/internal/pki"
)

// issued returns an identity of ca for name and roles.
func issued(t *testing.T, ca *pki.CA, name string, roles ...string) *pki.Identity {
	t.Helper()
	id, err := ca.NewIdentity(name, roles, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// startTLS starts a one-member coordinator holding ca whose gRPC port
// speaks mutual TLS with the role checks, and returns its address.
func startTLS(t *testing.T, ca *pki.CA) (*Server, string) {
	t.Helper()
	mux, err := netmux.Listen("127.0.0.1:0", nil) // Raft only: one member, no peers
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(pki.ServerOptions(issued(t, ca, "c1", pki.RoleCoordinator))...)
	s, err := Start(Config{Name: "c1", Addr: lis.Addr().String(), DataDir: t.TempDir(), CA: ca, CertLifetime: time.Hour,
		Lease: 100 * time.Millisecond, DeadAfter: 300 * time.Millisecond, Registerer: prometheus.NewRegistry()}, mux.Raft(), gs)
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(func() { gs.Stop(); s.Stop(); mux.Close() })
	for deadline := time.Now().Add(10 * time.Second); !s.IsLeader(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("c1 did not become leader")
		}
	}
	return s, lis.Addr().String()
}

func clientAs(t *testing.T, addr string, id *pki.Identity) pb.CoordinatorClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(id.ClientConfig())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewCoordinatorClient(conn)
}

func wantCode(t *testing.T, err error, code codes.Code, substr string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(err.Error(), substr) {
		t.Fatalf("got %v, want %v with %q", err, code, substr)
	}
}

// TestJoinTokens: a token gets a node a certificate for its name and the
// roles the token grants, once per name; a wrong secret, wrong roles and a
// coordinator of another CA are refused; only the coordinator role gets
// the CA key; a member renews its own certificate; a revoked node is
// refused and cannot renew or join again.
func TestJoinTokens(t *testing.T) {
	ca, err := pki.NewCA("jointest", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, addr := startTLS(t, ca)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := clientAs(t, addr, issued(t, ca, "admin", pki.RoleAdmin))

	for _, bad := range []*pb.CreateJoinTokenRequest{{}, {Roles: []string{"wizard"}}, {Roles: []string{pki.RoleAdmin}}, {Roles: []string{pki.RoleClient}, TtlS: -1},
		{Roles: []string{pki.RoleClient}, TtlS: 1}, {Roles: []string{pki.RoleClient}, TtlS: 1 << 40}} {
		_, err := admin.CreateJoinToken(ctx, bad)
		wantCode(t, err, codes.InvalidArgument, "join token")
	}
	resp, err := admin.CreateJoinToken(ctx, &pb.CreateJoinTokenRequest{Roles: []string{pki.RoleClient}, TtlS: 60})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := pki.ParseToken(resp.Token)
	if err != nil {
		t.Fatal(err)
	}
	if tok.CAHash != pki.CAHash(ca.CertPEM) {
		t.Fatalf("token pins %s, CA is %s", tok.CAHash, pki.CAHash(ca.CertPEM))
	}

	m1, err := coordclient.JoinCluster(ctx, []string{addr}, tok, "m1", []string{pki.RoleClient})
	if err != nil {
		t.Fatal(err)
	}
	if m1.Identity.Name() != "m1" || strings.Join(m1.Identity.Roles(), ",") != pki.RoleClient || m1.CAKeyPEM != nil {
		t.Fatalf("m1 joined as %s %v, CA key %d bytes", m1.Identity.Name(), m1.Identity.Roles(), len(m1.CAKeyPEM))
	}
	_, err = coordclient.JoinCluster(ctx, []string{addr}, tok, "m1", []string{pki.RoleClient})
	wantCode(t, err, codes.PermissionDenied, "already used")
	_, err = coordclient.JoinCluster(ctx, []string{addr}, tok, "b9", []string{pki.RoleBrick})
	wantCode(t, err, codes.PermissionDenied, "grants roles")
	wrong := tok
	wrong.Secret = append([]byte(nil), tok.Secret...)
	wrong.Secret[0] ^= 1
	_, err = coordclient.JoinCluster(ctx, []string{addr}, wrong, "m3", []string{pki.RoleClient})
	wantCode(t, err, codes.PermissionDenied, "wrong secret")
	other, _ := pki.NewCA("other", time.Now())
	elsewhere := tok
	elsewhere.CAHash = pki.CAHash(other.CertPEM)
	if _, err = coordclient.JoinCluster(ctx, []string{addr}, elsewhere, "m4", []string{pki.RoleClient}); err == nil || !strings.Contains(err.Error(), "pins") {
		t.Fatalf("join with a token of another CA: %v", err)
	}

	// The joined identity works, within its role.
	m1c := clientAs(t, addr, m1.Identity)
	if _, err := m1c.GetMap(ctx, &pb.GetMapRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err = m1c.CreateJoinToken(ctx, &pb.CreateJoinTokenRequest{Roles: []string{pki.RoleBrick}})
	wantCode(t, err, codes.PermissionDenied, "may not call")

	// Renewal keeps the name and roles, under a new serial.
	before := m1.Identity.Certificate()
	renew := coordclient.RenewerFor(m1c)
	cert, err := renew(ctx, mustCSR(t, m1.Identity))
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := pki.MarshalKey(m1.Identity.Key())
	if err := m1.Identity.Set(cert, keyPEM); err != nil {
		t.Fatal(err)
	}
	after := m1.Identity.Certificate()
	if after.SerialNumber.Cmp(before.SerialNumber) == 0 || after.Subject.CommonName != "m1" || strings.Join(after.Subject.OrganizationalUnit, ",") != pki.RoleClient {
		t.Fatalf("renewed: serial %v (was %v), %s %v", after.SerialNumber, before.SerialNumber, after.Subject.CommonName, after.Subject.OrganizationalUnit)
	}

	// The coordinator role gets the CA key.
	cresp, err := admin.CreateJoinToken(ctx, &pb.CreateJoinTokenRequest{Roles: []string{pki.RoleCoordinator, pki.RoleBrick}, TtlS: 60})
	if err != nil {
		t.Fatal(err)
	}
	ctok, _ := pki.ParseToken(cresp.Token)
	c2, err := coordclient.JoinCluster(ctx, []string{addr}, ctok, "c2", []string{pki.RoleCoordinator})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.ParseCA(ca.CertPEM, c2.CAKeyPEM); err != nil {
		t.Fatalf("the coordinator's CA key: %v", err)
	}

	// Revoked: refused at once (the coordinator notes its own map), cannot
	// renew, cannot join again under the name.
	if _, err := admin.RevokeNode(ctx, &pb.RevokeNodeRequest{Name: "m1"}); err != nil {
		t.Fatal(err)
	}
	m1again := clientAs(t, addr, m1.Identity) // a new connection
	_, err = m1again.GetMap(ctx, &pb.GetMapRequest{})
	wantCode(t, err, codes.Unauthenticated, "revoked")
	_, err = m1c.RenewCertificate(ctx, &pb.RenewCertificateRequest{CsrPem: mustCSR(t, m1.Identity)})
	wantCode(t, err, codes.Unauthenticated, "revoked")
	resp2, _ := admin.CreateJoinToken(ctx, &pb.CreateJoinTokenRequest{Roles: []string{pki.RoleClient}, TtlS: 60})
	tok2, _ := pki.ParseToken(resp2.Token)
	_, err = coordclient.JoinCluster(ctx, []string{addr}, tok2, "m1", []string{pki.RoleClient})
	wantCode(t, err, codes.PermissionDenied, "revoked")

	// Without a certificate only IssueCertificate is served.
	anon, err := pki.NewIdentity(ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	_, err = clientAs(t, addr, anon).GetMap(ctx, &pb.GetMapRequest{})
	wantCode(t, err, codes.Unauthenticated, "no certificate")
}

func mustCSR(t *testing.T, id *pki.Identity) []byte {
	t.Helper()
	csr, err := pki.NewCSR(id.Key(), id.Name())
	if err != nil {
		t.Fatal(err)
	}
	return csr
}
