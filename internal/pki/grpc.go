package pki

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// DialOption returns the transport credentials of a gRPC client: TLS with
// id (ClientConfig), or plaintext when id is nil. A connection to a server
// of the same process (internal/localnet) is checked as the handshake
// would check it, without TLS (local.go).
func DialOption(id *Identity) grpc.DialOption {
	if id == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(localAware{TransportCredentials: credentials.NewTLS(id.ClientConfig()), id: id, roles: ServerRoles})
}

// ServerOptions returns the options of a gRPC server that does its own
// TLS handshakes on a plain listener: TLS with id (ServerConfig), a
// handshake timeout, and the authorization interceptors. nil id: none
// (plaintext, everyone allowed).
func ServerOptions(id *Identity) []grpc.ServerOption {
	if id == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(id.ServerConfig())), grpc.ConnectionTimeout(HandshakeTimeout),
		grpc.ChainUnaryInterceptor(UnaryServerInterceptor), grpc.ChainStreamInterceptor(StreamServerInterceptor)}
}

// HandshakedServerOptions returns the options of a gRPC server whose
// listener hands it connections that already are TLS (internal/netmux
// terminates TLS to tell Raft from gRPC): credentials that pass the
// connection through with its TLS state (so Peer works), and the
// authorization interceptors. nil id: none.
func HandshakedServerOptions(id *Identity) []grpc.ServerOption {
	if id == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(Handshaked()),
		grpc.ChainUnaryInterceptor(UnaryServerInterceptor), grpc.ChainStreamInterceptor(StreamServerInterceptor)}
}

// TLSConn is a connection whose TLS handshake is done (*tls.Conn, or a
// wrapper of one that keeps ConnectionState).
type TLSConn interface {
	net.Conn
	ConnectionState() tls.ConnectionState
}

// Handshaked returns server-side gRPC transport credentials for
// connections that are already TLS (TLSConn): ServerHandshake passes the
// connection through and reports its TLS state as credentials.TLSInfo. A
// connection that is not TLS is refused. It cannot dial.
func Handshaked() credentials.TransportCredentials { return handshaked{} }

type handshaked struct{}

func (handshaked) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("pki: handshaked credentials are for servers only")
}

func (handshaked) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	tc, ok := c.(TLSConn)
	if !ok {
		return nil, nil, fmt.Errorf("pki: connection from %s is not TLS", c.RemoteAddr())
	}
	return c, credentials.TLSInfo{State: tc.ConnectionState(),
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (handshaked) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.3"}
}

func (h handshaked) Clone() credentials.TransportCredentials { return h }
func (handshaked) OverrideServerName(string) error           { return nil }

// ServerHandshake runs the server side of a TLS handshake on c with cfg,
// bounded by HandshakeTimeout. On error it closes c.
func ServerHandshake(c net.Conn, cfg *tls.Config) (*tls.Conn, error) {
	tc := tls.Server(c, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), HandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("pki: TLS handshake with %s: %w", c.RemoteAddr(), err)
	}
	return tc, nil
}
