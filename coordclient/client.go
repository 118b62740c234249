// Package coordclient is the client side of the coordinator service: it
// keeps connections to every coordinator address it was given and fails over
// between them. Any coordinator answers: followers forward to the leader.
package coordclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/inproc"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/localnet"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/internal/pki"
	"github.com/plumeria-fs/plumeria/internal/reqid"
	"github.com/plumeria-fs/plumeria/internal/rpcbuf"
)

// Client talks to a coordinator group.
type Client struct {
	addrs []string
	conns []*inproc.Conn
	mu    struct {
		sync.Mutex
		next int // index of the address that worked last
	}
}

// New connects lazily to the comma-separated or listed addresses.
func New(addrs ...string) (*Client, error) {
	var list []string
	for _, a := range addrs {
		for _, p := range strings.Split(a, ",") {
			if p = strings.TrimSpace(p); p != "" {
				list = append(list, p)
			}
		}
	}
	if len(list) == 0 {
		return nil, errors.New("coordclient: no coordinator address given (use --coord HOST:PORT)")
	}
	c := &Client{addrs: list}
	for _, a := range list {
		conn, err := Dial(a)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("coordclient: %s: %w", a, err)
		}
		c.conns = append(c.conns, conn)
	}
	return c, nil
}

// Connection attempts of every connection Dial makes. gRPC's defaults (a
// 20 s connect timeout, up to 120 s between attempts) are made for the
// Internet; inside a cluster they turn a dead member into 20 s stalls.
// While a connection is being (re)established, an RPC waits for the
// attempt to end, deadline or not; an address whose host died drops
// packets, so the attempt fails only at its timeout. After a failed
// attempt, RPCs fail at once (Unavailable) until the address answers
// again: callers retry elsewhere or after a new map.
const (
	// ConnectTimeout bounds one attempt to connect: TCP and the HTTP/2
	// handshake. On a LAN both take milliseconds; the margin covers one
	// lost SYN (resent after 1 s) and a loaded host.
	ConnectTimeout = 2 * time.Second
	// ReconnectDelayMax bounds the wait between attempts to reach an
	// address that did not answer, so a restarted member is reached again
	// within it.
	ReconnectDelayMax = 5 * time.Second
)

// Dial opens a gRPC connection with Plumeria's options (message size
// limits; connection attempts bounded by ConnectTimeout and
// ReconnectDelayMax; the request id of each call's context travels as
// metadata). It uses mutual TLS with the process's identity
// (pki.Default), or plaintext when the process runs insecure (nil).
// Unary calls to a server of this process that serves addr are function
// calls (internal/inproc); streams, and calls to other processes, use the
// gRPC connection.
func Dial(addr string) (*inproc.Conn, error) {
	cc, err := DialGRPC(addr)
	if err != nil {
		return nil, err
	}
	return inproc.Wrap(cc, addr, reqid.UnaryClientInterceptor), nil
}

// DialGRPC is Dial without direct calls: a plain gRPC connection, for
// clients that only open streams (a lock clerk).
func DialGRPC(addr string) (*grpc.ClientConn, error) {
	id := pki.Default()
	return grpc.NewClient(addr, append(reqid.DialOptions(),
		pki.DialOption(id), rpcbuf.DialOption(), grpc.WithContextDialer(dialer(id)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limits.RPCMessageBytesMax), grpc.MaxCallSendMsgSize(limits.RPCMessageBytesMax)),
		grpc.WithInitialWindowSize(limits.RPCStreamWindowBytes), grpc.WithInitialConnWindowSize(limits.RPCConnWindowBytes),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: time.Second, Multiplier: 1.6, Jitter: 0.2, MaxDelay: ReconnectDelayMax},
			MinConnectTimeout: ConnectTimeout,
		}),
	)...)
}

// Addrs returns the coordinator addresses.
func (c *Client) Addrs() []string { return c.addrs }

// Close closes all connections.
func (c *Client) Close() {
	for _, conn := range c.conns {
		conn.Close()
	}
}

// retryable reports whether another coordinator might answer.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	return false
}

// GiveUpAfter bounds Call when its context has no deadline.
const GiveUpAfter = 20 * time.Second

// Call runs fn against coordinators, starting with the last one that
// worked, until one answers or ctx ends (GiveUpAfter if ctx has no
// deadline). Unavailable coordinators and elections in progress are
// retried with backoff.
func (c *Client) Call(ctx context.Context, fn func(ctx context.Context, cl pb.CoordinatorClient) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, GiveUpAfter)
		defer cancel()
	}
	backoff := 50 * time.Millisecond
	for {
		c.mu.Lock()
		start := c.mu.next
		c.mu.Unlock()
		var last error
		for i := range c.conns {
			idx := (start + i) % len(c.conns)
			cctx, cancel := context.WithTimeout(ctx, attemptTimeout(ctx, len(c.conns)-i))
			err := fn(cctx, pb.NewCoordinatorClient(c.conns[idx]))
			cancel()
			if err == nil || !retryable(err) {
				if err == nil {
					c.mu.Lock()
					c.mu.next = idx
					c.mu.Unlock()
				}
				return err
			}
			last = err
			// The next call starts with the next coordinator: one that
			// is gone (a dead host drops packets, so its calls hang until
			// their deadline) must not take every call's whole deadline.
			c.mu.Lock()
			if c.mu.next == idx {
				c.mu.next = (idx + 1) % len(c.conns)
			}
			c.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no coordinator of %s answered (last error: %v); check that they run and that --coord is right", strings.Join(c.addrs, ","), ErrorMessage(last))
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Second)
	}
}

// attemptMax bounds one coordinator's attempt; attemptMin is the least an
// attempt gets when the deadline is shared among the coordinators left.
const (
	attemptMax = 15 * time.Second
	attemptMin = 250 * time.Millisecond
)

// attemptTimeout is one attempt's share of what is left of ctx's deadline
// when left coordinators may still be tried: a hung one leaves time for
// the others.
func attemptTimeout(ctx context.Context, left int) time.Duration {
	d, _ := ctx.Deadline() // Call gave it one
	share := time.Until(d) / time.Duration(max(left, 1))
	return min(attemptMax, max(attemptMin, share))
}

// Map fetches a map with at least minEpoch.
func (c *Client) Map(ctx context.Context, minEpoch uint64) (*clustermap.Map, error) {
	var m *clustermap.Map
	err := c.Call(ctx, func(ctx context.Context, cl pb.CoordinatorClient) error {
		r, err := cl.GetMap(ctx, &pb.GetMapRequest{MinEpoch: minEpoch})
		if err != nil {
			return err
		}
		m, err = DecodeMap(r.MapJson)
		return err
	})
	return m, err
}

// ErrorMessage turns a gRPC error into its plain message for people.
func ErrorMessage(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Message()
	}
	return err.Error()
}

// dialer connects to a server of this process in memory
// (internal/localnet: no TCP, no TLS records; id's certificate is checked
// as the handshake would check it), and to any other over TCP.
func dialer(id *pki.Identity) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		if c, ok, err := localnet.Dial(ctx, addr, id.Chain()); ok {
			return c, err
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
}
