package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/internal/pki"
)

// The TLS flags of every command (persistent on the root): where the
// certificates are, or that there are none. `plumeria server` has its own
// flags of the same names (they are also config-file keys) that shadow
// these.
var tlsFlags struct {
	certs    string
	insecure bool
}

// identityAnnotation marks a command that sets up its identity itself
// (servers, mounts, init); the others are the operator's CLI and use the
// admin certificate of the certs directory, when one is given.
const identityAnnotation = "plumeria-identity"

func selfIdentity(c *cobra.Command) *cobra.Command {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[identityAnnotation] = "self"
	return c
}

func addTLSFlags(root *cobra.Command) {
	pf := root.PersistentFlags()
	pf.StringVar(&tlsFlags.certs, "certs", os.Getenv("PLUMERIA_CERTS"),
		"certs directory `DIR` made by plumeria init (default: $PLUMERIA_CERTS): mutual TLS with the cluster's CA")
	pf.BoolVar(&tlsFlags.insecure, "insecure", false, "no TLS: plaintext, no authentication (a cluster run with --insecure)")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if cmd.Annotations[identityAnnotation] == "self" {
			return nil
		}
		id, err := cliIdentity()
		if err != nil {
			return err
		}
		pki.SetDefault(id)
		return nil
	}
}

// cliIdentity is the identity of an operator command: the admin
// certificate of the certs directory, or none (plaintext) without one. A
// directory with the CA key but no admin.crt (a server's) gets an admin
// certificate issued in memory: whoever holds the CA key is the admin.
func cliIdentity() (*pki.Identity, error) {
	if tlsFlags.insecure || tlsFlags.certs == "" {
		return nil, nil
	}
	_, errCert := os.Stat(filepath.Join(tlsFlags.certs, pki.AdminCertFile))
	_, errKey := os.Stat(filepath.Join(tlsFlags.certs, pki.CAKeyFile))
	if errors.Is(errCert, os.ErrNotExist) && errKey == nil {
		return pki.Load(pki.Source{CertsDir: tlsFlags.certs, Name: "admin", Roles: []string{pki.RoleAdmin}}, time.Now())
	}
	id, err := pki.Load(pki.Source{CertsDir: tlsFlags.certs, Admin: true}, time.Now())
	if err != nil {
		return nil, fmt.Errorf("%w (copy admin.crt and admin.key from the certs directory plumeria init made, or unset PLUMERIA_CERTS for a cluster without TLS)", err)
	}
	return id, nil
}

// memberIdentity returns the identity of a process that is a cluster
// member (server, mount, gateway): nil when insecure; else issued with
// the certs directory's CA key for name and roles, kept in stateDir ("":
// in memory). The hook for join tokens (--token) goes here.
func memberIdentity(what, certs string, insecure bool, stateDir, name string, roles ...string) (*pki.Identity, error) {
	switch {
	case insecure && certs != "":
		return nil, fmt.Errorf("%s: --insecure and --certs %s both given: choose one", what, certs)
	case insecure:
		return nil, nil
	case certs == "":
		return nil, fmt.Errorf("%s: no certificates: run `plumeria init --certs DIR` once and pass --certs DIR (or set PLUMERIA_CERTS=DIR), or pass --insecure to run without TLS", what)
	}
	id, err := pki.Load(pki.Source{CertsDir: certs, StateDir: stateDir, Name: name, Roles: roles}, time.Now())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return id, nil
}

// localIdentity is the identity of a command that runs a whole cluster in
// its own process (up, bench vdisk): every role but admin, issued from
// the CA key of certs and kept in stateDir ("": in memory), or nil
// (plaintext) when certs is "" or has no CA key.
func localIdentity(certs, stateDir string) (*pki.Identity, error) {
	if certs == "" {
		return nil, nil
	}
	if _, err := os.Stat(filepath.Join(certs, pki.CAKeyFile)); err != nil {
		return nil, nil
	}
	host, _ := os.Hostname()
	name := "local"
	if pki.ValidateName("local-"+host) == nil {
		name = "local-" + host
	}
	return pki.Load(pki.Source{CertsDir: certs, StateDir: stateDir, Name: name,
		Roles: []string{pki.RoleCoordinator, pki.RoleBrick, pki.RoleLock, pki.RoleClient}}, time.Now())
}

func initCmd() *cobra.Command {
	var cluster string
	c := &cobra.Command{
		Use:   "init --certs DIR [--cluster NAME]",
		Short: "Create the cluster CA and the operator's certificate in a certs directory",
		Long: `init makes a cluster certificate authority (ECDSA P-256, 10 years) in DIR:
  ca.crt      the CA certificate, which every member trusts
  ca.key      its private key: a process with it issues its own certificate
  admin.crt   the operator's certificate (role admin), used by the CLI
  admin.key
It refuses to overwrite an existing CA. See docs/security.md.`,
		Example: "  plumeria init --certs /etc/plumeria/certs --cluster prod\n  export PLUMERIA_CERTS=/etc/plumeria/certs",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir := tlsFlags.certs
			if dir == "" {
				return errors.New("init: give --certs DIR (where to make the cluster CA)")
			}
			return initCerts(dir, cluster, true)
		},
	}
	c.Flags().StringVar(&cluster, "cluster", "", "cluster name: lowercase letters, digits, '.', '-' (default: plumeria-<random>)")
	return selfIdentity(c)
}

// initCerts makes a CA and the admin identity in dir; verbose prints what
// it made and how to use it.
func initCerts(dir, cluster string, verbose bool) error {
	ca, err := pki.NewCA(cluster, time.Now())
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if err := ca.Save(dir); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if err := ca.IssueAdmin(dir, "admin", time.Now()); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	tok, expires, err := writeInitToken(dir, ca, time.Now())
	if err != nil {
		return err
	}
	if verbose {
		abs, _ := filepath.Abs(dir)
		fmt.Printf("made cluster CA %q in %s:\n", ca.ClusterID, abs)
		fmt.Printf("  %s  the CA certificate (sha256 of its key: %s)\n", pki.CACertFile, pki.CAHash(ca.CertPEM))
		fmt.Printf("  %s  its private key: keep it secret; a server or mount with it issues its own certificate\n", pki.CAKeyFile)
		fmt.Printf("  %s, %s  the operator's certificate (role admin) for the CLI\n", pki.AdminCertFile, pki.AdminKeyFile)
		fmt.Printf("  %s  a join token for servers and mounts without this directory, until %s:\n    %s\n", initTokenFile, expires.Format(time.RFC3339), tok)
		fmt.Printf("    (plumeria server --token T / plumeria mount --token T; more with plumeria token create)\n")
		fmt.Printf("use it:\n  export PLUMERIA_CERTS=%s\n  plumeria server --certs %s ...   (or PLUMERIA_CERTS; each server keeps its certificate in DATA/tls)\n", abs, abs)
	}
	return nil
}

// useLocalIdentity makes the process's identity the one of an in-process
// cluster (localIdentity) for a command of the CLI that starts one: with
// the admin certificate alone its servers could not serve.
func useLocalIdentity() error {
	certs := tlsFlags.certs
	if tlsFlags.insecure {
		certs = ""
	}
	id, err := localIdentity(certs, "")
	if err != nil {
		return err
	}
	pki.SetDefault(id)
	return nil
}
