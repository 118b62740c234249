package coordclient

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/internal/pki"
)

// TestRenewLoop: a certificate is replaced at two thirds of its life,
// again and again, without anyone restarting anything; the saved hook
// sees each.
func TestRenewLoop(t *testing.T) {
	ca, err := pki.NewCA("renewtest", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	const life = 3 * time.Second // certificates count whole seconds
	id, err := ca.NewIdentity("m1", []string{pki.RoleClient}, life, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	first := id.Certificate()
	if at := pki.RenewAt(first); at.Before(time.Now().Add(life/3)) || at.After(time.Now().Add(life)) {
		t.Fatalf("RenewAt %v is not at about two thirds of a %v life from now (%v)", at, life, time.Now())
	}
	var calls, saves atomic.Int32
	renew := func(ctx context.Context, csr []byte) ([]byte, error) {
		calls.Add(1)
		return ca.IssueCSR(csr, "m1", []string{pki.RoleClient}, life, time.Now())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		RenewLoop(ctx, id, renew, func(*pki.Identity) error { saves.Add(1); return nil }, t.Logf)
		close(done)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for saves.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d renewals in 20 s", saves.Load())
		}
		if c := id.Certificate(); time.Now().After(c.NotAfter) {
			t.Fatalf("the certificate expired at %v without a renewal", c.NotAfter)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
	if now := id.Certificate(); now.SerialNumber.Cmp(first.SerialNumber) == 0 || !now.NotAfter.After(first.NotAfter) {
		t.Fatalf("still the first certificate: serial %v, expires %v", now.SerialNumber, now.NotAfter)
	}
}
