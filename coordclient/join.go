package coordclient

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/internal/pki"
)

// Joined is what a node gets for a join token.
type Joined struct {
	Identity *pki.Identity
	// CAKeyPEM is the cluster CA's key when the node asked for the
	// coordinator role (it signs joins and renewals too); nil otherwise.
	CAKeyPEM []byte
}

// JoinCluster makes a key for this node and trades a join token for a
// certificate naming it with roles, at the first of addrs that answers.
// Before it sends the token's secret it checks that the coordinator's
// certificate chains to the CA the token pins (its SPKI hash), so a
// coordinator impostor learns nothing.
func JoinCluster(ctx context.Context, addrs []string, tok pki.Token, name string, roles []string) (*Joined, error) {
	if len(addrs) == 0 {
		return nil, errors.New("join: no coordinator address given (use --coord or --join HOST:PORT)")
	}
	key, err := pki.NewKey()
	if err != nil {
		return nil, err
	}
	keyPEM, err := pki.MarshalKey(key)
	if err != nil {
		return nil, err
	}
	csr, err := pki.NewCSR(key, name)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, addr := range addrs {
		j, err := joinAt(ctx, addr, tok, name, roles, csr, keyPEM)
		if err == nil {
			return j, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("join as %s: %w", name, errors.Join(errs...))
}

func joinAt(ctx context.Context, addr string, tok pki.Token, name string, roles []string, csr, keyPEM []byte) (*Joined, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(pinnedConfig(tok.CAHash))))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, GiveUpAfter)
	defer cancel()
	resp, err := pb.NewCoordinatorClient(conn).IssueCertificate(ctx, &pb.IssueCertificateRequest{
		TokenId: tok.ID, Secret: tok.Secret, Name: name, Roles: roles, CsrPem: csr})
	if err != nil {
		return nil, err
	}
	if got := pki.CAHash(resp.CaPem); got != tok.CAHash {
		return nil, fmt.Errorf("the coordinator sent CA %s, the token pins %s", got, tok.CAHash)
	}
	id, err := pki.NewIdentity(resp.CaPem)
	if err != nil {
		return nil, err
	}
	if err := id.Set(resp.CertPem, keyPEM); err != nil {
		return nil, fmt.Errorf("the certificate the coordinator issued: %w", err)
	}
	return &Joined{Identity: id, CAKeyPEM: resp.CaKeyPem}, nil
}

// pinnedConfig accepts a server whose chain holds a CA certificate with
// the SPKI hash caHash, that certificate having signed the server's
// certificate, which has the coordinator role. It presents no client
// certificate: the joining node has none yet.
func pinnedConfig(caHash string) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // the pin is checked below instead of host names
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the coordinator sent no certificate")
			}
			roots := x509.NewCertPool()
			found := false
			for _, c := range cs.PeerCertificates[1:] {
				if spkiHash(c) == caHash {
					roots.AddCert(c)
					found = true
				}
			}
			if !found {
				return fmt.Errorf("the coordinator's certificate is not from the CA the join token pins (%s...): wrong token, or not this cluster", caHash[:16])
			}
			leaf := cs.PeerCertificates[0]
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return fmt.Errorf("the coordinator's certificate: %w", err)
			}
			if !slices.Contains(leaf.Subject.OrganizationalUnit, pki.RoleCoordinator) {
				return fmt.Errorf("%q is not a coordinator (roles %v)", leaf.Subject.CommonName, leaf.Subject.OrganizationalUnit)
			}
			return nil
		},
	}
}

// spkiHash is pki.CAHash of a parsed certificate.
func spkiHash(c *x509.Certificate) string {
	h := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return hex.EncodeToString(h[:])
}

// RenewLoop keeps id's certificate fresh: at two thirds of its life it
// asks renew for a new one for the same key and installs it (new
// handshakes use it at once; no restart), then calls saved (which may
// store it; nil: nothing). Failed attempts are retried every
// renewRetry, or sooner near the end of the certificate's life. It
// returns when ctx ends.
func RenewLoop(ctx context.Context, id *pki.Identity, renew func(ctx context.Context, csrPEM []byte) ([]byte, error), saved func(*pki.Identity) error, logf func(format string, args ...any)) {
	for {
		c := id.Certificate()
		if c == nil {
			return
		}
		wait := time.Until(pki.RenewAt(c))
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(wait, 0)):
		}
		for ctx.Err() == nil {
			err := renewOnce(ctx, id, renew)
			if err == nil && saved != nil {
				err = saved(id)
			}
			if err == nil {
				break
			}
			left := time.Until(c.NotAfter)
			logf("renew the certificate of %s (expires in %v): %v", c.Subject.CommonName, left.Round(time.Second), err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(min(renewRetry, max(left/10, time.Second))):
			}
		}
	}
}

const renewRetry = time.Minute

func renewOnce(ctx context.Context, id *pki.Identity, renew func(ctx context.Context, csrPEM []byte) ([]byte, error)) error {
	key := id.Key()
	csr, err := pki.NewCSR(key, id.Name())
	if err != nil {
		return err
	}
	keyPEM, err := pki.MarshalKey(key)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, GiveUpAfter)
	defer cancel()
	cert, err := renew(cctx, csr)
	if err != nil {
		return err
	}
	return id.Set(cert, keyPEM)
}

// Renewer returns a renew function for RenewLoop that asks the
// coordinators of c.
func (c *Client) Renewer() func(ctx context.Context, csrPEM []byte) ([]byte, error) {
	return func(ctx context.Context, csrPEM []byte) ([]byte, error) {
		var cert []byte
		err := c.Call(ctx, func(ctx context.Context, cl pb.CoordinatorClient) error {
			var err error
			cert, err = RenewerFor(cl)(ctx, csrPEM)
			return err
		})
		return cert, err
	}
}

// RenewerFor returns a renew function for RenewLoop that asks cl.
func RenewerFor(cl pb.CoordinatorClient) func(ctx context.Context, csrPEM []byte) ([]byte, error) {
	return func(ctx context.Context, csrPEM []byte) ([]byte, error) {
		r, err := cl.RenewCertificate(ctx, &pb.RenewCertificateRequest{CsrPem: csrPEM})
		if err != nil {
			return nil, err
		}
		return r.CertPem, nil
	}
}

// DecodeMap decodes a map from a coordinator and notes its revoked nodes
// for this process's TLS checks (pki.NoteRevoked). Every member decodes
// the maps it receives with it.
func DecodeMap(b []byte) (*clustermap.Map, error) {
	m, err := clustermap.Decode(b)
	if err != nil {
		return nil, err
	}
	pki.NoteRevoked(m.Epoch, m.RevokedNames())
	return m, nil
}
