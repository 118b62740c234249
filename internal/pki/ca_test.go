package pki

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

var t0 = time.Now().UTC().Truncate(time.Second)

func mustCA(t testing.TB, cluster string) *CA {
	t.Helper()
	ca, err := NewCA(cluster, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestNewCA(t *testing.T) {
	ca, err := NewCA("prod", t0)
	if err != nil {
		t.Fatal(err)
	}
	c := ca.Cert
	if !c.IsCA || c.PublicKeyAlgorithm != x509.ECDSA || ca.ClusterID != "prod" {
		t.Fatalf("CA: IsCA %v, key %v, cluster %q", c.IsCA, c.PublicKeyAlgorithm, ca.ClusterID)
	}
	if got := c.NotAfter.Sub(t0); got != CALifetime {
		t.Errorf("CA lifetime %v, want %v", got, CALifetime)
	}
	if len(c.URIs) != 1 || c.URIs[0].String() != "spiffe://prod" {
		t.Errorf("CA URIs %v", c.URIs)
	}
	anon := mustCA(t, "")
	if err := ValidateClusterID(anon.ClusterID); err != nil || len(anon.ClusterID) != len("plumeria-")+8 {
		t.Errorf("default cluster id %q: %v", anon.ClusterID, err)
	}
	if _, err := NewCA("Bad Name", t0); !errors.Is(err, ErrBadName) {
		t.Errorf("NewCA(bad name) = %v, want ErrBadName", err)
	}
}

func TestIssue(t *testing.T) {
	ca := mustCA(t, "c1")
	key, _ := NewKey()
	p, err := ca.Issue(key.Public(), "n1", []string{RoleLock, RoleBrick}, time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseCertPEM(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Subject.CommonName != "n1" || !slices.Equal(SortRoles(c.Subject.OrganizationalUnit), []string{RoleBrick, RoleLock}) {
		t.Errorf("subject %v", c.Subject)
	}
	if len(c.URIs) != 1 || c.URIs[0].String() != "spiffe://c1/n1" {
		t.Errorf("URIs %v", c.URIs)
	}
	if !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageServerAuth) || !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		t.Errorf("EKUs %v", c.ExtKeyUsage)
	}
	if c.SerialNumber.Sign() <= 0 || c.SerialNumber.BitLen() > 129 || c.SerialNumber.BitLen() < 64 {
		t.Errorf("serial %v", c.SerialNumber)
	}
	if c.NotAfter != t0.Add(time.Hour) || c.NotBefore.After(t0) {
		t.Errorf("validity %v..%v", c.NotBefore, c.NotAfter)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: t0, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("verify: %v", err)
	}
	p2, _ := ca.Issue(key.Public(), "n1", []string{RoleBrick}, time.Hour, t0)
	if c2, _ := ParseCertPEM(p2); c2.SerialNumber.Cmp(c.SerialNumber) == 0 {
		t.Error("two certificates with one serial")
	}
	// A lifetime past the CA's end is cut to it.
	p3, err := ca.Issue(key.Public(), "n1", []string{RoleBrick}, 2*CALifetime, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if c3, _ := ParseCertPEM(p3); c3.NotAfter.After(ca.Cert.NotAfter) {
		t.Errorf("leaf outlives its CA: %v > %v", c3.NotAfter, ca.Cert.NotAfter)
	}
}

func TestIssueRefusesBadInput(t *testing.T) {
	ca := mustCA(t, "c1")
	key, _ := NewKey()
	for _, tc := range []struct {
		name  string
		roles []string
		want  error
	}{
		{"", []string{RoleBrick}, ErrBadName},
		{"-x", []string{RoleBrick}, ErrBadName},
		{"a/b", []string{RoleBrick}, ErrBadName},
		{"a b", []string{RoleBrick}, ErrBadName},
		{string(bytes.Repeat([]byte("a"), NameBytesMax+1)), []string{RoleBrick}, ErrBadName},
		{"n1", nil, ErrBadRole},
		{"n1", []string{"root"}, ErrBadRole},
		{"n1", []string{RoleBrick, RoleBrick}, ErrBadRole},
	} {
		if _, err := ca.Issue(key.Public(), tc.name, tc.roles, time.Hour, t0); !errors.Is(err, tc.want) {
			t.Errorf("Issue(%q, %v) = %v, want %v", tc.name, tc.roles, err, tc.want)
		}
	}
	if _, err := ca.Issue(key.Public(), "n1", []string{RoleBrick}, 0, t0); err == nil {
		t.Error("Issue with lifetime 0 succeeded")
	}
	verifier, _ := ParseCA(ca.CertPEM, nil)
	if _, err := verifier.Issue(key.Public(), "n1", []string{RoleBrick}, time.Hour, t0); err == nil {
		t.Error("a CA without its key issued a certificate")
	}
}

func TestIssueCSR(t *testing.T) {
	ca := mustCA(t, "c1")
	key, _ := NewKey()
	csr, err := NewCSR(key, "joiner")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.IssueCSR(csr, "n7", []string{RoleBrick}, time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := ParseCertPEM(p)
	if c.Subject.CommonName != "n7" || !publicKeysEqual(key.Public(), c.PublicKey) {
		t.Errorf("issued for %q, key match %v", c.Subject.CommonName, publicKeysEqual(key.Public(), c.PublicKey))
	}
	// A request whose signature does not verify is refused.
	blk, _ := pem.Decode(csr)
	der := bytes.Clone(blk.Bytes)
	der[len(der)-5] ^= 0xff
	bad := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	if _, err := ca.IssueCSR(bad, "n7", []string{RoleBrick}, time.Hour, t0); err == nil {
		t.Error("IssueCSR accepted a request with a bad signature")
	}
	if _, err := ca.IssueCSR(p, "n7", []string{RoleBrick}, time.Hour, t0); !errors.Is(err, ErrBadPEM) {
		t.Errorf("IssueCSR(certificate) = %v, want ErrBadPEM", err)
	}
}

func TestCAHash(t *testing.T) {
	ca := mustCA(t, "c1")
	sum := sha256.Sum256(ca.Cert.RawSubjectPublicKeyInfo)
	if got := CAHash(ca.CertPEM); got != hex.EncodeToString(sum[:]) || len(got) != 64 {
		t.Errorf("CAHash = %q", got)
	}
	if CAHash([]byte("junk")) != "" {
		t.Error("CAHash of junk is not empty")
	}
	if CAHash(mustCA(t, "c1").CertPEM) == CAHash(ca.CertPEM) {
		t.Error("two CAs with one hash")
	}
}

func TestCASaveLoad(t *testing.T) {
	dir := t.TempDir()
	ca := mustCA(t, "c1")
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, CAKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("ca.key: %v %v", fi.Mode(), err)
	}
	if err := mustCA(t, "c2").Save(dir); err == nil {
		t.Error("Save overwrote an existing CA")
	}
	got, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !got.CanIssue() || got.ClusterID != "c1" || !got.Cert.Equal(ca.Cert) {
		t.Errorf("loaded CA: can issue %v, cluster %q", got.CanIssue(), got.ClusterID)
	}
	os.Remove(filepath.Join(dir, CAKeyFile))
	got, err = LoadCA(dir)
	if err != nil || got.CanIssue() {
		t.Errorf("CA without key: %v, can issue %v", err, got.CanIssue())
	}
	// A key of another CA is refused.
	other, _ := mustCA(t, "c1").KeyPEM()
	if _, err := ParseCA(ca.CertPEM, other); err == nil {
		t.Error("ParseCA accepted a key that does not match")
	}
	if _, err := LoadCA(t.TempDir()); err == nil {
		t.Error("LoadCA of an empty directory succeeded")
	}
}

func TestParseCARefusesLeaf(t *testing.T) {
	ca := mustCA(t, "c1")
	key, _ := NewKey()
	p, _ := ca.Issue(key.Public(), "n1", []string{RoleBrick}, time.Hour, t0)
	if _, err := ParseCA(p, nil); err == nil {
		t.Error("ParseCA accepted a leaf certificate")
	}
}

// FuzzParse feeds outside bytes to every PEM decoder of the package: they
// return errors, never panic, and what they accept is consistent.
func FuzzParse(f *testing.F) {
	ca := mustCA(f, "c1")
	key, _ := NewKey()
	leafPEM, _ := ca.Issue(key.Public(), "n1", []string{RoleBrick}, time.Hour, time.Now())
	keyPEM, _ := MarshalKey(key)
	csr, _ := NewCSR(key, "n1")
	f.Add(ca.CertPEM, keyPEM)
	f.Add(leafPEM, keyPEM)
	f.Add(csr, []byte(nil))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), []byte("-----BEGIN PRIVATE KEY-----\n\n-----END PRIVATE KEY-----\n"))
	f.Add([]byte("garbage"), []byte{0x30, 0x82})
	id, err := NewIdentity(ca.CertPEM)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		_, _ = ParseCertPEM(a)
		_, _ = ParseKeyPEM(b)
		_, _ = ParseCSRPEM(a)
		_ = CAHash(a)
		if c, err := ParseCA(a, b); err == nil && (c.Cert == nil || !c.Cert.IsCA) {
			t.Fatal("ParseCA accepted a certificate that is not a CA")
		}
		if _, err := NewIdentity(a); err == nil && !bytes.Contains(a, []byte("CERTIFICATE")) {
			t.Fatal("NewIdentity accepted bytes without a certificate")
		}
		if err := id.Set(a, b); err == nil && id.Certificate() == nil {
			t.Fatal("Set succeeded without a certificate")
		}
	})
}
