package pki_test

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/internal/pki"
	"github.com/plumeria-fs/plumeria/lock/lockpb"
)

// TestTableCoversServices: every method of every service a Plumeria
// server registers is in the role table, and the table names no method
// that does not exist.
func TestTableCoversServices(t *testing.T) {
	exist := map[string]bool{}
	for _, sd := range []grpc.ServiceDesc{pb.Coordinator_ServiceDesc, pb.Brick_ServiceDesc, lockpb.Lock_ServiceDesc} {
		var names []string
		for _, m := range sd.Methods {
			names = append(names, m.MethodName)
		}
		for _, s := range sd.Streams {
			names = append(names, s.StreamName)
		}
		for _, n := range names {
			full := "/" + sd.ServiceName + "/" + n
			exist[full] = true
			roles, ok := pki.MethodRoles(full)
			if !ok {
				t.Errorf("%s is not in the role table of internal/pki (authz.go): add it", full)
				continue
			}
			if len(roles) == 0 {
				t.Errorf("%s: no role may call it", full)
			}
		}
	}
	// Spot checks of the policy.
	for _, tc := range []struct {
		method string
		role   string
		want   bool
	}{
		{"/plumeria.v1.Coordinator/RegisterBrick", pki.RoleClient, false},
		{"/plumeria.v1.Coordinator/RegisterBrick", pki.RoleAdmin, false},
		{"/plumeria.v1.Coordinator/RegisterBrick", pki.RoleBrick, true},
		{"/plumeria.v1.Coordinator/SGSynced", pki.RoleClient, false},
		{"/plumeria.v1.Coordinator/Heartbeat", pki.RoleClient, false},
		{"/plumeria.v1.Coordinator/Join", pki.RoleAdmin, false},
		{"/plumeria.v1.Coordinator/Status", pki.RoleClient, true},
		{"/plumeria.v1.Coordinator/CreateVolume", pki.RoleClient, false},
		{"/plumeria.v1.Coordinator/CreateVolume", pki.RoleAdmin, true},
		{"/plumeria.v1.Brick/Replicate", pki.RoleClient, false},
		{"/plumeria.v1.Brick/ShardPut", pki.RoleAdmin, false},
		{"/plumeria.v1.Brick/Inventory", pki.RoleAdmin, true}, // vdisk verify
		{"/plumeria.v1.Brick/Inventory", pki.RoleClient, false},
		{"/plumeria.v1.Brick/Write", pki.RoleClient, true},
		{"/plumeria.v1.Brick/Write", pki.RoleBrick, false},
		{"/plumeria.lock.v1.Lock/Session", pki.RoleClient, true},
		{"/plumeria.lock.v1.Lock/Session", pki.RoleBrick, false},
	} {
		roles, _ := pki.MethodRoles(tc.method)
		if got := slices.Contains(roles, tc.role); got != tc.want {
			t.Errorf("%s allowed to %s: %v, want %v", tc.method, tc.role, got, tc.want)
		}
	}
}

type coordStub struct {
	pb.UnimplementedCoordinatorServer
	peer chan string
}

func (s *coordStub) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	name, roles, ok := pki.Peer(ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "no peer")
	}
	s.peer <- name + ":" + strings.Join(roles, ",")
	return &pb.StatusResponse{}, nil
}

func newIdentity(t *testing.T, ca *pki.CA, name string, roles ...string) *pki.Identity {
	t.Helper()
	id, err := ca.NewIdentity(name, roles, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// handshakingListener terminates TLS itself, as internal/netmux does.
type handshakingListener struct {
	net.Listener
	cfg *tls.Config
}

func (l handshakingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc, err := pki.ServerHandshake(c, l.cfg)
		if err == nil {
			return tc, nil
		}
	}
}

func serve(t *testing.T, srvID *pki.Identity, handshaked bool) (string, *coordStub) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := pki.ServerOptions(srvID)
	if handshaked {
		opts = pki.HandshakedServerOptions(srvID)
		ln = handshakingListener{ln, srvID.ServerConfig()}
	}
	gs := grpc.NewServer(opts...)
	stub := &coordStub{peer: make(chan string, 10)}
	pb.RegisterCoordinatorServer(gs, stub)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return ln.Addr().String(), stub
}

func call(t *testing.T, addr string, opt grpc.DialOption, method string) error {
	return callWith(t, addr, method, opt)
}

func callWith(t *testing.T, addr, method string, opts ...grpc.DialOption) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl := pb.NewCoordinatorClient(conn)
	switch method {
	case "Status":
		_, err = cl.Status(ctx, &pb.StatusRequest{})
	case "RegisterBrick":
		_, err = cl.RegisterBrick(ctx, &pb.RegisterBrickRequest{})
	case "GetMap":
		_, err = cl.GetMap(ctx, &pb.GetMapRequest{})
	}
	return err
}

func TestAuthorization(t *testing.T) {
	for _, handshaked := range []bool{false, true} {
		name := "grpc-tls"
		if handshaked {
			name = "handshaked"
		}
		t.Run(name, func(t *testing.T) { testAuthorization(t, handshaked) })
	}
}

func testAuthorization(t *testing.T, handshaked bool) {
	ca, err := pki.NewCA("c1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	addr, stub := serve(t, newIdentity(t, ca, "c1n1", pki.RoleCoordinator), handshaked)
	admin := newIdentity(t, ca, "ops", pki.RoleAdmin)
	mount := newIdentity(t, ca, "m1", pki.RoleClient)
	brick := newIdentity(t, ca, "b1", pki.RoleBrick)

	if err := call(t, addr, pki.DialOption(admin), "Status"); err != nil {
		t.Fatalf("admin Status: %v", err)
	}
	if got := <-stub.peer; got != "ops:admin" {
		t.Errorf("Peer = %q, want ops:admin", got)
	}
	err = call(t, addr, pki.DialOption(mount), "RegisterBrick")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "RegisterBrick") || !strings.Contains(err.Error(), `"m1"`) || !strings.Contains(err.Error(), "brick") {
		t.Errorf("mount RegisterBrick: %v, want PermissionDenied naming the method, caller and role", err)
	}
	if err := call(t, addr, pki.DialOption(brick), "RegisterBrick"); status.Code(err) != codes.Unimplemented {
		t.Errorf("brick RegisterBrick: %v, want to pass authorization (Unimplemented in the stub)", err)
	}

	// A client with the CA but no certificate: Unauthenticated.
	certless, _ := pki.NewIdentity(ca.CertPEM)
	if err := call(t, addr, pki.DialOption(certless), "GetMap"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("certless GetMap: %v, want Unauthenticated", err)
	}
	// A certificate of another CA: the handshake fails.
	other, _ := pki.NewCA("c1", time.Now())
	foreign := newIdentity(t, other, "m1", pki.RoleAdmin)
	cfg := admin.ClientConfig()
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		c := foreign.Certificate()
		return &tls.Certificate{Certificate: [][]byte{c.Raw}, PrivateKey: foreign.Key(), Leaf: c}, nil
	}
	if err := call(t, addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)), "Status"); err == nil || status.Code(err) == codes.OK {
		t.Errorf("another CA's certificate: %v", err)
	}
	// Plaintext against a TLS server.
	if err := call(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials()), "Status"); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext: %v, want Unavailable", err)
	}
	// Revocation.
	pki.SetRevoked(func(name string) bool { return name == "ops" })
	defer pki.SetRevoked(nil)
	if err := call(t, addr, pki.DialOption(admin), "Status"); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("revoked admin: %v, want Unauthenticated", err)
	}
	// The server still serves after all that.
	pki.SetRevoked(nil)
	if err := call(t, addr, pki.DialOption(admin), "Status"); err != nil {
		t.Errorf("admin Status at the end: %v", err)
	}
	<-stub.peer
}

func TestUnknownMethodRefused(t *testing.T) {
	if _, ok := pki.MethodRoles("/plumeria.v1.Coordinator/NoSuch"); ok {
		t.Fatal("unknown method in the table")
	}
	err := pki.Authorize(context.Background(), "/plumeria.v1.Coordinator/NoSuch")
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("Authorize(no peer, unknown) = %v", err)
	}
}
