// Package netmux serves gRPC and Raft on one TCP port. A Raft connection
// starts with the byte RaftMagic, written by RaftLayer's Dial; anything else
// (an HTTP/2 client preface starts with 'P') goes to the gRPC listener.
// It owns only the first byte of each connection.
package netmux

import (
	"bufio"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// RaftMagic is the first byte a Raft stream sends. Part of the wire format.
const RaftMagic byte = 0xA7

// sniffTimeout bounds how long an accepted connection may stay silent
// before its first byte; a silent peer is dropped.
const sniffTimeout = 10 * time.Second

// Mux splits one listener into a gRPC listener and a Raft stream layer.
type Mux struct {
	ln   net.Listener
	grpc *chanListener
	raft *chanListener
}

// Listen listens on addr and starts dispatching connections.
func Listen(addr string) (*Mux, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	m := &Mux{ln: ln, grpc: newChanListener(ln.Addr()), raft: newChanListener(ln.Addr())}
	go m.serve()
	return m, nil
}

// Addr is the bound address.
func (m *Mux) Addr() net.Addr { return m.ln.Addr() }

// GRPC returns the listener for the gRPC server.
func (m *Mux) GRPC() net.Listener { return m.grpc }

// Raft returns a raft.StreamLayer over this port.
func (m *Mux) Raft() raft.StreamLayer { return &raftLayer{m.raft} }

// Close stops accepting; established connections are their owners' to close.
func (m *Mux) Close() error {
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
	_ = c.SetReadDeadline(time.Now().Add(sniffTimeout))
	br := bufio.NewReaderSize(c, 4096)
	first, err := br.Peek(1)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		c.Close()
		return
	}
	if first[0] == RaftMagic {
		_, _ = br.Discard(1)
		m.raft.put(&bufConn{Conn: c, r: br})
		return
	}
	m.grpc.put(&bufConn{Conn: c, r: br})
}

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

type raftLayer struct{ *chanListener }

// Dial opens a Raft stream to a peer's mux port.
func (r *raftLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", string(addr), timeout)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte{RaftMagic}); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
