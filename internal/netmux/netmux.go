// Package netmux serves gRPC and Raft on one TCP port. A Raft connection
// starts with the byte RaftMagic, written by RaftLayer's Dial; anything else
// (an HTTP/2 client preface starts with 'P') goes to the gRPC listener.
// It owns only the first byte of each connection.
//
// With an identity (mutual TLS, internal/pki) the mux terminates TLS on
// every connection before it looks at the first byte, so the byte is
// read from the encrypted stream; only a peer whose certificate carries
// the coordinator role may open a Raft stream, and the gRPC server gets
// connections that are already TLS (serve it with
// pki.HandshakedServerOptions). A connection that fails its handshake is
// closed and forgotten: it never reaches gRPC or Raft.
package netmux

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/plumeria-fs/plumeria/internal/localnet"
	"github.com/plumeria-fs/plumeria/internal/pki"
)

// RaftMagic is the first byte a Raft stream sends. Part of the wire format.
const RaftMagic byte = 0xA7

// sniffTimeout bounds how long an accepted connection may stay silent
// before its first byte; a silent peer is dropped.
const sniffTimeout = 10 * time.Second

// Mux splits one listener into a gRPC listener and a Raft stream layer.
type Mux struct {
	ln        net.Listener
	id        *pki.Identity // nil: plaintext
	logger    atomic.Pointer[slog.Logger]
	grpc      *chanListener
	raft      *chanListener
	stopLocal func() // unregisters the in-process listener
}

// Listen listens on addr and starts dispatching connections. With id
// non-nil every connection is mutual TLS with id; nil is plaintext.
// Clients of the same process that dial the bound address reach the gRPC
// listener in memory (internal/localnet), their certificates checked as
// the handshake would check them.
func Listen(addr string, id *pki.Identity) (*Mux, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	m := &Mux{ln: ln, id: id, grpc: newChanListener(ln.Addr()), raft: newChanListener(ln.Addr())}
	var chain func() []*x509.Certificate
	if id != nil {
		chain = id.Chain
	}
	if m.stopLocal, err = localnet.Listen(ln.Addr().String(), chain, m.acceptLocal); err != nil {
		ln.Close()
		return nil, err
	}
	go m.serve()
	return m, nil
}

// acceptLocal hands an in-process connection to the gRPC listener, after
// the checks of a TLS handshake when the mux has an identity, or gives up
// when the dial's ctx ends.
func (m *Mux) acceptLocal(ctx context.Context, c *localnet.Conn) error {
	var conn net.Conn = c
	if m.id != nil {
		tc, err := m.id.LocalServerConn(c)
		if err != nil {
			return err
		}
		conn = tc
	}
	select {
	case m.grpc.ch <- conn:
		return nil
	case <-m.grpc.done:
		return localnet.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SetLogger sets where refused connections are logged (default: nowhere).
func (m *Mux) SetLogger(l *slog.Logger) { m.logger.Store(l) }

func (m *Mux) log() *slog.Logger {
	if l := m.logger.Load(); l != nil {
		return l
	}
	return slog.New(slog.DiscardHandler)
}

// Addr is the bound address.
func (m *Mux) Addr() net.Addr { return m.ln.Addr() }

// GRPC returns the listener for the gRPC server.
func (m *Mux) GRPC() net.Listener { return m.grpc }

// Raft returns a raft.StreamLayer over this port.
func (m *Mux) Raft() raft.StreamLayer { return &raftLayer{m.raft, m.id} }

// Close stops accepting; established connections are their owners' to close.
func (m *Mux) Close() error {
	m.stopLocal()
	err := m.ln.Close()
	m.grpc.close()
	m.raft.close()
	return err
}

func (m *Mux) serve() {
	for {
		c, err := m.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			m.grpc.close()
			m.raft.close()
			return
		}
		go m.dispatch(c)
	}
}

func (m *Mux) dispatch(c net.Conn) {
	if m.id != nil {
		tc, err := pki.ServerHandshake(c, m.id.ServerConfig())
		if err != nil {
			m.log().Debug("connection refused", "err", err) // closed by ServerHandshake
			return
		}
		c = tc
	}
	_ = c.SetReadDeadline(time.Now().Add(sniffTimeout))
	br := bufio.NewReaderSize(c, 4096)
	first, err := br.Peek(1)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		c.Close()
		return
	}
	if first[0] == RaftMagic {
		if m.id != nil && !verifiedRole(c.(*tls.Conn).ConnectionState(), pki.RoleCoordinator) {
			// Only coordinators take part in Raft: a member whose
			// certificate lacks the role is misconfigured, say so.
			m.log().Warn("Raft stream refused: the peer's certificate has no coordinator role", "remote", c.RemoteAddr())
			c.Close()
			return
		}
		_, _ = br.Discard(1)
		m.raft.put(wrap(c, br))
		return
	}
	m.grpc.put(wrap(c, br))
}

// verifiedRole reports whether the peer of a TLS connection presented a
// certificate verified against the cluster CA that carries role.
func verifiedRole(st tls.ConnectionState, role string) bool {
	if len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return false
	}
	return slices.Contains(st.VerifiedChains[0][0].Subject.OrganizationalUnit, role)
}

func wrap(c net.Conn, br *bufio.Reader) net.Conn {
	if tc, ok := c.(*tls.Conn); ok {
		return &tlsBufConn{bufConn{Conn: c, r: br}, tc}
	}
	return &bufConn{Conn: c, r: br}
}

// tlsBufConn is a bufConn over TLS that keeps the TLS state reachable
// (pki.TLSConn), so gRPC reports the peer's certificate.
type tlsBufConn struct {
	bufConn
	tc *tls.Conn
}

func (t *tlsBufConn) ConnectionState() tls.ConnectionState { return t.tc.ConnectionState() }

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

type chanListener struct {
	addr net.Addr
	ch   chan net.Conn
	once sync.Once
	done chan struct{}
}

func newChanListener(a net.Addr) *chanListener {
	return &chanListener{addr: a, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) put(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.done:
		c.Close()
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) close()         { l.once.Do(func() { close(l.done) }) }
func (l *chanListener) Close() error   { l.close(); return nil }
func (l *chanListener) Addr() net.Addr { return l.addr }

type raftLayer struct {
	*chanListener
	id *pki.Identity // nil: plaintext
}

// Dial opens a Raft stream to a peer's mux port (over mutual TLS with a
// peer that must be a coordinator, when the mux has an identity).
func (r *raftLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", string(addr), timeout)
	if err != nil {
		return nil, err
	}
	if r.id != nil {
		tc := tls.Client(c, r.id.ClientConfigFor(pki.RoleCoordinator))
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("raft: TLS handshake with %s: %w", addr, err)
		}
		c = tc
	}
	if _, err := c.Write([]byte{RaftMagic}); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
