package ec

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/plumeria-fs/plumeria/internal/limits"
)

// Bounds of a profile. reedsolomon allows up to 256 shards; a stripe group
// is K+M bricks of distinct failure domains, so far fewer make sense.
const (
	DataShardsMax   = limits.DataShardsMax
	ParityShardsMax = limits.ParityShardsMax
	ShardsMax       = limits.ShardsMax // K+M
)

// ErrInvalid is returned for a profile, profile string or chunk size out
// of bounds.
var ErrInvalid = errors.New("ec: invalid profile or geometry")

// Profile is a redundancy scheme: K data shards and M parity shards; any M
// of the K+M may be lost. K=1 is a mirror of M+1 copies (no coding).
type Profile struct {
	K, M int
}

// Validate returns an error wrapping ErrInvalid unless 1 ≤ K ≤
// DataShardsMax, 0 ≤ M ≤ ParityShardsMax and K+M ≤ ShardsMax.
func (p Profile) Validate() error {
	switch {
	case p.K < 1 || p.K > DataShardsMax:
		return fmt.Errorf("profile %d+%d: k must be 1..%d: %w", p.K, p.M, DataShardsMax, ErrInvalid)
	case p.M < 0 || p.M > ParityShardsMax:
		return fmt.Errorf("profile %d+%d: m must be 0..%d: %w", p.K, p.M, ParityShardsMax, ErrInvalid)
	case p.K+p.M > ShardsMax:
		return fmt.Errorf("profile %d+%d: k+m must be at most %d: %w", p.K, p.M, ShardsMax, ErrInvalid)
	}
	return nil
}

// Shards returns K+M, the size of a stripe group of the profile.
func (p Profile) Shards() int { return p.K + p.M }

// Mirror reports whether the profile is a mirror (K=1: copies, no coding).
func (p Profile) Mirror() bool { return p.K == 1 }

// String returns "copies=N" for a mirror (N = M+1) and "K+M" otherwise;
// ParseProfile reads both back.
func (p Profile) String() string {
	if p.Mirror() {
		return "copies=" + strconv.Itoa(p.M+1)
	}
	return strconv.Itoa(p.K) + "+" + strconv.Itoa(p.M)
}

// ParseProfile reads "K+M" (e.g. "4+2") or "copies=N" (K=1, M=N-1; "1+2"
// is the same profile as "copies=3"). Numbers are decimal without sign or
// leading zeros. Errors wrap ErrInvalid.
func ParseProfile(s string) (Profile, error) {
	var p Profile
	var ok bool
	if n, found := strings.CutPrefix(s, "copies="); found {
		var c int
		if c, ok = parseCount(n); ok {
			p = Profile{K: 1, M: c - 1}
		}
	} else if k, m, found := strings.Cut(s, "+"); found {
		var okM bool
		p.K, ok = parseCount(k)
		p.M, okM = parseCount(m)
		ok = ok && okM
	}
	if !ok {
		return Profile{}, fmt.Errorf("profile %q: want K+M or copies=N: %w", s, ErrInvalid)
	}
	if err := p.Validate(); err != nil {
		return Profile{}, fmt.Errorf("profile %q: %w", s, err)
	}
	return p, nil
}

// parseCount parses a small decimal number: digits only, no leading zero.
func parseCount(s string) (int, bool) {
	if s == "" || len(s) > 4 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	n := 0
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = 10*n + int(c-'0')
	}
	return n, true
}
