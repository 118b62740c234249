package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Lifetimes of what this package makes.
const (
	CALifetime = 10 * 365 * 24 * time.Hour
	// LeafLifetime is the default lifetime of a member's certificate.
	// Renewal (issue K part 2) shortens it; until then an operator-made
	// certificate lasts a year.
	LeafLifetime = 365 * 24 * time.Hour
	// clockSkew backdates NotBefore so that a member whose clock is a
	// little behind accepts a certificate issued just now.
	clockSkew = 5 * time.Minute
)

// Files of a CA in a certs directory (plumeria init).
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// CA is the cluster's certificate authority: its certificate and, when
// this process holds it, its private key.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	// ClusterID is the trust domain of the SPIFFE URIs of its leaves.
	ClusterID string
	key       crypto.Signer // nil: can verify, cannot issue
}

// NewKey returns a new ECDSA P-256 private key.
func NewKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func serial() (*big.Int, error) {
	// 128 random bits; RFC 5280 allows 20 octets, positive.
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("pki: serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}

// NewCA makes a cluster CA: an ECDSA P-256 self-signed root valid
// CALifetime from now. cluster names the cluster (lowercase letters,
// digits, '.', '-'); empty picks "plumeria-" and 8 random hex digits. The
// name is the cluster id, the trust domain of every leaf's SPIFFE URI.
func NewCA(cluster string, now time.Time) (*CA, error) {
	if cluster == "" {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		cluster = "plumeria-" + hex.EncodeToString(b[:])
	}
	if err := ValidateClusterID(cluster); err != nil {
		return nil, err
	}
	key, err := NewKey()
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "Plumeria cluster CA " + cluster, Organization: []string{cluster}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		URIs:                  []*url.URL{{Scheme: "spiffe", Host: cluster}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), ClusterID: cluster, key: key}, nil
}

// CanIssue reports whether the CA holds its private key.
func (ca *CA) CanIssue() bool { return ca.key != nil }

// KeyPEM returns the CA's private key as PKCS #8 PEM (nil without it).
func (ca *CA) KeyPEM() ([]byte, error) {
	if ca.key == nil {
		return nil, nil
	}
	return MarshalKey(ca.key)
}

// Save writes DIR/ca.crt and, when the CA holds its key, DIR/ca.key
// (mode 0600). It refuses to overwrite an existing ca.crt or ca.key.
func (ca *CA) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pki: create certs directory: %w", err)
	}
	for _, f := range []string{CACertFile, CAKeyFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return fmt.Errorf("pki: %s already exists: refusing to overwrite a cluster CA (use another directory, or delete it if no cluster uses it)", filepath.Join(dir, f))
		}
	}
	if ca.key != nil {
		kp, err := ca.KeyPEM()
		if err != nil {
			return err
		}
		if err := writeFile(filepath.Join(dir, CAKeyFile), kp, 0o600); err != nil {
			return err
		}
	}
	return writeFile(filepath.Join(dir, CACertFile), ca.CertPEM, 0o644)
}

// LoadCA reads DIR/ca.crt and, if present, DIR/ca.key. A CA without its
// key verifies but cannot issue.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, fmt.Errorf("pki: read the cluster CA: %w (make one with `plumeria init --certs DIR`)", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if errors.Is(err, os.ErrNotExist) {
		keyPEM = nil
	} else if err != nil {
		return nil, fmt.Errorf("pki: read the CA key: %w", err)
	}
	ca, err := ParseCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return ca, nil
}

// ParseCA parses a CA certificate and, unless keyPEM is nil, its private
// key, which must match the certificate.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := ParseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid {
		return nil, errors.New("pki: the CA certificate is not a CA (basic constraints)")
	}
	if err := cert.CheckSignatureFrom(cert); err != nil {
		return nil, fmt.Errorf("pki: the CA certificate is not self-signed: %w", err)
	}
	id := ""
	if len(cert.URIs) == 1 && cert.URIs[0].Scheme == "spiffe" {
		id = cert.URIs[0].Host
	}
	if err := ValidateClusterID(id); err != nil {
		return nil, fmt.Errorf("pki: the CA certificate has no spiffe://<cluster-id> URI: %w", err)
	}
	ca := &CA{Cert: cert, CertPEM: certPEM, ClusterID: id}
	if keyPEM != nil {
		key, err := ParseKeyPEM(keyPEM)
		if err != nil {
			return nil, fmt.Errorf("CA key: %w", err)
		}
		if !publicKeysEqual(key.Public(), cert.PublicKey) {
			return nil, errors.New("pki: the CA key does not match the CA certificate")
		}
		ca.key = key
	}
	return ca, nil
}

// Issue signs a leaf certificate for pub: CN=name, OU=roles, URI SAN
// spiffe://<cluster-id>/<name>, ServerAuth and ClientAuth, a random
// 128-bit serial, valid from now (less a few minutes of clock skew) for
// lifetime (at most until the CA expires). It returns the certificate as
// PEM.
func (ca *CA) Issue(pub crypto.PublicKey, name string, roles []string, lifetime time.Duration, now time.Time) ([]byte, error) {
	if ca.key == nil {
		return nil, errors.New("pki: this CA has no private key (ca.key): it cannot issue certificates")
	}
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if err := ValidateRoles(roles); err != nil {
		return nil, err
	}
	roles = SortRoles(roles) // DER sorts the OUs of one RDN anyway
	if lifetime <= 0 {
		return nil, fmt.Errorf("pki: certificate lifetime %v: must be positive", lifetime)
	}
	if _, ok := pub.(*ecdsa.PublicKey); !ok {
		if _, ok := pub.(interface{ Equal(crypto.PublicKey) bool }); !ok {
			return nil, fmt.Errorf("pki: unsupported public key type %T", pub)
		}
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	end := now.Add(lifetime)
	if end.After(ca.Cert.NotAfter) {
		end = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject: pkix.Name{CommonName: name, OrganizationalUnit: roles,
			Organization: []string{ca.ClusterID}},
		NotBefore:   now.Add(-clockSkew),
		NotAfter:    end,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{SPIFFE(ca.ClusterID, name)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.key)
	if err != nil {
		return nil, fmt.Errorf("pki: sign certificate for %s: %w", name, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// IssueCSR is Issue for the public key of a PEM certificate request,
// whose signature must verify (the requester holds the key). The name and
// roles are the caller's decision, not the request's: the CSR's subject
// is ignored.
func (ca *CA) IssueCSR(csrPEM []byte, name string, roles []string, lifetime time.Duration, now time.Time) ([]byte, error) {
	csr, err := ParseCSRPEM(csrPEM)
	if err != nil {
		return nil, err
	}
	return ca.Issue(csr.PublicKey, name, roles, lifetime, now)
}

// NewCSR makes a PEM certificate request for name signed by key (what a
// joining node sends).
func NewCSR(key crypto.Signer, name string) ([]byte, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: name}}, key)
	if err != nil {
		return nil, fmt.Errorf("pki: certificate request: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// ParseCSRPEM parses one PEM "CERTIFICATE REQUEST" and checks its
// signature.
func ParseCSRPEM(b []byte) (*x509.CertificateRequest, error) {
	der, err := onePEM(b, "CERTIFICATE REQUEST")
	if err != nil {
		return nil, err
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parse certificate request: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("pki: certificate request signature: %w", err)
	}
	return csr, nil
}

// SPIFFE returns spiffe://<cluster>/<name>.
func SPIFFE(cluster, name string) *url.URL {
	return &url.URL{Scheme: "spiffe", Host: cluster, Path: "/" + name}
}

// CAHash returns the hex SHA-256 of the SubjectPublicKeyInfo of the first
// certificate in caCertPEM (the pin a join token carries, as kubeadm's
// --discovery-token-ca-cert-hash), or "" if it does not parse.
func CAHash(caCertPEM []byte) string {
	cert, err := ParseCertPEM(caCertPEM)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return hex.EncodeToString(sum[:])
}

// ParseCertPEM parses the first PEM "CERTIFICATE" block of b (later
// blocks, e.g. a chain, are ignored).
func ParseCertPEM(b []byte) (*x509.Certificate, error) {
	der, err := onePEM(b, "CERTIFICATE")
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parse certificate: %w", err)
	}
	return cert, nil
}

// ParseKeyPEM parses a PEM private key: PKCS #8 ("PRIVATE KEY") or SEC 1
// ("EC PRIVATE KEY"), ECDSA or Ed25519.
func ParseKeyPEM(b []byte) (crypto.Signer, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%w: no PEM block where a private key was expected", ErrBadPEM)
	}
	var k any
	var err error
	switch blk.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(blk.Bytes)
	default:
		return nil, fmt.Errorf("%w: block %q where a private key was expected", ErrBadPEM, blk.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("pki: parse private key: %w", err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("pki: private key of type %T cannot sign", k)
	}
	switch s.(type) {
	case *ecdsa.PrivateKey:
	default:
		if _, ok := s.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok {
			return nil, fmt.Errorf("pki: unsupported private key type %T", k)
		}
	}
	return s, nil
}

// MarshalKey encodes a private key as PKCS #8 PEM.
func MarshalKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func onePEM(b []byte, typ string) ([]byte, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%w: no PEM block where a %s was expected", ErrBadPEM, strings.ToLower(typ))
	}
	if blk.Type != typ {
		return nil, fmt.Errorf("%w: block %q where a %s was expected", ErrBadPEM, blk.Type, strings.ToLower(typ))
	}
	return blk.Bytes, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	e, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && e.Equal(b)
}

// writeFile writes atomically: a temporary file, fsync, rename.
func writeFile(path string, b []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	return nil
}
