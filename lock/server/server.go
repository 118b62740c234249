// Package server is the lock server role: the I/O loop around a
// lock.Server. It serves one gRPC stream per clerk session (lockpb.Lock),
// ticks the core on a wall-clock ticker, dispatches the core's messages to
// the clerks' streams and its actions to the Coordinator, and exports the
// core's counters to Prometheus. The lock semantics (leases, revokes,
// recovery, rebuilds) are all in package lock.
//
// Concurrency: one goroutine, the loop in Run, makes every call into the
// core. Stream readers decode frames and hand them to the loop through a
// bounded channel (a slow loop pushes back on clerks through gRPC flow
// control); stream writers take the loop's messages from a bounded outbox
// per stream (when it is full, messages are dropped: the protocol resends
// what matters). Coordinator calls run on their own goroutines, one per
// distinct action in flight.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pki"
	"github.com/plumeria-fs/plumeria/internal/rpcbuf"
	"github.com/plumeria-fs/plumeria/lock"
	"github.com/plumeria-fs/plumeria/lock/lockpb"
)

// Defaults for zero Config fields. Clerks must use the same tick and lease
// (clerk.TickDefault, clerk.LeaseTicksDefault).
const (
	TickDefault       = 100 * time.Millisecond
	LeaseTicksDefault = 150 // 15 s at TickDefault
	RetryTicksDefault = 5
)

// Limits of the I/O layer.
const (
	// OutboxMessagesMax bounds the messages queued for one clerk stream;
	// more are dropped (and counted).
	OutboxMessagesMax = 1 << 16
	// InboxFramesMax bounds the decoded frames waiting for the loop.
	InboxFramesMax = 256
	// actionTimeout bounds one coordinator call; the core repeats actions.
	actionTimeout = 30 * time.Second
)

// Config configures a Server.
type Config struct {
	ID          string      // names the server in logs and metrics (label "server")
	Coordinator Coordinator // required
	Groups      int         // lock groups in the cluster; every node agrees
	// Tick is the length of one core tick; the clerks use the same.
	Tick              time.Duration
	LeaseTicks        int // 0: LeaseTicksDefault
	RetryTicks        int // 0: RetryTicksDefault
	RebuildGraceTicks int // see lock.Config; 0 is right when the coordinator sends a registry
	// Registerer receives the metrics; nil means prometheus.DefaultRegisterer.
	Registerer prometheus.Registerer
	Logger     *slog.Logger // nil: discard
}

// Server is a lock server. Register it on a gRPC server, then Run it.
type Server struct {
	lockpb.UnimplementedLockServer

	cfg     Config
	log     *slog.Logger
	core    *lock.Server // owned by Run's goroutine
	inbox   chan input
	stopped chan struct{} // closed when Run returns
	running atomic.Bool
	stats   *stats
}

// input is what a stream reader hands the loop.
type input struct {
	link   *link
	msgs   []lock.Message
	unbind bool // the stream ended
}

type sessionKey struct {
	id      string
	session uint64
}

// New returns a server. Errors: lock.ErrConfig for a bad configuration.
func New(cfg Config) (*Server, error) {
	if cfg.Tick == 0 {
		cfg.Tick = TickDefault
	}
	if cfg.LeaseTicks == 0 {
		cfg.LeaseTicks = LeaseTicksDefault
	}
	if cfg.RetryTicks == 0 {
		cfg.RetryTicks = RetryTicksDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.DefaultRegisterer
	}
	switch {
	case cfg.Coordinator == nil:
		return nil, fmt.Errorf("%w: no coordinator", lock.ErrConfig)
	case cfg.Tick < time.Millisecond:
		return nil, fmt.Errorf("%w: tick %v < 1ms", lock.ErrConfig, cfg.Tick)
	}
	core, err := lock.NewServer(lock.Config{Groups: cfg.Groups, LeaseTicks: cfg.LeaseTicks,
		RetryTicks: cfg.RetryTicks, RebuildGraceTicks: cfg.RebuildGraceTicks})
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger.With("lockserver", cfg.ID),
		core:    core,
		inbox:   make(chan input, InboxFramesMax),
		stopped: make(chan struct{}),
		stats:   newStats(cfg.ID, cfg.Tick),
	}
	if err := s.stats.register(cfg.Registerer); err != nil {
		return nil, err
	}
	return s, nil
}

// Register adds the lock service to gs.
func (s *Server) Register(gs *grpc.Server) { lockpb.RegisterLockServer(gs, s) }

// Metrics returns the core's counters as of the loop's last iteration.
func (s *Server) Metrics() lock.Metrics { return s.stats.core() }

// Serve registers the service on a new gRPC server with Plumeria's message
// limits, serves lis and runs the server until ctx ends or Run fails; then
// it stops the gRPC server (dropping every connection) and returns Run's
// error. For processes and tests that run a lock server alone.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	// Mutual TLS and the role table with the process's identity; nil:
	// plaintext.
	gs := grpc.NewServer(append(pki.ServerOptions(pki.Default()), grpc.MaxRecvMsgSize(limits.RPCMessageBytesMax), grpc.MaxSendMsgSize(limits.RPCMessageBytesMax), rpcbuf.ServerOption())...)
	s.Register(gs)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	err := s.Run(ctx)
	gs.Stop()
	if serr := <-served; serr != nil && !errors.Is(serr, grpc.ErrServerStopped) && err == nil {
		err = serr
	}
	return err
}

// Run drives the core until ctx ends (it then returns ctx.Err()) or the
// coordinator's event stream ends (ErrCoordinatorLost). It returns only
// after its goroutines have exited and the coordinator closed the event
// channel. Streams still open get Unavailable at their next frame (Serve
// closes them at once). A Server runs once.
func (s *Server) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("lock server: Run called twice")
	}
	defer close(s.stopped)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, err := s.cfg.Coordinator.Events(ctx)
	if err != nil {
		return fmt.Errorf("lock server %s: subscribe to coordinator: %w", s.cfg.ID, err)
	}
	var wg sync.WaitGroup // coordinator calls
	defer func() {
		cancel()
		wg.Wait()
		for range events { // the subscription is over once the coordinator closes it
		}
	}()
	l := loop{Server: s, ctx: ctx, wg: &wg, links: map[sessionKey]*link{},
		inflight: map[lock.Action]bool{}, done: make(chan lock.Action)}
	return l.run(events)
}

// loop is the state of Run's goroutine.
type loop struct {
	*Server
	ctx      context.Context
	wg       *sync.WaitGroup
	links    map[sessionKey]*link // the newest stream of each clerk session
	inflight map[lock.Action]bool // coordinator calls running
	done     chan lock.Action     // coordinator calls that finished
	epoch    uint64               // of the last AssignGroups stepped
}

func (l *loop) run(events <-chan lock.Message) error {
	tick := time.NewTicker(l.cfg.Tick)
	defer tick.Stop()
	start, ticked := time.Now(), int64(0)
	for {
		select {
		case <-l.ctx.Done():
			return l.ctx.Err()
		case m, ok := <-events:
			if !ok {
				if l.ctx.Err() != nil {
					return l.ctx.Err() // closed because we are stopping
				}
				l.log.Warn("coordinator event stream ended; serving nothing more")
				return ErrCoordinatorLost
			}
			l.event(m)
		case in := <-l.inbox:
			l.input(in)
			for n := 1; n < InboxFramesMax; n++ { // take what else waits, then dispatch once
				select {
				case in := <-l.inbox:
					l.input(in)
					continue
				default:
				}
				break
			}
		case <-tick.C:
			due := int64(time.Since(start) / l.cfg.Tick)
			for n := ticksToRun(due - ticked); n > 0; n-- {
				l.core.Tick()
			}
			ticked = due
		case a := <-l.done:
			delete(l.inflight, a)
		}
		l.dispatch()
		l.stats.setCore(l.core.Metrics())
	}
}

func (l *loop) event(m lock.Message) {
	if a, ok := m.(lock.AssignGroups); ok && a.Epoch >= l.epoch {
		l.epoch = a.Epoch
		l.stats.groups.Store(int64(len(a.Groups)))
		l.log.Debug("assigned groups", "epoch", a.Epoch, "groups", len(a.Groups))
	}
	if err := l.core.Step(m); err != nil {
		l.log.Error("coordinator event refused", "event", fmt.Sprintf("%T", m), "err", err)
	}
}

func (l *loop) input(in input) {
	switch cur := l.links[in.link.key]; {
	case in.unbind:
		if cur == in.link {
			delete(l.links, in.link.key)
			l.stats.streams.Add(-1)
		}
		return
	case cur == nil:
		l.stats.streams.Add(1)
		l.links[in.link.key] = in.link
	case cur.seq < in.link.seq:
		l.links[in.link.key] = in.link // a reconnected clerk: its newest stream wins
	}
	for _, m := range in.msgs {
		if err := l.core.Step(m); err != nil {
			l.log.Warn("clerk message refused", "clerk", in.link.key.id, "session", in.link.key.session,
				"msg", fmt.Sprintf("%T", m), "err", err)
		}
	}
}

// dispatch carries out the core's Ready: messages to the clerk sessions'
// streams, actions to the coordinator.
func (l *loop) dispatch() {
	if !l.core.HasReady() {
		return
	}
	rd := l.core.Ready()
	l.core.Advance(rd)
	for _, m := range rd.Messages {
		id, sn := lock.ClerkOf(m)
		if ln := l.links[sessionKey{id, sn}]; ln == nil || !ln.enqueue(m) {
			l.stats.dropped.Add(1) // no stream, or a full outbox: the protocol resends
		}
	}
	for _, a := range rd.Actions {
		if l.inflight[a] {
			continue // the core repeats actions until they take effect
		}
		l.inflight[a] = true
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.act(a)
			select {
			case l.done <- a:
			case <-l.ctx.Done():
			}
		}()
	}
}

// act calls the coordinator for one action. Failures are logged: the core
// asks again.
func (l *loop) act(a lock.Action) {
	ctx, cancel := context.WithTimeout(l.ctx, actionTimeout)
	defer cancel()
	var err error
	switch a := a.(type) {
	case lock.FenceRequest:
		l.log.Info("fencing expired clerk session", "clerk", a.Clerk, "session", a.Session)
		err = l.cfg.Coordinator.Fence(ctx, a.Clerk, a.Session)
	case lock.RecordRecovered:
		l.log.Info("recording recovery", "clerk", a.Clerk, "session", a.Session, "table", a.Table)
		err = l.cfg.Coordinator.RecordRecovered(ctx, a.Clerk, a.Session, a.Table)
	default:
		err = fmt.Errorf("unknown action %T", a)
	}
	if err != nil && l.ctx.Err() == nil {
		l.log.Warn("coordinator action failed; will retry", "action", fmt.Sprintf("%+v", a), "err", err)
	}
}

// Session serves one clerk session's stream (lockpb.LockServer). The first
// frame names the session; every later frame must name the same one.
func (s *Server) Session(stream lockpb.Lock_SessionServer) error {
	ctx := stream.Context()
	f, err := stream.Recv()
	if err != nil {
		return err
	}
	id, sn, msgs, err := lockpb.DecodeClerk(f)
	if err != nil {
		s.stats.malformed.Add(1)
		return status.Error(codes.InvalidArgument, err.Error())
	}
	ln := newLink(sessionKey{id, sn})
	if err := s.submit(ctx, input{link: ln, msgs: msgs}); err != nil {
		return err
	}
	quit := make(chan struct{})
	wrote := make(chan error, 1)
	go func() { wrote <- ln.write(stream, quit) }()
	err = s.read(ctx, stream, ln)
	close(quit)
	if werr := <-wrote; err == nil {
		err = werr
	}
	select { // the loop must forget this stream; it drains the inbox until it stops
	case s.inbox <- input{link: ln, unbind: true}:
	case <-s.stopped:
	}
	return err
}

// read hands the stream's frames to the loop until the stream or the
// server ends.
func (s *Server) read(ctx context.Context, stream lockpb.Lock_SessionServer, ln *link) error {
	for {
		f, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		id, sn, msgs, err := lockpb.DecodeClerk(f)
		if err != nil {
			s.stats.malformed.Add(1)
			return status.Error(codes.InvalidArgument, err.Error())
		}
		if (sessionKey{id, sn}) != ln.key {
			s.stats.malformed.Add(1)
			return status.Errorf(codes.InvalidArgument, "frame of %s/%d on the stream of %s/%d",
				id, sn, ln.key.id, ln.key.session)
		}
		if err := s.submit(ctx, input{link: ln, msgs: msgs}); err != nil {
			return err
		}
	}
}

func (s *Server) submit(ctx context.Context, in input) error {
	select {
	case s.inbox <- in:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stopped:
		return status.Error(codes.Unavailable, "lock server stopped")
	}
}

// ticksToRun is how many ticks the core gets when elapsed tick intervals
// passed since the last ones it got. A late timer (a busy loop) is caught
// up; a longer gap is a pause of this process (SIGSTOP, a VM freeze) and
// counts as one tick. Catching a pause up would expire, at once, every
// session whose renewals still sit unread in the inbox and the sockets,
// and fence clerks that are alive; and the coordinator may have given this
// server's groups to another meanwhile, which the event stream is about to
// say. Fewer ticks only make the server slower to expire leases: the safe
// side, since a clerk stops using its locks by its own clock.
func ticksToRun(elapsed int64) int64 {
	if elapsed > pauseTicks {
		return 1
	}
	return max(elapsed, 0)
}

// pauseTicks is the longest gap between ticks that is caught up (2 s at
// TickDefault: far above a late timer, far below a lease).
const pauseTicks = 20
