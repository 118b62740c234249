package localnet

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// listen registers a fresh loopback address whose accepted server ends
// go to the returned channel.
func listen(t *testing.T) (string, chan *Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	t.Cleanup(func() { ln.Close() })
	ch := make(chan *Conn, 4)
	stop, err := Listen(addr, nil, func(_ context.Context, c *Conn) error { ch <- c; return nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return addr, ch
}

// TestStreamBothWays sends random-sized writes both ways at once, more
// than the pipe holds, and checks every byte arrives in order; then a
// close gives the reader what was left and io.EOF.
func TestStreamBothWays(t *testing.T) {
	addr, ch := listen(t)
	client, ok, err := Dial(context.Background(), addr, nil)
	if !ok || err != nil {
		t.Fatalf("Dial: ok=%v err=%v", ok, err)
	}
	server := <-ch
	const total = 5*PipeBytes + 12345
	send := func(seed uint64) []byte {
		b := make([]byte, total)
		r := rand.New(rand.NewPCG(seed, 1))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	up, down := send(1), send(2)
	var wg sync.WaitGroup
	write := func(c net.Conn, b []byte) {
		defer wg.Done()
		r := rand.New(rand.NewPCG(3, 4))
		for len(b) > 0 {
			n := min(len(b), 1+r.IntN(3*PipeBytes/2))
			if _, err := c.Write(b[:n]); err != nil {
				t.Error(err)
				return
			}
			b = b[n:]
		}
	}
	read := func(c net.Conn, want []byte) {
		defer wg.Done()
		got := make([]byte, len(want))
		if _, err := io.ReadFull(c, got); err != nil {
			t.Error(err)
		}
		if !bytes.Equal(got, want) {
			t.Error("the bytes read are not the bytes written")
		}
	}
	wg.Add(4)
	go write(client, up)
	go write(server, down)
	go read(server, up)
	go read(client, down)
	wg.Wait()
	// What was written before a close is still read, then io.EOF; the
	// closed end's peer can no longer write.
	client.Write([]byte("last"))
	client.Close()
	if b, err := io.ReadAll(server); err != nil || string(b) != "last" {
		t.Fatalf("after the peer's close: read %q, %v; want \"last\" then io.EOF", b, err)
	}
	if _, err := server.Write([]byte{1}); err == nil {
		t.Fatal("a write to a closed peer succeeded")
	}
}

// TestDeadlines: a read with nothing to read and a write into a full pipe
// return os.ErrDeadlineExceeded at their deadline, and work again once it
// is cleared.
func TestDeadlines(t *testing.T) {
	addr, ch := listen(t)
	client, _, _ := Dial(context.Background(), addr, nil)
	server := <-ch
	client.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := client.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v", err)
	}
	// Nobody reads: the write fills the buffer (growing it to at most
	// PipeBytes; under the race detector the deadline may pass while it
	// grows) and returns what it wrote with the deadline's error.
	client.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	n, err := client.Write(make([]byte, PipeBytes+1))
	if !errors.Is(err, os.ErrDeadlineExceeded) || n <= 0 || n > PipeBytes {
		t.Fatalf("write into a full pipe: n=%d err=%v, want 0 < n <= %d and a deadline error", n, err, PipeBytes)
	}
	client.SetDeadline(time.Time{})
	drained := make(chan error, 1)
	go func() { _, err := io.CopyN(io.Discard, server, int64(n)+1); drained <- err }()
	if _, err := client.Write([]byte{1}); err != nil {
		t.Fatalf("write after the deadline was cleared: %v", err)
	}
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	// A deadline set while a read waits (nothing is left to read) wakes it.
	done := make(chan error, 1)
	go func() { _, err := server.Read(make([]byte, 1)); done <- err }()
	time.Sleep(10 * time.Millisecond)
	server.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a waiting read past its deadline: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read waiting past its deadline was not woken")
	}
}

// TestCloseWakesWaiters: a close of either end fails a write waiting for
// room and a read waiting for data.
func TestCloseWakesWaiters(t *testing.T) {
	addr, ch := listen(t)
	client, _, _ := Dial(context.Background(), addr, nil)
	server := <-ch
	werr := make(chan error, 1)
	go func() { _, err := client.Write(make([]byte, 2*PipeBytes)); werr <- err }()
	rerr := make(chan error, 1)
	go func() { _, err := client.Read(make([]byte, 1)); rerr <- err }()
	time.Sleep(20 * time.Millisecond)
	server.Close()
	for _, ch := range []chan error{werr, rerr} {
		select {
		case err := <-ch:
			if err == nil {
				t.Fatal("a waiter got no error after the peer closed")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter was not woken by the peer's close")
		}
	}
}

// TestLookup: only registered addresses are dialled in memory; a loopback
// address reaches a listener on the unspecified address of its port; a
// stopped listener is no longer found; the accept function's refusal
// reaches the dialer; each end carries the other's chain.
func TestLookup(t *testing.T) {
	ctx := context.Background()
	if _, ok, _ := Dial(ctx, "127.0.0.1:1", nil); ok {
		t.Fatal("an address nobody registered was dialled in memory")
	}
	serverCert := []*x509.Certificate{{Raw: []byte("server")}}
	clientCert := []*x509.Certificate{{Raw: []byte("client")}}
	var got []*x509.Certificate
	stop, err := Listen("[::]:65001", func() []*x509.Certificate { return serverCert }, func(_ context.Context, c *Conn) error {
		got = c.PeerChain()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen("[::]:65001", nil, nil); err == nil {
		t.Fatal("an address was registered twice")
	}
	c, ok, err := Dial(ctx, "127.0.0.1:65001", clientCert)
	if !ok || err != nil {
		t.Fatalf("loopback dial of a listener on [::]: ok=%v err=%v", ok, err)
	}
	if string(c.(*Conn).PeerChain()[0].Raw) != "server" || string(got[0].Raw) != "client" {
		t.Fatal("the ends do not carry each other's chains")
	}
	if _, ok, _ := Dial(ctx, "10.1.2.3:65001", nil); ok {
		t.Fatal("a non-loopback address reached a listener on [::] in memory")
	}
	stop()
	if _, ok, _ := Dial(ctx, "127.0.0.1:65001", nil); ok {
		t.Fatal("a stopped listener was still dialled")
	}
	refused := errors.New("no")
	stop, _ = Listen("127.0.0.1:65002", nil, func(context.Context, *Conn) error { return refused })
	defer stop()
	if _, ok, err := Dial(ctx, "127.0.0.1:65002", nil); !ok || !errors.Is(err, refused) {
		t.Fatalf("refused dial: ok=%v err=%v", ok, err)
	}
}
