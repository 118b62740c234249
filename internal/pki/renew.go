package pki

import (
	"crypto/x509"
	"time"
)

// RenewAt returns when a member should renew c: at two thirds of its
// life, counted from its issue (NotBefore is backdated by the allowed
// clock skew, which is not life).
func RenewAt(c *x509.Certificate) time.Time { return c.NotAfter.Add(-Lifetime(c) / 3) }

// Lifetime returns the life c was issued for (NotBefore is backdated by
// the allowed clock skew, which is not life).
func Lifetime(c *x509.Certificate) time.Duration {
	issued := c.NotBefore.Add(clockSkew)
	if issued.After(c.NotAfter) {
		issued = c.NotBefore
	}
	return c.NotAfter.Sub(issued)
}
