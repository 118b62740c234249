package coord

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/internal/pki"
)

// Join tokens, certificates and revocations (docs/security.md). The map
// keeps tokens (as hashes of their secrets) and revoked names; the CA's
// key stays on the coordinators (Config.CA), never in the map, which
// every member reads.

// Bounds of a join token's life.
const (
	TokenTTLDefault = 24 * time.Hour
	TokenTTLMax     = 30 * 24 * time.Hour
	TokenTTLMin     = 10 * time.Second
)

// signer returns this coordinator's CA, or FailedPrecondition.
func (s *Server) signer() (*pki.CA, error) {
	if s.cfg.CA == nil || !s.cfg.CA.CanIssue() {
		return nil, status.Errorf(codes.FailedPrecondition,
			"coordinator %s holds no cluster CA key, so it cannot issue certificates (start it with --certs DIR holding ca.key, or join it with a token for the coordinator role)", s.cfg.Name)
	}
	return s.cfg.CA, nil
}

func (s *Server) certLifetime() time.Duration {
	if s.cfg.CertLifetime > 0 {
		return s.cfg.CertLifetime
	}
	return pki.LeafLifetime
}

// CreateJoinToken makes a join token for the roles asked (admin).
func (s *Server) CreateJoinToken(ctx context.Context, r *pb.CreateJoinTokenRequest) (*pb.CreateJoinTokenResponse, error) {
	return forward(s, ctx, func() (*pb.CreateJoinTokenResponse, error) {
		ca, err := s.signer()
		if err != nil {
			return nil, err
		}
		if len(r.Roles) == 0 {
			return nil, status.Error(codes.InvalidArgument, "join token: give the roles it grants (--roles coordinator,brick,lock or client)")
		}
		if err := pki.ValidateRoles(r.Roles); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "join token: %v", err)
		}
		if slices.Contains(r.Roles, pki.RoleAdmin) {
			return nil, status.Error(codes.InvalidArgument, "join token: the admin role is not given by tokens (the CLI uses the admin certificate of `plumeria init`)")
		}
		ttl := time.Duration(r.TtlS) * time.Second
		switch {
		case r.TtlS == 0:
			ttl = TokenTTLDefault
		case r.TtlS < 0 || ttl < TokenTTLMin || ttl > TokenTTLMax:
			return nil, status.Errorf(codes.InvalidArgument, "join token: lifetime %ds outside %v..%v", r.TtlS, TokenTTLMin, TokenTTLMax)
		}
		tok, err := pki.NewToken(pki.CAHash(ca.CertPEM))
		if err != nil {
			return nil, err
		}
		now := time.Now()
		expires := now.Add(ttl)
		_, err = s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			n := m.Clone()
			n.PruneTokens(now.UnixNano())
			n.Tokens = append(n.Tokens, clustermap.JoinToken{ID: tok.ID, SecretHash: tok.SecretHash(),
				Roles: pki.SortRoles(r.Roles), Expires: expires.UnixNano()})
			return n, nil
		})
		if err != nil {
			return nil, err
		}
		s.log.InfoContext(ctx, "join token created", "id", tok.ID, "roles", r.Roles, "expires", expires.UTC())
		return &pb.CreateJoinTokenResponse{Token: tok.String(), ExpiresUnixS: expires.Unix()}, nil
	}, func(cl pb.CoordinatorClient) (*pb.CreateJoinTokenResponse, error) { return cl.CreateJoinToken(ctx, r) })
}

// IssueCertificate gives a joining node a certificate for a join token's
// secret. The token is marked used for the name in the map before the
// certificate leaves, so a token works once per name even across a
// failover.
func (s *Server) IssueCertificate(ctx context.Context, r *pb.IssueCertificateRequest) (*pb.IssueCertificateResponse, error) {
	return forward(s, ctx, func() (*pb.IssueCertificateResponse, error) {
		ca, err := s.signer()
		if err != nil {
			return nil, err
		}
		if err := pki.ValidateName(r.Name); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "join: %v", err)
		}
		if err := pki.ValidateRoles(r.Roles); err != nil || len(r.Roles) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "join %s: roles %v: %v", r.Name, r.Roles, err)
		}
		if _, err := pki.ParseCSRPEM(r.CsrPem); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "join %s: %v", r.Name, err)
		}
		now := time.Now()
		_, err = s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			n := m.Clone()
			n.PruneTokens(now.UnixNano())
			t := n.Token(r.TokenId)
			switch {
			case t == nil:
				return nil, status.Errorf(codes.PermissionDenied, "join %s: unknown or expired join token %q (make a new one: plumeria token create)", r.Name, r.TokenId)
			case !pki.SecretMatches(r.Secret, t.SecretHash):
				return nil, status.Errorf(codes.PermissionDenied, "join %s: wrong secret for join token %s", r.Name, r.TokenId)
			case n.IsRevoked(r.Name):
				return nil, status.Errorf(codes.PermissionDenied, "join %s: the node was revoked (plumeria node revoke); join under another name", r.Name)
			case slices.Contains(t.Names, r.Name):
				return nil, status.Errorf(codes.PermissionDenied, "join %s: join token %s was already used for this name (a token works once per node name: make a new one)", r.Name, t.ID)
			}
			for _, role := range r.Roles {
				if !slices.Contains(t.Roles, role) {
					return nil, status.Errorf(codes.PermissionDenied, "join %s: join token %s grants roles %v, not %s", r.Name, t.ID, t.Roles, role)
				}
			}
			if len(t.Names) >= limits.JoinTokenNamesMax {
				return nil, status.Errorf(codes.ResourceExhausted, "join %s: join token %s was used by %d nodes already (make a new one)", r.Name, t.ID, len(t.Names))
			}
			t.Names = append(t.Names, r.Name)
			return n, nil
		})
		if err != nil {
			return nil, err
		}
		cert, err := ca.IssueCSR(r.CsrPem, r.Name, r.Roles, s.certLifetime(), now)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "join %s: %v", r.Name, err)
		}
		resp := &pb.IssueCertificateResponse{CertPem: cert, CaPem: ca.CertPEM}
		if slices.Contains(r.Roles, pki.RoleCoordinator) {
			if resp.CaKeyPem, err = ca.KeyPEM(); err != nil {
				return nil, err
			}
		}
		s.log.InfoContext(ctx, "node joined with a token", "name", r.Name, "roles", r.Roles, "token", r.TokenId)
		return resp, nil
	}, func(cl pb.CoordinatorClient) (*pb.IssueCertificateResponse, error) {
		return cl.IssueCertificate(ctx, r)
	})
}

// RenewCertificate gives the caller a new certificate for the name and
// roles of the one it connected with. Served by any coordinator that
// holds the CA key (not forwarded: the caller's identity is this
// connection's).
func (s *Server) RenewCertificate(ctx context.Context, r *pb.RenewCertificateRequest) (*pb.RenewCertificateResponse, error) {
	ca, err := s.signer()
	if err != nil {
		return nil, err
	}
	name, roles, ok := pki.Peer(ctx)
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "renew: the connection carries no verified certificate")
	}
	if s.fsm.Map().IsRevoked(name) {
		return nil, status.Errorf(codes.PermissionDenied, "renew: node %s was revoked", name)
	}
	cert, err := ca.IssueCSR(r.CsrPem, name, roles, s.certLifetime(), time.Now())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "renew %s: %v", name, err)
	}
	s.log.DebugContext(ctx, "certificate renewed", "name", name, "roles", roles)
	return &pb.RenewCertificateResponse{CertPem: cert}, nil
}

// RevokeNode refuses node name from then on (admin).
func (s *Server) RevokeNode(ctx context.Context, r *pb.RevokeNodeRequest) (*pb.RevokeNodeResponse, error) {
	return forward(s, ctx, func() (*pb.RevokeNodeResponse, error) {
		if err := clustermap.ValidName(r.Name); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "revoke: %v", err)
		}
		if r.Name == s.cfg.Name {
			return nil, status.Errorf(codes.InvalidArgument, "revoke %s: this coordinator would refuse itself; revoke it through another coordinator after removing it (plumeria coord remove)", r.Name)
		}
		_, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
			if m.IsRevoked(r.Name) {
				return nil, nil
			}
			n := m.Clone()
			n.Revoked = append(n.Revoked, clustermap.Revocation{Name: r.Name, At: time.Now().UnixNano()})
			return n, nil
		})
		if err != nil {
			return nil, err
		}
		s.log.WarnContext(ctx, "node revoked", "name", r.Name)
		return &pb.RevokeNodeResponse{}, nil
	}, func(cl pb.CoordinatorClient) (*pb.RevokeNodeResponse, error) { return cl.RevokeNode(ctx, r) })
}

// importTokens puts Config.Tokens in the map: those not there yet and not
// expired (a token once used stays until it expires, so importing again
// changes nothing).
func (s *Server) importTokens() {
	if len(s.cfg.Tokens) == 0 {
		return
	}
	now := time.Now().UnixNano()
	_, err := s.mutate(func(m *clustermap.Map) (*clustermap.Map, error) {
		var add []clustermap.JoinToken
		for _, t := range s.cfg.Tokens {
			if m.Token(t.ID) == nil && t.Expires > now {
				add = append(add, t)
			}
		}
		if len(add) == 0 {
			return nil, nil
		}
		n := m.Clone()
		n.PruneTokens(now)
		n.Tokens = append(n.Tokens, add...)
		return n, nil
	})
	if err != nil {
		s.log.Warn("put the certs directory's join token in the map", "err", err)
	}
}
