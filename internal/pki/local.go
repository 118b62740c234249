package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc/credentials"
)

// An in-process connection (internal/localnet) carries no TLS: its bytes
// never leave the process. What a handshake would establish is checked
// here instead, with the same rules: the server verifies the client's
// certificate chain against the cluster CA when one is given
// (tls.VerifyClientCertIfGiven, ServerConfig), the client verifies the
// server's chain and roles (ClientConfigFor). The results are reported as
// the TLS state a handshake would have given, so Peer, Authorize and the
// Raft role check see the same caller over either path.

// localConn is what internal/localnet's Conn offers.
type localConn interface {
	net.Conn
	PeerChain() []*x509.Certificate
	InProcess()
}

// Chain is the certificate chain id presents now (nil before Set, or for
// a nil identity).
func (id *Identity) Chain() []*x509.Certificate {
	if id == nil {
		return nil
	}
	l := id.cur.Load()
	if l == nil {
		return nil
	}
	return []*x509.Certificate{l.cert, id.caCert}
}

// LocalServerConn checks an in-process connection as a TLS handshake with
// ServerConfig would (a client chain, when given, must verify against the
// cluster CA for client use) and returns it as a TLSConn reporting that
// state.
func (id *Identity) LocalServerConn(c net.Conn) (TLSConn, error) {
	lc, ok := c.(localConn)
	if !ok {
		return nil, fmt.Errorf("pki: %s is not an in-process connection", c.RemoteAddr())
	}
	chain := lc.PeerChain()
	if len(chain) == 0 {
		return &stateConn{Conn: c, st: localState(nil, nil)}, nil
	}
	verified, err := id.verifyChain(chain, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	return &stateConn{Conn: c, st: localState(chain, verified)}, nil
}

// localAuth is the credentials of a caller presenting the certificate
// leaf, verified.
type localAuth struct {
	leaf *x509.Certificate
	info credentials.AuthInfo
}

// LocalAuthInfo is the credentials a server of this process would report
// for a caller of this process presenting id's current certificate after
// a handshake: what an in-process call (internal/inproc) gives its
// handler as its peer's. The chain is verified against the cluster CA for
// client use as the handshake would, once per certificate (a renewal is
// verified again).
func (id *Identity) LocalAuthInfo() (credentials.AuthInfo, error) {
	chain := id.Chain()
	if len(chain) == 0 {
		return nil, errors.New("pki: this process has no certificate yet")
	}
	if l := id.local.Load(); l != nil && l.leaf == chain[0] {
		return l.info, nil
	}
	verified, err := id.verifyChain(chain, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	info := credentials.TLSInfo{State: localState(chain, verified),
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
	id.local.Store(&localAuth{leaf: chain[0], info: info})
	return info, nil
}

// localState is the TLS state a completed handshake would report for a
// peer that presented chain (verified against the CA as verified).
func localState(chain []*x509.Certificate, verified [][]*x509.Certificate) tls.ConnectionState {
	return tls.ConnectionState{Version: tls.VersionTLS13, HandshakeComplete: true, NegotiatedProtocol: "h2",
		PeerCertificates: chain, VerifiedChains: verified}
}

// stateConn is an in-process connection with the TLS state its checks
// established.
type stateConn struct {
	net.Conn
	st tls.ConnectionState
}

func (s *stateConn) ConnectionState() tls.ConnectionState { return s.st }

// localAware is a client's TLS credentials that let in-process
// connections through after checking the server's chain as the TLS
// handshake would (ClientConfigFor: the cluster CA, server use, one of
// roles).
type localAware struct {
	credentials.TransportCredentials
	id    *Identity
	roles []string
}

func (l localAware) ClientHandshake(ctx context.Context, authority string, c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	lc, ok := c.(localConn)
	if !ok {
		return l.TransportCredentials.ClientHandshake(ctx, authority, c)
	}
	chain := lc.PeerChain()
	_, _, verified, err := l.id.verifyPeer(chain, x509.ExtKeyUsageServerAuth, l.roles)
	if err != nil {
		return nil, nil, err
	}
	return c, credentials.TLSInfo{State: localState(chain, verified),
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (l localAware) Clone() credentials.TransportCredentials {
	return localAware{TransportCredentials: l.TransportCredentials.Clone(), id: l.id, roles: l.roles}
}

// verifyChain verifies chain[0] against the cluster CA for usage, with the
// rest of chain as intermediates, and returns the verified chains.
func (id *Identity) verifyChain(chain []*x509.Certificate, usage x509.ExtKeyUsage) ([][]*x509.Certificate, error) {
	if len(chain) == 0 {
		return nil, errors.New("pki: the peer sent no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	verified, err := chain[0].Verify(x509.VerifyOptions{Roots: id.pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}})
	if err != nil {
		return nil, fmt.Errorf("pki: the certificate of %q is not from this cluster's CA: %w", chain[0].Subject.CommonName, err)
	}
	return verified, nil
}
