package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/pki"
)

// Joining with a token and keeping certificates fresh (docs/security.md).

// joinOpts are the --token and --tls-dir flags of mount and gateway.
type joinOpts struct{ token, tlsDir string }

func addJoinFlags(c *cobra.Command, o *joinOpts) {
	c.Flags().StringVar(&o.token, "token", "", "join token (plumeria token create --roles client): without a certs directory, get this node's certificate from a coordinator with it, once")
	c.Flags().StringVar(&o.tlsDir, "tls-dir", "", "where the certificate got with --token is kept, so a restart needs no new token (default /var/lib/plumeria/tls/NAME)")
}

// stateDir returns where a node named name keeps a joined identity.
func (o joinOpts) stateDir(name string) string {
	if o.tlsDir != "" {
		return o.tlsDir
	}
	return filepath.Join("/var/lib/plumeria/tls", name)
}

// identityFor is memberIdentity for a process that may instead hold a join
// token: with a token and no certs directory, the identity stored in
// stateDir when it is still good for name and roles under the CA the token
// pins, else one got from the coordinators at coord with the token (and
// stored). It also returns the CA this process may issue with: the certs
// directory's when it holds ca.key, a joined coordinator's from stateDir,
// or nil.
func identityFor(ctx context.Context, what, certs string, insecure bool, token string, coord []string, stateDir, name string, roles ...string) (*pki.Identity, *pki.CA, error) {
	if token == "" || certs != "" {
		if token != "" {
			return nil, nil, fmt.Errorf("%s: --token and a certs directory (%s) both given: a token is for a node without the certs directory", what, certs)
		}
		id, err := memberIdentity(what, certs, insecure, stateDir, name, roles...)
		if err != nil || id == nil {
			return id, nil, err
		}
		ca, err := pki.LoadCA(certs)
		if err != nil || !ca.CanIssue() {
			return id, nil, nil
		}
		return id, ca, nil
	}
	if insecure {
		return nil, nil, fmt.Errorf("%s: --token and --insecure both given: choose one", what)
	}
	tok, err := pki.ParseToken(token)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: --token: %w", what, err)
	}
	if id, err := pki.LoadIdentity(stateDir); err == nil && joinedFits(id, tok, name, roles) {
		ca, _ := pki.LoadCA(stateDir)
		if ca != nil && !ca.CanIssue() {
			ca = nil
		}
		return id, ca, nil
	}
	j, err := coordclient.JoinCluster(ctx, coord, tok, name, roles)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := j.Identity.Save(stateDir); err != nil {
		return nil, nil, fmt.Errorf("%s: keep the certificate: %w", what, err)
	}
	if j.CAKeyPEM == nil {
		os.Remove(filepath.Join(stateDir, pki.CAKeyFile))
		return j.Identity, nil, nil
	}
	ca, err := pki.ParseCA(j.Identity.CACertPEM(), j.CAKeyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: the CA key the coordinator sent: %w", what, err)
	}
	if err := writeSecret(filepath.Join(stateDir, pki.CAKeyFile), j.CAKeyPEM); err != nil {
		return nil, nil, fmt.Errorf("%s: keep the CA key: %w", what, err)
	}
	return j.Identity, ca, nil
}

// joinedFits reports whether a stored identity can be used instead of
// joining again: from the CA tok pins, for name and roles, not expired.
func joinedFits(id *pki.Identity, tok pki.Token, name string, roles []string) bool {
	c := id.Certificate()
	return c != nil && pki.CAHash(id.CACertPEM()) == tok.CAHash && id.Name() == name &&
		slices.Equal(id.Roles(), pki.SortRoles(roles)) && time.Now().Before(c.NotAfter)
}

func writeSecret(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// keepRenewed renews id in the background until ctx ends: with ca when
// this process may issue (lifetime: as it was issued), else by asking the
// coordinators of cc. Each new certificate is kept in stateDir ("": not
// kept). A nil id (insecure) needs nothing.
func keepRenewed(ctx context.Context, id *pki.Identity, ca *pki.CA, cc *coordclient.Client, stateDir string, log *slog.Logger) {
	if id == nil {
		return
	}
	renew := func(ctx context.Context, csr []byte) ([]byte, error) {
		if ca != nil {
			return ca.IssueCSR(csr, id.Name(), id.Roles(), pki.Lifetime(id.Certificate()), time.Now())
		}
		if cc == nil {
			return nil, errors.New("no coordinator to renew with")
		}
		return cc.Renewer()(ctx, csr)
	}
	saved := func(id *pki.Identity) error {
		if c := id.Certificate(); c != nil {
			log.Info("certificate renewed", "name", id.Name(), "expires", c.NotAfter.UTC(), "serial", c.SerialNumber.Text(16))
		}
		if stateDir == "" {
			return nil
		}
		return id.Save(stateDir)
	}
	go coordclient.RenewLoop(ctx, id, renew, saved, func(format string, args ...any) { log.Warn(fmt.Sprintf(format, args...)) })
}
