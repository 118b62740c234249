package pki_test

import (
	"context"
	"crypto/x509"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/internal/inproc"
	"github.com/plumeria-fs/plumeria/internal/localnet"
	"github.com/plumeria-fs/plumeria/internal/netmux"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/internal/pki"
)

// TestAuthorizationInProcess: a client of the same process reaches a
// netmux server in memory (no TLS), and every decision is the one the TLS
// path makes (testAuthorization): the caller's name and roles, a role
// refused, a certless caller, another CA's certificate, a revoked name,
// and a server whose certificate has no server role.
func TestAuthorizationInProcess(t *testing.T) {
	ca, err := pki.NewCA("c1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srvID := newIdentity(t, ca, "c1n1", pki.RoleCoordinator)
	addr, stub := serveMux(t, srvID)
	var local atomic.Int32
	// callAs presents chain as the client's certificate, with id's checks
	// of the server (as if the process's certificate were chain).
	callAs := func(id *pki.Identity, chain []*x509.Certificate, method string) error {
		return callWith(t, addr, method, pki.DialOption(id), grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			c, ok, err := localnet.Dial(ctx, a, chain)
			if !ok {
				t.Errorf("%s is not dialled in memory", a)
				var d net.Dialer
				return d.DialContext(ctx, "tcp", a)
			}
			local.Add(1)
			return c, err
		}))
	}
	callLocal := func(id *pki.Identity, method string) error { return callAs(id, id.Chain(), method) }
	admin := newIdentity(t, ca, "ops", pki.RoleAdmin)
	if err := callLocal(admin, "Status"); err != nil {
		t.Fatalf("admin Status: %v", err)
	}
	if got := <-stub.peer; got != "ops:admin" {
		t.Errorf("Peer = %q, want ops:admin", got)
	}
	if local.Load() == 0 {
		t.Fatal("no in-process connection was made")
	}
	err = callLocal(newIdentity(t, ca, "m1", pki.RoleClient), "RegisterBrick")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `"m1"`) {
		t.Errorf("mount RegisterBrick: %v, want PermissionDenied naming the caller", err)
	}
	if err := callLocal(newIdentity(t, ca, "b1", pki.RoleBrick), "RegisterBrick"); status.Code(err) != codes.Unimplemented {
		t.Errorf("brick RegisterBrick: %v, want to pass authorization (Unimplemented in the stub)", err)
	}
	certless, _ := pki.NewIdentity(ca.CertPEM)
	if err := callLocal(certless, "GetMap"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("certless GetMap: %v, want Unauthenticated", err)
	}
	// Another CA: the client refuses the server, and the server refuses
	// the other CA's certificate.
	other, _ := pki.NewCA("c1", time.Now())
	foreign := newIdentity(t, other, "m1", pki.RoleAdmin)
	if err := callLocal(foreign, "Status"); err == nil || status.Code(err) == codes.OK {
		t.Errorf("a client of another CA: %v", err)
	}
	if err := callAs(admin, foreign.Chain(), "Status"); err == nil || status.Code(err) == codes.OK {
		t.Errorf("another CA's certificate presented to the server: %v", err)
	}
	pki.SetRevoked(func(name string) bool { return name == "ops" })
	err = callLocal(admin, "Status")
	pki.SetRevoked(nil)
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("revoked admin: %v, want Unauthenticated", err)
	}
	// A server whose certificate carries only the client role is refused
	// by the client, as the TLS client's VerifyConnection refuses it.
	fake, _ := serveMux(t, newIdentity(t, ca, "m9", pki.RoleClient))
	addr = fake
	if err := callLocal(admin, "Status"); status.Code(err) != codes.Unavailable {
		t.Errorf("a server without a server role: %v, want Unavailable", err)
	}
}

// serveMux serves a coordinator stub on a netmux port with srvID, as a
// node does.
func serveMux(t *testing.T, srvID *pki.Identity) (string, *coordStub) {
	t.Helper()
	m, err := netmux.Listen("127.0.0.1:0", srvID)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(pki.HandshakedServerOptions(srvID)...)
	stub := &coordStub{peer: make(chan string, 10)}
	pb.RegisterCoordinatorServer(gs, stub)
	go gs.Serve(m.GRPC())
	t.Cleanup(func() { gs.Stop(); m.Close() })
	return m.Addr().String(), stub
}

// TestAuthorizationDirect: a direct call to a server of the same process
// (internal/inproc) presents the process's identity as a handshake would
// (LocalAuthInfo), so authorization decides as over TLS: the caller's
// name and roles, a role refused, a process without a certificate, a
// revoked name.
func TestAuthorizationDirect(t *testing.T) {
	ca, err := pki.NewCA("c1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	call := func(id *pki.Identity, method string) error {
		t.Helper()
		s := inproc.NewServer(id.LocalAuthInfo, pki.UnaryServerInterceptor)
		stub := &coordStub{peer: make(chan string, 10)}
		pb.RegisterCoordinatorServer(s, stub)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // nothing listens: a call that is not direct fails
		if err := s.Serve(addr); err != nil {
			t.Fatal(err)
		}
		defer s.Stop()
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		conn := inproc.Wrap(cc, addr)
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cl := pb.NewCoordinatorClient(conn)
		switch method {
		case "Status":
			if _, err = cl.Status(ctx, &pb.StatusRequest{}); err == nil {
				if got := <-stub.peer; got != id.Name()+":admin" {
					t.Errorf("Peer = %q, want %s:admin", got, id.Name())
				}
			}
		case "RegisterBrick":
			_, err = cl.RegisterBrick(ctx, &pb.RegisterBrickRequest{})
		}
		return err
	}
	admin := newIdentity(t, ca, "ops", pki.RoleAdmin)
	if err := call(admin, "Status"); err != nil {
		t.Fatalf("admin Status: %v", err)
	}
	if err := call(newIdentity(t, ca, "m1", pki.RoleClient), "RegisterBrick"); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `"m1"`) {
		t.Errorf("mount RegisterBrick: %v, want PermissionDenied naming the caller", err)
	}
	if err := call(newIdentity(t, ca, "b1", pki.RoleBrick), "RegisterBrick"); status.Code(err) != codes.Unimplemented {
		t.Errorf("brick RegisterBrick: %v, want to pass authorization (Unimplemented in the stub)", err)
	}
	certless, _ := pki.NewIdentity(ca.CertPEM)
	if err := call(certless, "RegisterBrick"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("certless RegisterBrick: %v, want Unauthenticated", err)
	}
	pki.SetRevoked(func(name string) bool { return name == "ops" })
	err = call(admin, "Status")
	pki.SetRevoked(nil)
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("revoked admin: %v, want Unauthenticated", err)
	}
}
