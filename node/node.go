// Package node wires the roles of one Plumeria server process together:
// one TCP port shared by gRPC and Raft, a coordinator and/or a brick, and
// an optional HTTP port for /metrics (and, on a coordinator, the dashboard).
// `plumeria server` and `plumeria up` both use it.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/plumeria-fs/plumeria/brick"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coord"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/inproc"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/netmux"
	"github.com/plumeria-fs/plumeria/internal/pki"
	"github.com/plumeria-fs/plumeria/internal/reqid"
	"github.com/plumeria-fs/plumeria/internal/rpcbuf"
	"github.com/plumeria-fs/plumeria/lock/lockpb"
)

// Config is one process's roles and addresses.
type Config struct {
	Name          string
	Listen        string // HOST:PORT for gRPC and Raft
	Advertise     string // address others use; default Listen
	DataDir       string
	Coordinator   bool
	Brick         bool
	Lock          bool
	Join          []string // coordinators to join (coordinator role)
	Coord         []string // coordinators to use (brick role); default Join, plus self
	Domain        map[string]string
	CapacityBytes int64
	Class         string // brick storage class; "" is clustermap.ClassDefault
	MetricsListen string // empty: no metrics endpoint
	// MetricsInsecure serves the HTTP port over TLS without asking for a
	// client certificate (when the process has an identity; see
	// node/http.go).
	MetricsInsecure bool
	// CA lets the coordinator role issue certificates (join tokens,
	// renewals; coord/security.go), CertLifetime their lifetime (0: a
	// year). nil: it refuses to.
	CA           *pki.CA
	CertLifetime time.Duration
	Tokens       []clustermap.JoinToken // coord.Config.Tokens
	Logger       *slog.Logger
}

// Node is a running server process.
type Node struct {
	cfg      Config
	mux      *netmux.Mux
	gs       *grpc.Server
	direct   *inproc.Server // the same services, called directly by this process
	coord    *coord.Server
	brick    *brick.Server
	lock     *lockRole
	fatal    chan error // a role that cannot go on
	stopLock context.CancelFunc
	cc       *coordclient.Client
	// The snapshot schedules (schedule.go) of a coordinator process, with
	// a client of its own when the process has no other role.
	stopSchedules context.CancelFunc
	ownCC         *coordclient.Client
	http          *httpServer // nil: no HTTP port (node/http.go)
}

// Start brings the roles up. It returns once the brick (if any) has
// registered with the coordinator, or ctx ends.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if !cfg.Coordinator && !cfg.Brick && !cfg.Lock {
		return nil, errors.New("server: give at least one role: --coordinator, --brick and/or --lock")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Logger = reqid.Logger(cfg.Logger) // records logged with a request's ctx carry req=<id>
	// Mutual TLS with the process's identity (pki.Default), or plaintext
	// when it runs insecure: the mux terminates TLS for gRPC and Raft.
	id := pki.Default()
	mux, err := netmux.Listen(cfg.Listen, id)
	if err != nil {
		return nil, fmt.Errorf("server: listen on %s: %w", cfg.Listen, err)
	}
	mux.SetLogger(cfg.Logger)
	if cfg.Advertise == "" {
		cfg.Advertise = mux.Addr().String()
	}
	n := &Node{cfg: cfg, mux: mux, fatal: make(chan error, 1)}
	n.gs = grpc.NewServer(append(append(pki.HandshakedServerOptions(id), reqid.ServerOptions(cfg.Logger)...), grpc.MaxRecvMsgSize(limits.RPCMessageBytesMax), grpc.MaxSendMsgSize(limits.RPCMessageBytesMax),
		grpc.InitialWindowSize(limits.RPCStreamWindowBytes), grpc.InitialConnWindowSize(limits.RPCConnWindowBytes),
		grpc.MaxConcurrentStreams(limits.RPCStreamsPerConnMax), rpcbuf.ServerOption(),
		// Requests served by goroutines that keep their grown stacks (a
		// new goroutine per request grew its stack in every chunk request:
		// 6% of the CPU of random 4 KiB writes, session 13). When all are
		// busy a request gets a goroutine of its own, as before.
		grpc.NumStreamWorkers(limits.RPCStreamWorkers))...)
	// The same services as direct calls for this process's own clients
	// (internal/inproc), with the same interceptors.
	var unary []grpc.UnaryServerInterceptor
	var auth func() (credentials.AuthInfo, error)
	if id != nil {
		unary, auth = append(unary, pki.UnaryServerInterceptor), id.LocalAuthInfo
	}
	n.direct = inproc.NewServer(auth, append(unary, reqid.UnaryServerInterceptor(cfg.Logger))...)
	reg := registrars{n.gs, n.direct}
	fail := func(err error) (*Node, error) { n.Stop(); return nil, err }
	if cfg.Coordinator {
		n.coord, err = coord.Start(coord.Config{Name: cfg.Name, Addr: cfg.Advertise, DataDir: filepath.Join(cfg.DataDir, "coordinator"),
			Join: cfg.Join, Logger: cfg.Logger, CA: cfg.CA, CertLifetime: cfg.CertLifetime, Tokens: cfg.Tokens}, mux.Raft(), reg)
		if err != nil {
			return fail(err)
		}
	}
	if cfg.Brick || cfg.Lock {
		addrs := cfg.Coord
		if len(addrs) == 0 {
			addrs = cfg.Join
		}
		if cfg.Coordinator {
			addrs = append([]string{cfg.Advertise}, addrs...)
		}
		if len(addrs) == 0 {
			return fail(errors.New("server: a brick or lock server needs --coord ADDR (or --coordinator in the same process)"))
		}
		if n.cc, err = coordclient.New(addrs...); err != nil {
			return fail(err)
		}
	}
	if cfg.Lock {
		if n.lock, err = newLockRole(cfg.Name, cfg.Advertise, n.cc, cfg.Logger); err != nil {
			return fail(err)
		}
		lockpb.RegisterLockServer(reg, n.lock)
	}
	if cfg.Brick {
		n.brick, err = brick.New(brick.Config{Name: cfg.Name, Addr: cfg.Advertise, DataDir: filepath.Join(cfg.DataDir, "brick"),
			Domain: cfg.Domain, CapacityBytes: cfg.CapacityBytes, Class: cfg.Class, Coord: n.cc, Logger: cfg.Logger}, reg)
		if err != nil {
			return fail(err)
		}
	}
	go n.gs.Serve(mux.GRPC())
	if err := n.direct.Serve(mux.Addr().String()); err != nil {
		return fail(err)
	}
	if err := n.startHTTP(); err != nil {
		return fail(err)
	}
	if n.brick != nil {
		if err := n.brick.Run(ctx); err != nil {
			return fail(err)
		}
	}
	if n.lock != nil {
		lctx, cancel := context.WithCancel(context.Background())
		n.stopLock = cancel
		go n.lock.run(lctx)
	}
	if n.coord != nil {
		cc := n.cc
		if cc == nil {
			if cc, err = coordclient.New(cfg.Advertise); err != nil {
				return fail(err)
			}
			n.ownCC = cc
		}
		sctx, cancel := context.WithCancel(context.Background())
		n.stopSchedules = cancel
		go n.runSchedules(sctx, cc, cfg.Logger)
	}
	return n, nil
}

// Fatal delivers an error when a role can no longer serve.
func (n *Node) Fatal() <-chan error { return n.fatal }

// Addr is the address the node advertises.
func (n *Node) Addr() string { return n.cfg.Advertise }

// Coordinator returns the coordinator role, or nil.
func (n *Node) Coordinator() *coord.Server { return n.coord }

// Brick returns the brick role, or nil.
func (n *Node) Brick() *brick.Server { return n.brick }

// Stop stops every role and closes the port.
func (n *Node) Stop() {
	if n.http != nil {
		n.http.Close()
	}
	if n.stopLock != nil {
		n.stopLock()
	}
	if n.stopSchedules != nil {
		n.stopSchedules()
	}
	if n.direct != nil {
		n.direct.Stop()
	}
	if n.gs != nil {
		n.gs.Stop()
	}
	if n.brick != nil {
		n.brick.Stop()
	}
	if n.coord != nil {
		n.coord.Stop()
	}
	if n.cc != nil {
		n.cc.Close()
	}
	if n.ownCC != nil {
		n.ownCC.Close()
	}
	n.mux.Close()
}

// registrars registers a service on each of them.
type registrars []grpc.ServiceRegistrar

func (rs registrars) RegisterService(sd *grpc.ServiceDesc, impl any) {
	for _, r := range rs {
		r.RegisterService(sd, impl)
	}
}
