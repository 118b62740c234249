package clustermap

import (
	"fmt"
	"slices"

	"github.com/plumeria-fs/plumeria/internal/limits"
)

// The map's part of the cluster's security (docs/security.md): join tokens
// and revoked nodes. The cluster CA's key is not here: every member and
// mount reads the map, so the map holds nothing that lets its reader join
// or sign. A token is kept as the hash of its secret; a joining node sends
// the secret over TLS to a coordinator whose certificate chains to the CA
// the token pins, and the coordinator compares hashes.

// JoinToken is one join token the coordinators accept.
type JoinToken struct {
	ID string `json:"id"`
	// SecretHash is the hex SHA-256 of the token's secret.
	SecretHash string `json:"secret_hash"`
	// Roles a node joining with this token may ask for.
	Roles []string `json:"roles"`
	// Expires is when the token stops working (Unix nanoseconds).
	Expires int64 `json:"expires"`
	// Names already joined with it: a token works once per node name.
	Names []string `json:"names,omitempty"`
}

// Revocation is a node refused from then on, whatever certificate it holds.
type Revocation struct {
	Name string `json:"name"`
	At   int64  `json:"at"` // Unix nanoseconds
}

// Token returns the join token with id, or nil.
func (m *Map) Token(id string) *JoinToken {
	for i := range m.Tokens {
		if m.Tokens[i].ID == id {
			return &m.Tokens[i]
		}
	}
	return nil
}

// IsRevoked reports whether node name has been revoked.
func (m *Map) IsRevoked(name string) bool {
	for _, r := range m.Revoked {
		if r.Name == name {
			return true
		}
	}
	return false
}

// RevokedNames returns the names of the revoked nodes.
func (m *Map) RevokedNames() []string {
	names := make([]string, len(m.Revoked))
	for i, r := range m.Revoked {
		names[i] = r.Name
	}
	return names
}

// PruneTokens drops the tokens expired at now (Unix nanoseconds) and
// reports whether it dropped any.
func (m *Map) PruneTokens(now int64) bool {
	n := len(m.Tokens)
	m.Tokens = slices.DeleteFunc(m.Tokens, func(t JoinToken) bool { return t.Expires <= now })
	if len(m.Tokens) == 0 {
		m.Tokens = nil
	}
	return len(m.Tokens) != n
}

func (m *Map) cloneSecurity(c *Map) {
	c.Tokens = make([]JoinToken, len(m.Tokens))
	for i, t := range m.Tokens {
		t.Roles, t.Names = slices.Clone(t.Roles), slices.Clone(t.Names)
		c.Tokens[i] = t
	}
	if m.Tokens == nil {
		c.Tokens = nil
	}
	c.Revoked = slices.Clone(m.Revoked)
}

func (m *Map) validateSecurity() error {
	if len(m.Tokens) > limits.JoinTokensMax {
		return fmt.Errorf("clustermap: %d join tokens, at most %d", len(m.Tokens), limits.JoinTokensMax)
	}
	if len(m.Revoked) > limits.RevokedMax {
		return fmt.Errorf("clustermap: %d revoked nodes, at most %d", len(m.Revoked), limits.RevokedMax)
	}
	ids := map[string]bool{}
	for _, t := range m.Tokens {
		if err := ValidName(t.ID); err != nil || ids[t.ID] {
			return fmt.Errorf("clustermap: join token id %q: invalid or duplicate", t.ID)
		}
		ids[t.ID] = true
		if len(t.SecretHash) != 64 {
			return fmt.Errorf("clustermap: join token %s: secret hash of %d characters, want 64", t.ID, len(t.SecretHash))
		}
		if len(t.Roles) == 0 || len(t.Roles) > 8 {
			return fmt.Errorf("clustermap: join token %s: %d roles", t.ID, len(t.Roles))
		}
		if len(t.Names) > limits.JoinTokenNamesMax {
			return fmt.Errorf("clustermap: join token %s: %d names joined, at most %d", t.ID, len(t.Names), limits.JoinTokenNamesMax)
		}
		for _, n := range t.Names {
			if err := ValidName(n); err != nil {
				return fmt.Errorf("clustermap: join token %s: %w", t.ID, err)
			}
		}
	}
	seen := map[string]bool{}
	for _, r := range m.Revoked {
		if err := ValidName(r.Name); err != nil || seen[r.Name] {
			return fmt.Errorf("clustermap: revoked node %q: invalid or duplicate", r.Name)
		}
		seen[r.Name] = true
	}
	return nil
}
