// Package faultnet is a TCP proxy for tests that makes a server's address
// fail the way a killed container's does: Kill closes every connection
// through it (the dead process's sockets are closed) and from then on the
// address is dark: connections are accepted and never answered, so a
// client's dial and handshake hang until the client's own timeout, as with
// packets to an address nobody owns any more. Revive forwards again.
//
// A server listens on 127.0.0.1:0 and advertises the proxy's address
// (Proxy.Addr); every client, its peers included, goes through the proxy.
package faultnet

import (
	"io"
	"net"
	"sync"
)

// Proxy forwards connections to one backend address until killed.
type Proxy struct {
	ln net.Listener
	wg sync.WaitGroup
	mu struct {
		sync.Mutex
		backend string
		dark    bool
		conns   map[net.Conn]bool // both ends of every open connection, dark ones included
	}
}

// Listen starts a proxy on a free loopback port that forwards to backend.
func Listen(backend string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln}
	p.mu.backend = backend
	p.mu.conns = map[net.Conn]bool{}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients use.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetBackend changes where later connections go (a restarted server on a
// new port).
func (p *Proxy) SetBackend(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.backend = addr
}

// Kill closes every connection and makes the address dark.
func (p *Proxy) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.dark = true
	for c := range p.mu.conns {
		c.Close()
	}
	clear(p.mu.conns)
}

// Revive forwards new connections again; connections accepted while dark
// stay silent until they are closed.
func (p *Proxy) Revive() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.dark = false
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Kill()
	p.wg.Wait()
	p.Kill() // what was accepted meanwhile
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		dark, backend := p.mu.dark, p.mu.backend
		p.mu.conns[c] = true
		p.mu.Unlock()
		if dark {
			continue // held open, never read nor written: a dark address
		}
		p.wg.Add(1)
		go p.forward(c, backend)
	}
}

func (p *Proxy) forward(c net.Conn, backend string) {
	defer p.wg.Done()
	b, err := net.Dial("tcp", backend)
	if err != nil {
		p.drop(c)
		return
	}
	p.mu.Lock()
	if p.mu.dark || !p.mu.conns[c] { // killed while dialing
		p.mu.Unlock()
		b.Close()
		c.Close()
		return
	}
	p.mu.conns[b] = true
	p.mu.Unlock()
	// Either direction ending ends the connection (gRPC does not
	// half-close), which ends the other direction.
	ended := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) { io.Copy(dst, src); ended <- struct{}{} }
	go pipe(b, c)
	go pipe(c, b)
	<-ended
	p.drop(c)
	p.drop(b)
	<-ended
}

func (p *Proxy) drop(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.mu.conns, c)
	p.mu.Unlock()
}
