// Package inproc serves a process's calls to its own unary gRPC methods as
// function calls. A node registers its services here as well as on its
// gRPC server (Server is a grpc.ServiceRegistrar) and, once they are all
// registered, Serves them under the address it listens on. A client
// connection made with Wrap for that address then calls the handler
// directly: no encoding, no HTTP/2 frames, no in-memory pipe
// (internal/localnet) and no wake-up of a connection's reader. Streams,
// and calls to any address this process does not serve, go through the
// wrapped gRPC connection as before.
//
// What a call through gRPC guarantees, a direct call keeps:
//   - The handler owns its request: it gets a deep copy, made before the
//     call starts, so a caller that gives up (its context ended) may reuse
//     its buffers while the handler still runs. The caller gets a copy of
//     the reply (rpcbuf.Into: its large field copied once, into Dst).
//   - The handler runs on another goroutine (one of a pool, as gRPC's
//     server workers) with a context that has the caller's deadline and
//     cancellation but none of its values, the caller's outgoing metadata
//     as incoming metadata, and as its peer the process's identity as a
//     TLS handshake would have reported it (pki.Identity.LocalAuthInfo),
//     so authorization decides as before. The caller returns at its
//     deadline even if the handler does not.
//   - The server's unary interceptors run, in the order given.
//   - A server that Stops is unregistered: later calls go to the address
//     over the wrapped connection (and fail as a stopped server does), and
//     the contexts of calls in flight are cancelled, as gRPC's Stop does.
//   - A connection has at most limits.RPCStreamsPerConnMax calls in flight
//     to a server; more wait, as they would for HTTP/2 streams, so what
//     one client makes a brick hold stays bounded.
//   - Errors are gRPC status errors, as a remote call returns them.
//
// Why not github.com/fullstorydev/grpchan/inprocgrpc: it gives every call
// the same anonymous peer (authorization here needs the caller's
// certificate), cannot make a stopped server's calls fail, and copies
// replies through a codec where a read needs rpcbuf.Into's single copy.
package inproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/rpcbuf"
)

// Server is a set of services of this process, callable directly once
// Served under an address.
type Server struct {
	unary grpc.UnaryServerInterceptor // nil: none
	auth  func() (credentials.AuthInfo, error)

	mu       sync.Mutex
	services map[string]*service // by full service name; fixed once served
	served   bool
	addr     string          // "" until Serve
	ctx      context.Context // cancelled by Stop
	stop     context.CancelFunc
}

type service struct {
	impl    any
	methods map[string]*grpc.MethodDesc
}

// NewServer returns a server whose calls run interceptors in order and
// whose handlers see auth's answer as their peer's credentials (nil
// auth: no credentials, as a plaintext connection).
func NewServer(auth func() (credentials.AuthInfo, error), interceptors ...grpc.UnaryServerInterceptor) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{unary: chain(interceptors), auth: auth, services: map[string]*service{}, ctx: ctx, stop: cancel}
}

// RegisterService records sd's unary methods served by impl (as
// grpc.Server's: call it before Serve).
func (s *Server) RegisterService(sd *grpc.ServiceDesc, impl any) {
	sv := &service{impl: impl, methods: map[string]*grpc.MethodDesc{}}
	for i := range sd.Methods {
		sv.methods[sd.Methods[i].MethodName] = &sd.Methods[i]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.served {
		panic(fmt.Sprintf("inproc: service %s registered after Serve", sd.ServiceName))
	}
	if _, dup := s.services[sd.ServiceName]; dup {
		panic(fmt.Sprintf("inproc: service %s registered twice", sd.ServiceName))
	}
	s.services[sd.ServiceName] = sv
}

// servers are the Served servers of this process, by address: a map
// replaced whole by Serve and Stop (rare), read by every call.
var servers struct {
	sync.Mutex // serializes replacements
	m          atomic.Pointer[map[string]*Server]
}

// ErrAddrInUse: another server of this process serves the address.
var ErrAddrInUse = errors.New("inproc: address already served by this process")

// Serve makes the server's methods callable directly by connections to
// addr (a host:port this process listens on). Register every service
// before.
func (s *Server) Serve(addr string) error {
	servers.Lock()
	defer servers.Unlock()
	old := servers.m.Load()
	if old != nil && (*old)[addr] != nil {
		return fmt.Errorf("%w: %s", ErrAddrInUse, addr)
	}
	s.mu.Lock()
	s.addr = addr
	s.served = true
	s.mu.Unlock()
	m := map[string]*Server{addr: s}
	if old != nil {
		for a, o := range *old {
			m[a] = o
		}
	}
	servers.m.Store(&m)
	return nil
}

// Stop unregisters the server and cancels the calls in flight.
func (s *Server) Stop() {
	servers.Lock()
	if old := servers.m.Load(); old != nil && (*old)[s.addr] == s {
		m := make(map[string]*Server, len(*old))
		for a, o := range *old {
			if o != s {
				m[a] = o
			}
		}
		servers.m.Store(&m)
	}
	servers.Unlock()
	s.stop()
}

func lookup(addr string) *Server {
	if m := servers.m.Load(); m != nil {
		return (*m)[addr]
	}
	return nil
}

// method finds the handler of a full method name ("/pkg.Service/Method").
// The services do not change once the server is served.
func (s *Server) method(full string) (*service, *grpc.MethodDesc, bool) {
	name, meth, ok := strings.Cut(strings.TrimPrefix(full, "/"), "/")
	if !ok {
		return nil, nil, false
	}
	sv := s.services[name]
	if sv == nil {
		return nil, nil, false
	}
	md := sv.methods[meth]
	return sv, md, md != nil
}

// Conn is a client connection that calls the unary methods of a server of
// this process directly (see the package comment) and everything else
// through the gRPC connection it wraps.
type Conn struct {
	*grpc.ClientConn
	addr  string
	unary grpc.UnaryClientInterceptor // the client interceptors as one; nil: none
	slots chan struct{}               // calls in flight to a server of this process
}

// Wrap returns cc, made for addr, as a Conn whose direct calls run the
// client interceptors first (in order: the same as cc's).
func Wrap(cc *grpc.ClientConn, addr string, interceptors ...grpc.UnaryClientInterceptor) *Conn {
	return &Conn{ClientConn: cc, addr: addr, unary: chainClient(interceptors), slots: make(chan struct{}, limits.RPCStreamsPerConnMax)}
}

// chainClient composes client interceptors into one (nil for none), the
// first outermost.
func chainClient(ics []grpc.UnaryClientInterceptor) grpc.UnaryClientInterceptor {
	switch len(ics) {
	case 0:
		return nil
	case 1:
		return ics[0]
	}
	return func(ctx context.Context, method string, args, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		next := func(ctx context.Context, method string, args, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
			return chainClient(ics[1:])(ctx, method, args, reply, cc, invoke, opts...)
		}
		return ics[0](ctx, method, args, reply, cc, next, opts...)
	}
}

// Invoke calls method directly when a server of this process serves the
// connection's address and has it, and over the connection otherwise.
func (c *Conn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	s := lookup(c.addr)
	if s == nil {
		return c.ClientConn.Invoke(ctx, method, args, reply, opts...)
	}
	sv, md, ok := s.method(method)
	if !ok {
		return c.ClientConn.Invoke(ctx, method, args, reply, opts...)
	}
	direct := func(ctx context.Context, method string, args, reply any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		return c.call(ctx, s, sv, md, method, args, reply)
	}
	if c.unary == nil {
		return direct(ctx, method, args, reply, c.ClientConn)
	}
	return c.unary(ctx, method, args, reply, c.ClientConn, direct, opts...)
}

// directCalls counts the calls made directly (metric).
var directCalls = promauto.NewCounter(prometheus.CounterOpts{Name: "plumeria_rpc_direct_calls_total",
	Help: "Unary calls this process made to its own servers as function calls (internal/inproc), not over a connection."})

// result is a handler's answer.
type result struct {
	reply any
	err   error
}

func (c *Conn) call(ctx context.Context, s *Server, sv *service, md *grpc.MethodDesc, method string, args, reply any) error {
	req, ok := args.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "inproc: %s: request %T is not a proto message", method, args)
	}
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
	directCalls.Inc()
	req = proto.Clone(req) // the handler's own, whatever the caller does next
	sctx, cancel := s.handlerContext(ctx)
	done := make(chan result, 1)
	run(func() {
		defer func() { <-c.slots }()
		defer cancel()
		dec := func(in any) error {
			m, ok := in.(proto.Message)
			if !ok || m.ProtoReflect().Descriptor() != req.ProtoReflect().Descriptor() {
				return status.Errorf(codes.Internal, "inproc: %s: handler wants %T, the caller sent %T", method, in, req)
			}
			// The clone's fields as they are (its bytes not copied
			// again): nothing else refers to the clone.
			dst, src := m.ProtoReflect(), req.ProtoReflect()
			src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
				dst.Set(fd, v)
				return true
			})
			dst.SetUnknown(src.GetUnknown())
			return nil
		}
		r, err := md.Handler(sv.impl, sctx, dec, s.unary)
		done <- result{r, err}
	})
	select {
	case r := <-done:
		if r.err != nil {
			return statusErr(r.err)
		}
		return copyReply(method, reply, r.reply)
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// workers run handlers on goroutines that keep their grown stacks, as a
// node's gRPC server does (limits.RPCStreamWorkers): a new goroutine per
// call grows its stack again in every call. When all are busy a call gets
// a goroutine of its own.
var workers struct {
	once sync.Once
	ch   chan func()
}

func run(f func()) {
	workers.once.Do(func() {
		workers.ch = make(chan func())
		for range limits.RPCStreamWorkers {
			go func() {
				for f := range workers.ch {
					f()
				}
			}()
		}
	})
	select {
	case workers.ch <- f:
	default:
		go f()
	}
}

// handlerContext is the context of a handler called by ctx's caller: the
// caller's deadline and cancellation, the server's lifetime, incoming
// metadata and a peer, none of the caller's values.
func (s *Server) handlerContext(ctx context.Context) (context.Context, context.CancelFunc) {
	var hctx context.Context
	var cancel context.CancelFunc
	if d, ok := ctx.Deadline(); ok {
		hctx, cancel = context.WithDeadline(s.ctx, d)
	} else {
		hctx, cancel = context.WithCancel(s.ctx)
	}
	stop := context.AfterFunc(ctx, cancel)
	if md, ok := metadata.FromOutgoingContext(ctx); ok { // a copy already
		hctx = metadata.NewIncomingContext(hctx, md)
	}
	p := &peer.Peer{Addr: addr(s.addr), LocalAddr: addr(s.addr)}
	if s.auth != nil {
		if info, err := s.auth(); err == nil {
			p.AuthInfo = info
		}
		// An identity that does not verify gives no credentials: the
		// authorization interceptor refuses the call and says why.
	}
	return peer.NewContext(hctx, p), func() { stop(); cancel() }
}

// statusErr is err as a remote caller gets it, converted as gRPC's server
// converts a handler's error: a status as is, a context error as its
// code, any other error as Unknown with its message.
func statusErr(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.FromContextError(err).Err()
}

// copyReply copies the handler's reply into the caller's.
func copyReply(method string, dst, src any) error {
	m, ok := src.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "inproc: %s: reply %T is not a proto message", method, src)
	}
	switch d := dst.(type) {
	case *rpcbuf.Into:
		return d.From(m)
	case proto.Message:
		proto.Reset(d)
		proto.Merge(d, m)
		return nil
	}
	return status.Errorf(codes.Internal, "inproc: %s: cannot copy a reply into %T", method, dst)
}

// chain composes interceptors into one (nil for none), the first outermost.
func chain(ics []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	switch len(ics) {
	case 0:
		return nil
	case 1:
		return ics[0]
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return ics[0](ctx, req, info, handlerChain(ics[1:], info, h))
	}
}

func handlerChain(ics []grpc.UnaryServerInterceptor, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) grpc.UnaryHandler {
	if len(ics) == 0 {
		return h
	}
	return func(ctx context.Context, req any) (any, error) {
		return ics[0](ctx, req, info, handlerChain(ics[1:], info, h))
	}
}

// addr is a server's address as a peer's.
type addr string

func (a addr) Network() string { return "inproc" }
func (a addr) String() string  { return string(a) }

var _ net.Addr = addr("")
