package pki

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

const testCAHash = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestTokenRoundTrip(t *testing.T) {
	tok, err := NewToken(testCAHash)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseToken(" " + tok.String() + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != tok.ID || !bytes.Equal(got.Secret, tok.Secret) || got.CAHash != testCAHash {
		t.Fatalf("round trip: %+v, want %+v", got, tok)
	}
	if !SecretMatches(tok.Secret, tok.SecretHash()) || SecretMatches([]byte("other"), tok.SecretHash()) {
		t.Fatal("SecretMatches")
	}
	other, _ := NewToken(testCAHash)
	if other.ID == tok.ID || bytes.Equal(other.Secret, tok.Secret) {
		t.Fatal("two tokens share an id or secret")
	}
}

func TestParseTokenRefuses(t *testing.T) {
	tok, _ := NewToken(testCAHash)
	good := tok.String()
	for _, s := range []string{
		"", "plm1", "plm2" + good[4:], good + ".x", strings.ToUpper(good),
		strings.Replace(good, tok.ID, tok.ID[:15], 1),
		good[:len(good)-1], good[:len(good)-1] + "g",
		strings.Repeat("a", 300),
	} {
		if _, err := ParseToken(s); !errors.Is(err, ErrBadToken) {
			t.Errorf("ParseToken(%q) = %v, want ErrBadToken", s, err)
		}
	}
	if _, err := NewToken("nothex"); !errors.Is(err, ErrBadToken) {
		t.Errorf("NewToken(bad hash) = %v", err)
	}
}

func FuzzParseToken(f *testing.F) {
	tok, _ := NewToken(testCAHash)
	f.Add(tok.String())
	f.Add("plm1...")
	f.Add("plm1.00.11.22")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseToken(s)
		if err != nil {
			return
		}
		again, err := ParseToken(tok.String())
		if err != nil || again.ID != tok.ID || !bytes.Equal(again.Secret, tok.Secret) || again.CAHash != tok.CAHash {
			t.Fatalf("%q parsed, but its String %q does not round-trip: %v", s, tok.String(), err)
		}
	})
}
