package netmux

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/plumeria-fs/plumeria/internal/localnet"
	"github.com/plumeria-fs/plumeria/internal/pki"
)

func identity(t *testing.T, ca *pki.CA, name string, roles ...string) *pki.Identity {
	t.Helper()
	id, err := ca.NewIdentity(name, roles, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestTLSRaft: over TLS, a coordinator's Raft stream reaches the Raft
// listener with its bytes intact; a brick's is closed; gRPC connections
// arrive as TLS connections (pki.TLSConn) with the peer's certificate.
func TestTLSRaft(t *testing.T) {
	ca, err := pki.NewCA("t", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	m, err := Listen("127.0.0.1:0", identity(t, ca, "c1", pki.RoleCoordinator))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	addr := m.Addr().String()

	peer, err := Listen("127.0.0.1:0", identity(t, ca, "c2", pki.RoleCoordinator))
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	c, err := peer.Raft().Dial(raftAddr(addr), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	in, err := m.Raft().Accept()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 5)
	if _, err := io.ReadFull(in, b); err != nil || string(b) != "hello" {
		t.Fatalf("raft stream read %q, %v", b, err)
	}
	in.Close()

	brick, err := Listen("127.0.0.1:0", identity(t, ca, "b1", pki.RoleBrick))
	if err != nil {
		t.Fatal(err)
	}
	defer brick.Close()
	bc, err := brick.Raft().Dial(raftAddr(addr), 5*time.Second)
	if err != nil {
		t.Fatal(err) // the brick accepts the coordinator; the coordinator refuses the brick
	}
	defer bc.Close()
	_ = bc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := bc.Read(make([]byte, 1)); err == nil {
		t.Error("a brick's Raft stream was kept open")
	}

	// A coordinator does not dial Raft to a brick.
	if _, err := m.Raft().Dial(raftAddr(brick.Addr().String()), 5*time.Second); err == nil {
		t.Error("Raft dialed a brick")
	}

	// gRPC side: any certificate of the CA, delivered as a TLS conn.
	mount := identity(t, ca, "m1", pki.RoleClient)
	go func() {
		cc, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		tc := tlsClient(cc, mount)
		_, _ = tc.Write([]byte("PRI * HTTP/2.0"))
		time.Sleep(time.Second)
		tc.Close()
	}()
	g, err := m.GRPC().Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	tc, ok := g.(pki.TLSConn)
	if !ok {
		t.Fatalf("gRPC connection %T is not a pki.TLSConn", g)
	}
	st := tc.ConnectionState()
	if len(st.VerifiedChains) == 0 || st.VerifiedChains[0][0].Subject.CommonName != "m1" {
		t.Errorf("gRPC connection's peer: %+v", st.PeerCertificates)
	}
	p := make([]byte, 3)
	if _, err := io.ReadFull(g, p); err != nil || string(p) != "PRI" {
		t.Errorf("gRPC connection read %q, %v (the peeked byte must stay)", p, err)
	}
}

func raftAddr(a string) raft.ServerAddress { return raft.ServerAddress(a) }

func tlsClient(c net.Conn, id *pki.Identity) *tls.Conn {
	return tls.Client(c, id.ClientConfig())
}

// TestLocalDial: a client of the same process reaches the gRPC listener in
// memory with the TLS state of its certificate; a dial nobody accepts
// gives up with its context; a closed mux is no longer dialled in memory.
func TestLocalDial(t *testing.T) {
	ca, err := pki.NewCA("t", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	m, err := Listen("127.0.0.1:0", identity(t, ca, "b1", pki.RoleBrick))
	if err != nil {
		t.Fatal(err)
	}
	addr := m.Addr().String()
	client := identity(t, ca, "m1", pki.RoleClient)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, ok, err := localnet.Dial(ctx, addr, client.Chain())
	cancel()
	if !ok || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dial nobody accepts: ok=%v err=%v, want the context's deadline", ok, err)
	}

	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := m.GRPC().Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, ok, err := localnet.Dial(context.Background(), addr, client.Chain())
	if !ok || err != nil {
		t.Fatalf("local dial: ok=%v err=%v", ok, err)
	}
	defer c.Close()
	in := <-accepted
	st := in.(pki.TLSConn).ConnectionState()
	if len(st.VerifiedChains) == 0 || st.VerifiedChains[0][0].Subject.CommonName != "m1" {
		t.Fatalf("the server end does not carry the client's verified certificate: %+v", st.VerifiedChains)
	}
	m.Close()
	if _, ok, _ := localnet.Dial(context.Background(), addr, client.Chain()); ok {
		t.Fatal("a closed mux was dialled in memory")
	}
}
