// Package localnet connects a process to its own listeners through memory.
// A server registers the TCP address it listens on (Listen); a client of
// the same process that dials that address (Dial) gets one end of a pair
// of in-memory pipes, and the server's accept function gets the other. The
// bytes never reach the kernel: no TCP, no TLS records, no system calls.
//
// Nothing is lost in authentication: each end carries the certificate
// chain the other end would have presented in a TLS handshake (its
// process identity's current certificate), and internal/pki verifies it
// against the cluster CA exactly as the handshake would (internal/pki/local.go).
// What is skipped is encryption of bytes that never leave the process.
//
// It does not serve Raft streams (they dial TCP themselves), other
// processes, or addresses this process does not listen on: Dial answers
// ok=false and the caller dials TCP as before.
//
// Who gains: every process that runs more than one role (plumeria up; a
// server that runs a brick, a lock server and a mount together): an fs
// node's requests to a brick of its own process, and replication between
// bricks of one process.
package localnet

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// PipeBytes bounds the buffer of each direction of a connection: about
// what a loopback socket buffers, so a writer of bulk data rarely waits
// for the reader. A buffer starts at pipeBytesMin (at its first write) and
// doubles each time a writer finds it full, so a connection of small
// requests stays small (session 21: a fixed 1 MiB each way cost `up` 90
// MB of resident memory).
const (
	PipeBytes    = 1 << 20
	pipeBytesMin = 32 << 10
)

// Conn is one end of an in-process connection.
type Conn struct {
	r, w   *pipe
	local  net.Addr
	remote net.Addr
	peer   []*x509.Certificate
	once   sync.Once
}

var _ net.Conn = (*Conn)(nil)

func (c *Conn) Read(b []byte) (int, error)  { return c.r.Read(b) }
func (c *Conn) Write(b []byte) (int, error) { return c.w.Write(b) }

// Close closes both directions: the other end reads what was written
// before, then io.EOF; its writes fail.
func (c *Conn) Close() error {
	c.once.Do(func() {
		c.r.closeRead()
		c.w.closeWrite()
	})
	return nil
}

func (c *Conn) LocalAddr() net.Addr  { return c.local }
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

func (c *Conn) SetDeadline(t time.Time) error {
	c.r.setReadDeadline(t)
	c.w.setWriteDeadline(t)
	return nil
}
func (c *Conn) SetReadDeadline(t time.Time) error  { c.r.setReadDeadline(t); return nil }
func (c *Conn) SetWriteDeadline(t time.Time) error { c.w.setWriteDeadline(t); return nil }

// PeerChain is the certificate chain the other end presented (its
// identity's current certificate first); nil when it has none (a process
// that runs insecure, or before it got a certificate).
func (c *Conn) PeerChain() []*x509.Certificate { return c.peer }

// InProcess marks the connection as one that never leaves the process
// (internal/pki looks for it).
func (c *Conn) InProcess() {}

// Addr is the address of an in-process end: the dialing side is named
// after its process, the serving side after the address it listens on.
type Addr string

func (a Addr) Network() string { return "inproc" }
func (a Addr) String() string  { return string(a) }

// Accept takes the server's end of a new connection: it checks what it
// needs (the client's chain) and hands the connection on, or returns an
// error, which the dialer gets (the connection is then closed). It gives
// up when ctx (the dial's) ends.
type Accept func(context.Context, *Conn) error

type listener struct {
	chain  func() []*x509.Certificate // the server's certificate chain now (nil func: none)
	accept Accept
}

var (
	mu        sync.RWMutex
	listeners = map[string]*listener{}
)

// ErrClosed is the error of a dial that met a listener while it closed.
var ErrClosed = errors.New("localnet: the listener is closed")

// Listen registers addr (a listener's bound address, as net.Addr.String
// gives it) for in-process dials; chain gives the server's certificate
// chain at each dial (nil: none). stop unregisters it; connections made
// before stay open (they are their owners' to close, as with TCP).
func Listen(addr string, chain func() []*x509.Certificate, accept Accept) (stop func(), err error) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := listeners[addr]; dup {
		return nil, fmt.Errorf("localnet: %s is already registered in this process", addr)
	}
	l := &listener{chain: chain, accept: accept}
	listeners[addr] = l
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if listeners[addr] == l {
			delete(listeners, addr)
		}
	}, nil
}

// lookup finds the listener of addr: its exact address, or for a loopback
// address a listener on the unspecified address of the same port.
func lookup(addr string) *listener {
	mu.RLock()
	defer mu.RUnlock()
	if l := listeners[addr]; l != nil {
		return l
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return nil
	}
	for _, unspec := range []string{"0.0.0.0", "::"} {
		if l := listeners[net.JoinHostPort(unspec, port)]; l != nil {
			return l
		}
	}
	return nil
}

// Dial connects to addr in memory when this process listens on it
// (ok=true, with the connection or the listener's refusal), presenting
// chain as the client's certificate chain. ok=false: addr is not served
// here; dial it over the network.
func Dial(ctx context.Context, addr string, chain []*x509.Certificate) (_ net.Conn, ok bool, _ error) {
	l := lookup(addr)
	if l == nil {
		return nil, false, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, true, err
	}
	var serverChain []*x509.Certificate
	if l.chain != nil {
		serverChain = l.chain()
	}
	up, down := newPipe(), newPipe()
	client := &Conn{r: down, w: up, local: Addr("inproc-client"), remote: Addr(addr), peer: serverChain}
	server := &Conn{r: up, w: down, local: Addr(addr), remote: Addr("inproc-client"), peer: chain}
	if err := l.accept(ctx, server); err != nil {
		client.Close()
		server.Close()
		return nil, true, fmt.Errorf("localnet: %s refused the connection: %w", addr, err)
	}
	return client, true, nil
}
