package pki

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Join tokens (docs/security.md). A token is
//
//	plm1.<id>.<secret>.<CA hash>
//
// id: 8 random bytes in hex, names the token in the cluster map;
// secret: 32 random bytes in hex, the map keeps only its SHA-256;
// CA hash: hex SHA-256 of the cluster CA's SubjectPublicKeyInfo, which the
// joining node compares with the CA its coordinator presents before it
// sends the secret (kubeadm's --discovery-token-ca-cert-hash).
// "plm1" is the format; a later format gets another prefix.
const tokenPrefix = "plm1"

const (
	tokenIDBytes     = 8
	tokenSecretBytes = 32
	caHashBytes      = sha256.Size
)

// Token is a parsed join token.
type Token struct {
	ID     string // hex
	Secret []byte
	CAHash string // hex
}

// ErrBadToken is returned (wrapped) for text that is not a join token.
var ErrBadToken = errors.New("pki: bad join token")

// NewToken makes a token with a fresh id and secret for the CA whose hash
// is caHash.
func NewToken(caHash string) (Token, error) {
	if err := checkHex(caHash, caHashBytes, "CA hash"); err != nil {
		return Token{}, err
	}
	b := make([]byte, tokenIDBytes+tokenSecretBytes)
	if _, err := rand.Read(b); err != nil {
		return Token{}, fmt.Errorf("pki: random token: %w", err)
	}
	return Token{ID: hex.EncodeToString(b[:tokenIDBytes]), Secret: b[tokenIDBytes:], CAHash: caHash}, nil
}

// String returns the token's text form.
func (t Token) String() string {
	return strings.Join([]string{tokenPrefix, t.ID, hex.EncodeToString(t.Secret), t.CAHash}, ".")
}

// SecretHash returns the hex SHA-256 of the secret, as the map keeps it.
func (t Token) SecretHash() string { return SecretHash(t.Secret) }

// SecretHash returns the hex SHA-256 of secret.
func SecretHash(secret []byte) string {
	h := sha256.Sum256(secret)
	return hex.EncodeToString(h[:])
}

// SecretMatches reports, in constant time, whether secret hashes to hash.
func SecretMatches(secret []byte, hash string) bool {
	return subtle.ConstantTimeCompare([]byte(SecretHash(secret)), []byte(hash)) == 1
}

// ParseToken parses a token's text form (surrounding space is ignored).
func ParseToken(s string) (Token, error) {
	s = strings.TrimSpace(s)
	if len(s) > 256 {
		return Token{}, fmt.Errorf("%w: %d characters", ErrBadToken, len(s))
	}
	parts := strings.Split(s, ".")
	if len(parts) != 4 || parts[0] != tokenPrefix {
		return Token{}, fmt.Errorf("%w: want %s.<id>.<secret>.<CA hash> (plumeria token create makes one)", ErrBadToken, tokenPrefix)
	}
	if err := checkHex(parts[1], tokenIDBytes, "id"); err != nil {
		return Token{}, err
	}
	if err := checkHex(parts[2], tokenSecretBytes, "secret"); err != nil {
		return Token{}, err
	}
	if err := checkHex(parts[3], caHashBytes, "CA hash"); err != nil {
		return Token{}, err
	}
	secret, _ := hex.DecodeString(parts[2])
	return Token{ID: parts[1], Secret: secret, CAHash: parts[3]}, nil
}

func checkHex(s string, n int, what string) error {
	if len(s) != 2*n {
		return fmt.Errorf("%w: %s of %d characters, want %d", ErrBadToken, what, len(s), 2*n)
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("%w: %s is not lower-case hex", ErrBadToken, what)
		}
	}
	return nil
}
