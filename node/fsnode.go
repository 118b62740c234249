package node

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/lock"
	lockclerk "github.com/plumeria-fs/plumeria/lock/clerk"
	"github.com/plumeria-fs/plumeria/volume"
)

// FSNode is one fs node's file system with what it stands on: a lock
// session (fencing the node's earlier sessions), the volume opened with
// the node's writer id, and the clerk routing revokes and recoveries to
// the file system.
type FSNode struct {
	FS      *filesys.FS
	ID      string
	Volume  string
	Session uint64
	vol     *volume.Volume
	cc      *coordclient.Client
	log     *slog.Logger
	clerk   *lockclerk.Clerk
	stop    context.CancelFunc
	done    chan struct{}
	failed  chan struct{} // closed when the file system stopped (endSession)
}

// Failed is closed when the node's file system stopped for good (a lost
// lease, a failed log or volume write): every call fails from then on,
// and only a new node (a remount) serves the volume again.
func (n *FSNode) Failed() <-chan struct{} { return n.failed }

// FSNodeOptions configures MountFS.
type FSNodeOptions struct {
	FlushInterval time.Duration
	// DataCacheBytes bounds the node's cache of clean file data
	// (filesys.Config.DataCacheBytes: 0 the default, below 0 none).
	DataCacheBytes int64
	// StreamReads: the node serves a FUSE mount, whose kernel caches
	// pages itself (filesys.Config.StreamReads).
	StreamReads bool
	Logger      *slog.Logger
	// Registerer receives the metrics of the volume client, the lock
	// clerk and the file system; nil means prometheus.DefaultRegisterer,
	// which the process's /metrics serves.
	Registerer prometheus.Registerer
	// CleanInterval: filesys.Config.CleanInterval (below 0: no cleaner
	// passes of its own).
	CleanInterval time.Duration
	// MoveInterval and MoveQuiet: filesys.Config's (the mover of
	// availability policies: 0 the defaults; MoveInterval below 0 no
	// periodic passes, MoveQuiet below 0 no wait).
	MoveInterval, MoveQuiet time.Duration
}

// MountFS starts an fs node of volume name as clerk id.
func MountFS(ctx context.Context, cc *coordclient.Client, name, id string, opts FSNodeOptions) (*FSNode, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	session, err := openSession(ctx, cc, id, name)
	if err != nil {
		return nil, err
	}
	vol, err := volume.Open(ctx, cc, name, volume.Options{Writer: id, Registerer: opts.Registerer})
	if err != nil {
		return nil, fmt.Errorf("open volume %s: %w", name, err)
	}
	n := &FSNode{ID: id, Volume: name, Session: session, vol: vol, cc: cc, log: log, done: make(chan struct{}), failed: make(chan struct{})}
	ready := make(chan struct{})
	runCtx, stop := context.WithCancel(context.Background())
	n.stop = stop
	fsys := func() *filesys.FS {
		select {
		case <-ready:
			return n.FS
		case <-runCtx.Done():
			return nil
		}
	}
	n.clerk, err = lockclerk.New(lockclerk.Config{ID: id, Session: session, Groups: clustermap.LockGroupsN,
		Servers: NewLockResolver(cc), Logger: log, Registerer: opts.Registerer,
		OnRevoke: func(table string, l uint64, to lock.Mode) error {
			if f := fsys(); f != nil {
				return f.Revoke(runCtx, table, l, to)
			}
			return nil
		},
		OnRecover: func(table, dead string, s uint64) error {
			// Not through n.FS: recovery must not wait for this node's
			// mount, which may wait for the dead node's locks.
			err := filesys.RecoverLog(runCtx, NewFSDevice(vol), dead, s, filesys.RecoverOptions{Logger: log, Volume: table, Registerer: opts.Registerer})
			if err == nil {
				// The dead node's orphans are freed once its locks are
				// released, which follows this callback.
				go func() {
					if f := fsys(); f != nil {
						f.KickJanitor()
					}
				}()
			}
			return err
		},
		OnLeaseLost: func() {
			if f := fsys(); f != nil {
				f.LeaseLost()
			}
		},
	})
	if err != nil {
		stop()
		vol.Close()
		return nil, err
	}
	go func() {
		defer close(n.done)
		n.clerk.Run(runCtx)
	}()
	fail := func(err error) (*FSNode, error) {
		stop()
		<-n.done
		vol.Close()
		return nil, err
	}
	if err := n.clerk.Open(name); err != nil {
		return fail(err)
	}
	n.FS, err = filesys.Open(ctx, filesys.Config{Dev: NewFSDevice(vol), Locker: n.clerk, Table: name, ID: id, Session: session,
		FlushInterval: opts.FlushInterval, DataCacheBytes: opts.DataCacheBytes, StreamReads: opts.StreamReads, Logger: log, Capacity: capacityOf(cc, name), Registerer: opts.Registerer,
		OnFail: n.endSession, CleanInterval: opts.CleanInterval,
		Policies: NewPolicyDevice(vol, cc, name), MoveInterval: opts.MoveInterval, MoveQuiet: opts.MoveQuiet})
	if err != nil {
		return fail(fmt.Errorf("mount volume %s: %w", name, err))
	}
	close(ready)
	return n, nil
}

// capacityOf reports the volume's share of the cluster: the bricks' total
// capacity divided by the replica count. Used bytes are not tracked yet,
// so free is reported as the whole capacity.
func capacityOf(cc *coordclient.Client, name string) func(ctx context.Context) (uint64, uint64, error) {
	return func(ctx context.Context) (uint64, uint64, error) {
		m, err := cc.Map(ctx, 0)
		if err != nil {
			return 0, 0, err
		}
		var total uint64
		for _, b := range m.Bricks {
			if b.State == clustermap.BrickUp && !b.Draining && b.CapacityBytes > 0 {
				total += uint64(b.CapacityBytes)
			}
		}
		if v := m.Volume(name); v != nil && v.Replicas > 0 {
			total /= uint64(v.Replicas)
		}
		if total == 0 {
			total = 1 << 40
		}
		return total, total, nil
	}
}

// Close writes everything back, empties and frees the node's log, gives
// its locks back and ends the session at the coordinator, so that the next
// mount under the same name has nothing to recover and need not wait for
// this session's lease. If writing back fails the session is left to
// expire: another node then replays the log.
func (n *FSNode) Close(ctx context.Context) error {
	err := n.FS.Close(ctx)
	if err == nil {
		if cerr := endSession(ctx, n.cc, n.clerk, n.Volume); cerr != nil {
			// Only costs the next mount of this name one lease of waiting.
			n.log.Warn("could not end the session at the coordinator", "err", cerr)
		}
	}
	n.stop()
	<-n.done
	n.vol.Close()
	return err
}

// Crash stops the node without writing anything back, as kill -9 would
// (for tests): its log is left for another node to replay.
func (n *FSNode) Crash() {
	n.FS.Halt()
	n.stop()
	<-n.done
	n.vol.Close()
}

// endSession ends the lock session of a node whose file system stopped
// (a failed log or volume write, a lost lease): the clerk stops, so it
// neither renews nor gives back a lock whose changes are only in the log,
// and the coordinator fences the session at once, so that a lock server
// has another node replay the log and only then frees the locks. Without
// the fence that waits for the lease to run out.
func (n *FSNode) endSession(cause error) {
	defer close(n.failed) // OnFail runs once
	n.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := n.cc.Call(ctx, func(ctx context.Context, cl pb.CoordinatorClient) error {
		_, err := cl.Fence(ctx, &pb.FenceRequest{Writer: n.ID, Epoch: n.Session + 1})
		return err
	})
	if err != nil {
		n.log.Warn("could not fence this node's failed session: it ends when its lease runs out", "session", n.Session, "err", coordclient.ErrorMessage(err))
		return
	}
	n.log.Info("fenced this node's failed session: another node replays its log", "session", n.Session, "cause", cause)
}
