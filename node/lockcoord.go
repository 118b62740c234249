package node

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/lock"
	lockserver "github.com/plumeria-fs/plumeria/lock/server"
)

// lockCoord is the lock server's view of the Raft coordinator
// (lockserver.Coordinator). It registers the server (so every group it owns
// gets an epoch it never saw), heartbeats, and turns map changes into the
// core's events: AssignGroups when the owned groups change, FenceDone when
// a fence comes in force, Recovered when a recovery is recorded. It closes
// the event channel once no heartbeat succeeded for a lease, before the
// coordinator (which waits longer) gives the groups to another server.
type lockCoord struct {
	name, addr string
	cc         *coordclient.Client
	lease      time.Duration
	log        *slog.Logger
	inject     chan lock.Message // events for this server only (re-sent FenceDone, ...)
}

var _ lockserver.Coordinator = (*lockCoord)(nil)

func newLockCoord(name, addr string, cc *coordclient.Client, log *slog.Logger) *lockCoord {
	return &lockCoord{name: name, addr: addr, cc: cc, lease: limits.BrickLease, log: log, inject: make(chan lock.Message, 64)}
}

func (c *lockCoord) Events(ctx context.Context) (<-chan lock.Message, error) {
	var m *clustermap.Map
	err := c.cc.Call(ctx, func(ctx context.Context, cl pb.CoordinatorClient) error {
		r, err := cl.RegisterLockServer(ctx, &pb.RegisterLockServerRequest{Name: c.name, Addr: c.addr})
		if err != nil {
			return err
		}
		m, err = coordclient.DecodeMap(r.MapJson)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("register lock server %s: %w", c.name, err)
	}
	out := make(chan lock.Message) // unbuffered: a heartbeat reports an epoch only after the core took its events
	w := &mapWatch{c: c, out: out, fenced: map[string]uint64{}, recovered: map[clustermap.RecoveredLog]bool{}}
	for _, r := range m.Recovered {
		w.recovered[r] = true // history: the registry already left them out
	}
	go w.run(ctx, m)
	return out, nil
}

// mapWatch derives one server's events from successive maps.
type mapWatch struct {
	c         *lockCoord
	out       chan lock.Message
	owned     []clustermap.LockGroup // as last announced, by group index ("" = not ours)
	fenced    map[string]uint64
	recovered map[clustermap.RecoveredLog]bool
}

func (w *mapWatch) run(ctx context.Context, m *clustermap.Map) {
	defer close(w.out)
	if !w.process(ctx, m, true) {
		return
	}
	lastOK := time.Now()
	t := time.NewTicker(limits.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case msg := <-w.c.inject:
			if !w.send(ctx, msg) {
				return
			}
			continue
		case <-t.C:
		}
		sent := time.Now()
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		var resp *pb.HeartbeatResponse
		err := w.c.cc.Call(hctx, func(ctx context.Context, cl pb.CoordinatorClient) error {
			var err error
			resp, err = cl.Heartbeat(ctx, &pb.HeartbeatRequest{Name: w.c.name, Kind: pb.HeartbeatRequest_LOCK_SERVER, MapEpoch: m.Epoch, Addr: w.c.addr})
			return err
		})
		cancel()
		if err != nil {
			if time.Since(lastOK) > w.c.lease {
				w.c.log.Error("lock server lost its coordinator; it stops serving", "err", err)
				return
			}
			continue
		}
		lastOK = sent
		if len(resp.MapJson) == 0 {
			continue
		}
		n, err := coordclient.DecodeMap(resp.MapJson)
		if err != nil {
			w.c.log.Error("bad map from coordinator", "err", err)
			continue
		}
		if n.Epoch > m.Epoch {
			m = n
			if !w.process(ctx, m, false) {
				return
			}
		}
	}
}

func (w *mapWatch) send(ctx context.Context, msg lock.Message) bool {
	select {
	case w.out <- msg:
		return true
	case <-ctx.Done():
		return false
	}
}

// process emits the events m implies for this server.
func (w *mapWatch) process(ctx context.Context, m *clustermap.Map, first bool) bool {
	owned := make([]clustermap.LockGroup, len(m.LockGroups))
	var groups []int
	for i, g := range m.LockGroups {
		if g.Server == w.c.name {
			owned[i] = g
			groups = append(groups, i)
		}
	}
	if first || !slices.Equal(owned, w.owned) {
		w.owned = owned
		a := lock.AssignGroups{Epoch: m.Epoch, Groups: groups}
		for clerk, e := range m.FencesInForce {
			a.Fences = append(a.Fences, fenceDone(m, clerk, e))
			w.fenced[clerk] = e
		}
		for _, s := range m.Sessions {
			a.Sessions = append(a.Sessions, lock.Registered{Clerk: s.Clerk, Session: s.Session, Tables: slices.Clone(s.Tables)})
		}
		if !w.send(ctx, a) {
			return false
		}
	}
	for clerk, e := range m.FencesInForce {
		if e > w.fenced[clerk] {
			w.fenced[clerk] = e
			if !w.send(ctx, fenceDone(m, clerk, e)) {
				return false
			}
		}
	}
	for _, r := range m.Recovered {
		if !w.recovered[r] {
			w.recovered[r] = true
			if !w.send(ctx, lock.Recovered{Clerk: r.Clerk, Session: r.Session, Table: r.Table}) {
				return false
			}
		}
	}
	return true
}

// fenceDone says the sessions of clerk below the fence epoch are fenced,
// with the tables the registry still holds for them.
func fenceDone(m *clustermap.Map, clerk string, epoch uint64) lock.FenceDone {
	f := lock.FenceDone{Clerk: clerk, Session: epoch - 1}
	for _, s := range m.Sessions {
		if s.Clerk == clerk && s.Session < epoch {
			for _, t := range s.Tables {
				if !slices.Contains(f.Tables, t) {
					f.Tables = append(f.Tables, t)
				}
			}
		}
	}
	return f
}

func (c *lockCoord) Fence(ctx context.Context, clerk string, session uint64) error {
	var m *clustermap.Map
	err := c.cc.Call(ctx, func(ctx context.Context, cl pb.CoordinatorClient) error {
		if _, err := cl.Fence(ctx, &pb.FenceRequest{Writer: clerk, Epoch: session + 1}); err != nil {
			return err
		}
		r, err := cl.GetMap(ctx, &pb.GetMapRequest{})
		if err != nil {
			return err
		}
		m, err = coordclient.DecodeMap(r.MapJson)
		return err
	})
	if err != nil {
		return fmt.Errorf("fence %s session %d: %w", clerk, session, err)
	}
	// Already fenced at least that far: no map change will say so again.
	e := m.FencesInForce[clerk]
	if e <= session {
		return fmt.Errorf("fence %s session %d: coordinator reports the fence in force only at %d", clerk, session, e)
	}
	select {
	case c.inject <- fenceDone(m, clerk, e):
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (c *lockCoord) RecordRecovered(ctx context.Context, clerk string, session uint64, table string) error {
	err := c.cc.Call(ctx, func(ctx context.Context, cl pb.CoordinatorClient) error {
		_, err := cl.RecordRecovered(ctx, &pb.RecordRecoveredRequest{Clerk: clerk, Session: session, Table: table})
		return err
	})
	if err != nil {
		return fmt.Errorf("record recovery of %s session %d in %s: %w", clerk, session, table, err)
	}
	select {
	case c.inject <- lock.Recovered{Clerk: clerk, Session: session, Table: table}:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}
