package pki

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"
)

// Files of a member's identity in its directory (DATA/tls for a server).
const (
	NodeCertFile = "node.crt"
	NodeKeyFile  = "node.key"
)

// Files of the operator's identity in a certs directory (plumeria init).
const (
	AdminCertFile = "admin.crt"
	AdminKeyFile  = "admin.key"
)

// HandshakeTimeout bounds a TLS handshake on any server of Plumeria, so a
// client that connects and says nothing does not hold a goroutine.
const HandshakeTimeout = 10 * time.Second

// Identity is what one process presents and trusts: the cluster CA's
// certificate (the only root it accepts) and its own key and certificate.
// The key and certificate can be replaced at run time (Set): handshakes
// started afterwards use the new ones, connections already up keep the
// old. Safe for concurrent use.
type Identity struct {
	caPEM     []byte
	caCert    *x509.Certificate
	clusterID string
	pool      *x509.CertPool
	cur       atomic.Pointer[leaf]
	local     atomic.Pointer[localAuth] // LocalAuthInfo's last answer
}

// leaf is one key and certificate, parsed.
type leaf struct {
	tls     tls.Certificate
	cert    *x509.Certificate
	certPEM []byte
	keyPEM  []byte
	name    string
	roles   []string
}

// NewIdentity returns an identity that trusts the CA of caCertPEM and has
// no certificate yet (Set gives it one).
func NewIdentity(caCertPEM []byte) (*Identity, error) {
	ca, err := ParseCA(caCertPEM, nil)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &Identity{caPEM: caCertPEM, caCert: ca.Cert, clusterID: ca.ClusterID, pool: pool}, nil
}

// Set replaces the key and certificate. The certificate must chain to the
// cluster CA, be valid now, match the key, and name a valid member with
// valid roles.
func (id *Identity) Set(certPEM, keyPEM []byte) error {
	l, err := id.parseLeaf(certPEM, keyPEM, time.Now())
	if err != nil {
		return err
	}
	id.cur.Store(l)
	return nil
}

func (id *Identity) parseLeaf(certPEM, keyPEM []byte, now time.Time) (*leaf, error) {
	cert, err := ParseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	key, err := ParseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	if !publicKeysEqual(key.Public(), cert.PublicKey) {
		return nil, fmt.Errorf("pki: the key does not match the certificate of %s", cert.Subject.CommonName)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: id.pool, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}); err != nil {
		return nil, fmt.Errorf("pki: the certificate of %s does not verify against the cluster CA: %w", cert.Subject.CommonName, err)
	}
	name, roles := cert.Subject.CommonName, cert.Subject.OrganizationalUnit
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if err := ValidateRoles(roles); err != nil {
		return nil, err
	}
	// The chain sent holds the CA's certificate after the leaf: a node
	// joining with a token has no CA yet and finds the one its token pins
	// there (coordclient.JoinCluster); members verify against their own
	// pool and ignore it.
	return &leaf{tls: tls.Certificate{Certificate: [][]byte{cert.Raw, id.caCert.Raw}, PrivateKey: key, Leaf: cert},
		cert: cert, certPEM: certPEM, keyPEM: keyPEM, name: name, roles: SortRoles(roles)}, nil
}

// Name is the name of the current certificate ("" before Set).
func (id *Identity) Name() string {
	if l := id.cur.Load(); l != nil {
		return l.name
	}
	return ""
}

// Roles are the roles of the current certificate.
func (id *Identity) Roles() []string {
	if l := id.cur.Load(); l != nil {
		return slices.Clone(l.roles)
	}
	return nil
}

// Certificate is the current certificate (nil before Set).
func (id *Identity) Certificate() *x509.Certificate {
	if l := id.cur.Load(); l != nil {
		return l.cert
	}
	return nil
}

// ClusterID is the trust domain of the cluster CA.
func (id *Identity) ClusterID() string { return id.clusterID }

// CACertPEM is the cluster CA's certificate.
func (id *Identity) CACertPEM() []byte { return id.caPEM }

// Pool is the pool of trusted roots (the cluster CA only).
func (id *Identity) Pool() *x509.CertPool { return id.pool }

// Save writes DIR/ca.crt, DIR/node.crt and DIR/node.key (0600).
func (id *Identity) Save(dir string) error {
	l := id.cur.Load()
	if l == nil {
		return errors.New("pki: no certificate to save")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pki: create %s: %w", dir, err)
	}
	if err := writeFile(filepath.Join(dir, NodeKeyFile), l.keyPEM, 0o600); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, NodeCertFile), l.certPEM, 0o644); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, CACertFile), id.caPEM, 0o644)
}

// LoadIdentity reads DIR/ca.crt, DIR/node.crt and DIR/node.key.
func LoadIdentity(dir string) (*Identity, error) {
	return LoadIdentityFiles(filepath.Join(dir, CACertFile), filepath.Join(dir, NodeCertFile), filepath.Join(dir, NodeKeyFile))
}

// LoadIdentityFiles reads an identity from a CA certificate, a
// certificate and a key file.
func LoadIdentityFiles(caFile, certFile, keyFile string) (*Identity, error) {
	var b [3][]byte
	for i, f := range []string{caFile, certFile, keyFile} {
		var err error
		if b[i], err = os.ReadFile(f); err != nil {
			return nil, fmt.Errorf("pki: read identity: %w", err)
		}
	}
	id, err := NewIdentity(b[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", caFile, err)
	}
	if err := id.Set(b[1], b[2]); err != nil {
		return nil, fmt.Errorf("%s: %w", certFile, err)
	}
	return id, nil
}

func (id *Identity) getCertificate() (*tls.Certificate, error) {
	l := id.cur.Load()
	if l == nil {
		return nil, errors.New("pki: this process has no certificate yet")
	}
	return &l.tls, nil
}

// ServerConfig returns the TLS configuration of a server: TLS 1.3, the
// current certificate (read at each handshake), and client certificates
// verified against the cluster CA when given. A client without one is let
// through the handshake (tls.VerifyClientCertIfGiven) so that an RPC open
// to newcomers can be served on the same port; the interceptors refuse
// every other method to it (Authorize).
func (id *Identity) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return id.getCertificate() },
		ClientAuth:     tls.VerifyClientCertIfGiven,
		ClientCAs:      id.pool,
		// gRPC (HTTP/2) and HTTP/1.1 (the metrics and dashboard port);
		// gRPC clients require h2 to be negotiated.
		NextProtos: []string{"h2", "http/1.1"},
	}
}

// ClientConfig returns the TLS configuration of a client of a Plumeria
// server: TLS 1.3, the current certificate, and a server check that does
// not look at host names (members are addressed by IP:port) but requires
// a chain to the cluster CA and one of ServerRoles in the certificate, so
// a client's certificate cannot pose as a server.
func (id *Identity) ClientConfig() *tls.Config { return id.ClientConfigFor(ServerRoles...) }

// ClientConfigFor is ClientConfig accepting servers with any of roles (an
// HTTP client of a mount's metrics port accepts the client role).
func (id *Identity) ClientConfigFor(roles ...string) *tls.Config {
	roles = slices.Clone(roles)
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			l := id.cur.Load()
			if l == nil {
				return &tls.Certificate{}, nil // no certificate: the server decides
			}
			return &l.tls, nil
		},
		// The chain and role are checked in VerifyConnection instead of
		// the default host-name check.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, _, _, err := id.verifyPeer(cs.PeerCertificates, x509.ExtKeyUsageServerAuth, roles)
			return err
		},
	}
}

// verifyPeer verifies a peer's chain against the cluster CA for usage,
// and that it has one of roles and is not revoked. It returns the peer's
// name and roles, and the verified chains.
func (id *Identity) verifyPeer(chain []*x509.Certificate, usage x509.ExtKeyUsage, roles []string) (string, []string, [][]*x509.Certificate, error) {
	verified, err := id.verifyChain(chain, usage)
	if err != nil {
		return "", nil, nil, err
	}
	c := chain[0]
	name, have := c.Subject.CommonName, SortRoles(c.Subject.OrganizationalUnit)
	if fn := revoked.Load(); fn != nil && (*fn)(name) {
		return "", nil, nil, fmt.Errorf("pki: %q is revoked (plumeria node revoke)", name)
	}
	if !hasAny(have, roles) {
		return "", nil, nil, fmt.Errorf("pki: %q has roles %v, needs one of %v", name, have, roles)
	}
	return name, have, verified, nil
}

// Key returns the current private key (nil before Set).
func (id *Identity) Key() crypto.Signer {
	if l := id.cur.Load(); l != nil {
		return l.tls.PrivateKey.(crypto.Signer)
	}
	return nil
}

var defaultIdentity atomic.Pointer[Identity]

// SetDefault makes id the identity of every connection this process makes
// or serves from now on (nil: insecure, plaintext).
func SetDefault(id *Identity) { defaultIdentity.Store(id) }

// Default returns the process's identity, or nil when it runs insecure.
func Default() *Identity { return defaultIdentity.Load() }
