package pki

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Source says where a process gets its identity (from its flags).
type Source struct {
	// CertsDir (--certs) holds ca.crt; with ca.key in it, a process may
	// issue its own certificate (the operator-provisioned path, like
	// `cockroach cert create-node`); admin.crt/admin.key are the CLI's.
	CertsDir string
	// StateDir keeps a server's own certificate (DATA/tls) so that a
	// restart reuses it; "" keeps it in memory only.
	StateDir string
	// Admin: the CLI, which uses CertsDir/admin.crt and admin.key.
	Admin bool
	Name  string   // the member's name (not for Admin)
	Roles []string // its roles (not for Admin)
	// Lifetime of a certificate issued here; 0 is LeafLifetime.
	Lifetime time.Duration
}

// ErrNoCertificate: the certs directory can neither provide nor issue a
// certificate for the process.
var ErrNoCertificate = errors.New("pki: no certificate")

// Load returns the identity of s. For a member it reuses StateDir's
// certificate when it is from the same CA, for the same name and roles,
// and not past two thirds of its life; otherwise it issues a new key and
// certificate with CertsDir's ca.key and stores them in StateDir. Without
// ca.key, a valid certificate of the CA in StateDir (put there by the
// operator) is used as it is.
func Load(s Source, now time.Time) (*Identity, error) {
	if s.CertsDir == "" {
		return nil, fmt.Errorf("%w: no certs directory given (run `plumeria init --certs DIR`, then pass --certs DIR or set PLUMERIA_CERTS; or --insecure)", ErrNoCertificate)
	}
	if s.Admin {
		id, err := LoadIdentityFiles(filepath.Join(s.CertsDir, CACertFile), filepath.Join(s.CertsDir, AdminCertFile), filepath.Join(s.CertsDir, AdminKeyFile))
		if err != nil {
			return nil, fmt.Errorf("load the admin identity of %s: %w", s.CertsDir, err)
		}
		return id, nil
	}
	ca, err := LoadCA(s.CertsDir)
	if err != nil {
		return nil, err
	}
	lifetime := s.Lifetime
	if lifetime <= 0 {
		lifetime = LeafLifetime
	}
	if s.StateDir != "" {
		id, err := LoadIdentity(s.StateDir)
		switch {
		case err == nil && reusable(id, ca, s, now):
			return id, nil
		case err == nil && !ca.CanIssue() && sameCA(id, ca):
			// Put there by the operator, and nothing to renew it with.
			return id, nil
		case err != nil && !errors.Is(err, os.ErrNotExist):
			if !ca.CanIssue() {
				return nil, fmt.Errorf("load the identity in %s: %w", s.StateDir, err)
			}
			// A damaged or foreign identity is replaced below.
		}
	}
	if !ca.CanIssue() {
		where := ""
		if s.StateDir != "" {
			where = fmt.Sprintf(", or put %s and %s for %s in %s", NodeCertFile, NodeKeyFile, s.Name, s.StateDir)
		}
		return nil, fmt.Errorf("%w for %s: %s has no %s to issue one (copy the CA key made by `plumeria init` there%s)", ErrNoCertificate, s.Name, s.CertsDir, CAKeyFile, where)
	}
	id, err := ca.NewIdentity(s.Name, s.Roles, lifetime, now)
	if err != nil {
		return nil, err
	}
	if s.StateDir != "" {
		if err := id.Save(s.StateDir); err != nil {
			return nil, err
		}
	}
	return id, nil
}

func sameCA(id *Identity, ca *CA) bool {
	return bytes.Equal(bytes.TrimSpace(id.CACertPEM()), bytes.TrimSpace(ca.CertPEM))
}

// NewIdentity makes a new key and a certificate of ca for it (Issue),
// valid from now for lifetime, and returns them as an identity that
// trusts ca.
func (ca *CA) NewIdentity(name string, roles []string, lifetime time.Duration, now time.Time) (*Identity, error) {
	key, err := NewKey()
	if err != nil {
		return nil, err
	}
	certPEM, err := ca.Issue(key.Public(), name, roles, lifetime, now)
	if err != nil {
		return nil, err
	}
	keyPEM, err := MarshalKey(key)
	if err != nil {
		return nil, err
	}
	id, err := NewIdentity(ca.CertPEM)
	if err != nil {
		return nil, err
	}
	l, err := id.parseLeaf(certPEM, keyPEM, now)
	if err != nil {
		return nil, err
	}
	id.cur.Store(l)
	return id, nil
}

// reusable reports whether a stored identity still fits s.
func reusable(id *Identity, ca *CA, s Source, now time.Time) bool {
	c := id.Certificate()
	if c == nil || !sameCA(id, ca) {
		return false
	}
	if c.Subject.CommonName != s.Name || !slices.Equal(SortRoles(c.Subject.OrganizationalUnit), SortRoles(s.Roles)) {
		return false
	}
	life := c.NotAfter.Sub(c.NotBefore)
	return now.Before(c.NotBefore.Add(life * 2 / 3))
}

// IssueAdmin makes the operator's identity in a certs directory:
// admin.crt and admin.key for name with the admin role.
func (ca *CA) IssueAdmin(dir, name string, now time.Time) error {
	key, err := NewKey()
	if err != nil {
		return err
	}
	certPEM, err := ca.Issue(key.Public(), name, []string{RoleAdmin}, CALifetime, now)
	if err != nil {
		return err
	}
	keyPEM, err := MarshalKey(key)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, AdminKeyFile), keyPEM, 0o600); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, AdminCertFile), certPEM, 0o644)
}
