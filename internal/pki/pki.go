// Package pki is Plumeria's cluster certificate authority and mutual TLS:
// a self-signed ECDSA P-256 root made at `plumeria init`, leaf certificates
// that carry a member's name and roles, the TLS configurations every
// connection uses, and the gRPC interceptors that decide who may call
// which method.
//
// A leaf certificate names its holder three ways: Subject.CommonName is
// the name, Subject.OrganizationalUnit lists the roles, and a URI SAN
// spiffe://<cluster-id>/<name> binds the name to the cluster. Every leaf
// has both the ServerAuth and the ClientAuth extended key usages: a member
// is a client of its peers as much as their server.
//
// Members are addressed by IP:port, so nothing here checks host names. A
// client instead checks that the server's certificate chains to the
// cluster CA and carries a server role (coordinator, brick or lock), as
// Consul's verify_server_hostname checks "server.<dc>.<domain>": a
// client's certificate cannot act as a server.
//
// It uses the standard library's crypto only. It does not do: CA
// rotation, revocation lists (the revocation hook, SetRevoked, is fed by
// the caller), or the certificate bootstrap of a joining node (IssueCSR is
// its building block).
package pki

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/plumeria-fs/plumeria/internal/limits"
)

// Roles a certificate may carry (Subject.OrganizationalUnit).
const (
	RoleCoordinator = "coordinator" // a coordinator: Raft member, serves the cluster map
	RoleBrick       = "brick"       // a brick server
	RoleLock        = "lock"        // a lock server
	RoleClient      = "client"      // an fs node: a mount or an NFS gateway
	RoleAdmin       = "admin"       // the operator's CLI
)

// Roles lists every role, in a fixed order.
var Roles = []string{RoleCoordinator, RoleBrick, RoleLock, RoleClient, RoleAdmin}

// ServerRoles are the roles of a process that serves gRPC: a client
// accepts a server only if its certificate carries one of them.
var ServerRoles = []string{RoleCoordinator, RoleBrick, RoleLock}

// Errors returned by this package (test them with errors.Is).
var (
	ErrBadName = errors.New("pki: bad name")
	ErrBadRole = errors.New("pki: bad role")
	ErrBadPEM  = errors.New("pki: bad PEM")
)

// NameBytesMax bounds a member's name (as the cluster map's names).
const NameBytesMax = limits.NameBytesMax

// ValidateName checks a member name as the cluster map does
// (clustermap.ValidName): 1 to NameBytesMax letters, digits, '_', and
// '.' and '-' after the first (a host name fits; the name is a path
// segment of the SPIFFE URI).
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty (give the member a name, e.g. --name)", ErrBadName)
	}
	if len(name) > NameBytesMax {
		return fmt.Errorf("%w: %q is longer than %d bytes", ErrBadName, name, NameBytesMax)
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || i > 0 && (r == '.' || r == '-')
		if !ok {
			return fmt.Errorf("%w: %q: only letters, digits, '_', and '.' and '-' after the first, are allowed", ErrBadName, name)
		}
	}
	return nil
}

// ValidateClusterID checks a cluster id, the trust domain of the SPIFFE
// URIs: 1 to 63 lowercase letters, digits, '.', '-', starting with a
// letter or digit.
func ValidateClusterID(id string) error {
	if id == "" || len(id) > 63 {
		return fmt.Errorf("%w: cluster id %q: 1 to 63 characters", ErrBadName, id)
	}
	for i, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || i > 0 && (r == '.' || r == '-')
		if !ok {
			return fmt.Errorf("%w: cluster id %q: only lowercase letters, digits, '.' and '-' (not first)", ErrBadName, id)
		}
	}
	return nil
}

// ValidateRoles checks that roles is non-empty, without duplicates, and
// holds only the Role constants.
func ValidateRoles(roles []string) error {
	if len(roles) == 0 {
		return fmt.Errorf("%w: no role given (one or more of %s)", ErrBadRole, strings.Join(Roles, ", "))
	}
	for i, r := range roles {
		if !slices.Contains(Roles, r) {
			return fmt.Errorf("%w: %q is not a role (one of %s)", ErrBadRole, r, strings.Join(Roles, ", "))
		}
		if slices.Contains(roles[:i], r) {
			return fmt.Errorf("%w: %q given twice", ErrBadRole, r)
		}
	}
	return nil
}

// hasAny reports whether have and want share a role.
func hasAny(have, want []string) bool {
	for _, r := range have {
		if slices.Contains(want, r) {
			return true
		}
	}
	return false
}

// SortRoles returns roles in the order of Roles, without unknown names.
// A certificate's OUs are one DER SET, whose order is the encoding's, not
// the issuer's: every reader of roles sorts them.
func SortRoles(roles []string) []string {
	var out []string
	for _, r := range Roles {
		if slices.Contains(roles, r) {
			out = append(out, r)
		}
	}
	return out
}
