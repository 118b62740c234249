package node

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/lock/lockpb"
	lockserver "github.com/plumeria-fs/plumeria/lock/server"
)

// lockRole runs the lock server role, again and again: a lock server stops
// serving when no heartbeat reached the coordinator for a lease (before
// the coordinator may give its groups to another server), and a server
// runs once. So the role starts a new incarnation, which registers again
// and gets fresh group epochs; clerks reconnect to it and it rebuilds the
// groups it is given from what they hold. The gRPC service forwards to
// the current incarnation.
type lockRole struct {
	lockpb.UnimplementedLockServer
	name, addr string
	cc         *coordclient.Client
	log        *slog.Logger
	cur        atomic.Pointer[lockserver.Server]
	coord      func() lockserver.Coordinator // each incarnation's view of the coordinator
}

// lockRetryMin and lockRetryMax bound the wait before a new incarnation.
const (
	lockRetryMin = 500 * time.Millisecond
	lockRetryMax = 10 * time.Second
)

func newLockRole(name, addr string, cc *coordclient.Client, log *slog.Logger) (*lockRole, error) {
	r := &lockRole{name: name, addr: addr, cc: cc, log: log}
	r.coord = func() lockserver.Coordinator { return newLockCoord(name, addr, cc, log) }
	return r, r.start()
}

// start makes the first incarnation.
func (r *lockRole) start() error {
	s, err := r.incarnation()
	if err != nil {
		return err
	}
	r.cur.Store(s)
	return nil
}

func (r *lockRole) incarnation() (*lockserver.Server, error) {
	return lockserver.New(lockserver.Config{ID: r.name, Groups: clustermap.LockGroupsN, Logger: r.log,
		Coordinator: r.coord()})
}

// Session serves a clerk's stream on the current incarnation.
func (r *lockRole) Session(stream lockpb.Lock_SessionServer) error {
	s := r.cur.Load()
	if s == nil {
		return status.Error(codes.Unavailable, "lock server "+r.name+" is restarting")
	}
	return s.Session(stream)
}

// run serves until ctx ends.
func (r *lockRole) run(ctx context.Context) {
	wait := lockRetryMin
	for {
		start := time.Now()
		err := r.cur.Load().Run(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > lockRetryMax {
			wait = lockRetryMin // it served a while: this is a new outage
		}
		r.log.Warn("lock server stopped serving; starting a new incarnation", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, lockRetryMax)
		s, err := r.incarnation()
		if err != nil {
			r.log.Error("lock server: new incarnation", "err", err)
			continue // Run of the stopped one returns at once; retried after the wait
		}
		r.cur.Store(s)
	}
}
