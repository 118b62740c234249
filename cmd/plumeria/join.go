package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/clustermap"
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

// stateDir returns where a client named name keeps its identity: with a
// token, --tls-dir or /var/lib/plumeria/tls/NAME; else "" (a certificate
// issued from the certs directory is kept in memory).
func (o joinOpts) stateDir(name string) string {
	switch {
	case o.token == "":
		return ""
	case o.tlsDir != "":
		return o.tlsDir
	}
	return filepath.Join("/var/lib/plumeria/tls", name)
}

// clientIdentity is identityFor for a client (mount, gateway) named name,
// made the process's identity (before its first connection: connections
// take it when they are made). It returns the CA the process may issue
// with and where its identity is kept, for keepRenewed.
func (o joinOpts) clientIdentity(ctx context.Context, what, coordAddrs, name string) (*pki.Identity, *pki.CA, string, error) {
	dir := o.stateDir(name)
	id, ca, err := identityFor(ctx, what, tlsFlags.certs, tlsFlags.insecure, o.token, splitList(coordAddrs), dir, name, pki.RoleClient)
	if err != nil {
		return nil, nil, "", err
	}
	pki.SetDefault(id)
	return id, ca, dir, nil
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

// The first join token: `plumeria init` writes it to the certs directory
// (0600) and prints it; a coordinator started with that directory puts it
// in the map when it leads, so servers and mounts without the directory
// can join from the start.
const (
	initTokenFile = "join-token"
	initTokenTTL  = 24 * time.Hour
)

var initTokenRoles = []string{pki.RoleBrick, pki.RoleClient, pki.RoleCoordinator, pki.RoleLock}

// writeInitToken makes the first join token for ca in dir and returns it.
func writeInitToken(dir string, ca *pki.CA, now time.Time) (pki.Token, time.Time, error) {
	tok, err := pki.NewToken(pki.CAHash(ca.CertPEM))
	if err != nil {
		return pki.Token{}, time.Time{}, err
	}
	expires := now.Add(initTokenTTL).UTC().Truncate(time.Second)
	b := fmt.Sprintf("%s\nexpires %s\n", tok, expires.Format(time.RFC3339))
	if err := writeSecret(filepath.Join(dir, initTokenFile), []byte(b)); err != nil {
		return pki.Token{}, time.Time{}, fmt.Errorf("init: write the join token: %w", err)
	}
	return tok, expires, nil
}

// readInitToken returns the first join token of a certs directory as the
// map keeps it, or nil when there is none.
func readInitToken(dir string) ([]clustermap.JoinToken, error) {
	b, err := os.ReadFile(filepath.Join(dir, initTokenFile))
	if errors.Is(err, os.ErrNotExist) || dir == "" {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "expires ") {
		return nil, fmt.Errorf("%s: want a token line and an `expires TIME` line", filepath.Join(dir, initTokenFile))
	}
	tok, err := pki.ParseToken(lines[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, initTokenFile), err)
	}
	expires, err := time.Parse(time.RFC3339, strings.TrimPrefix(lines[1], "expires "))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, initTokenFile), err)
	}
	return []clustermap.JoinToken{{ID: tok.ID, SecretHash: tok.SecretHash(), Roles: initTokenRoles, Expires: expires.UnixNano()}}, nil
}
