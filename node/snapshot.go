package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/filesys/history"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/lock"
	lockclerk "github.com/plumeria-fs/plumeria/lock/clerk"
	"github.com/plumeria-fs/plumeria/volume"
)

// SnapshotResult is what SnapshotFS did and how long the file system
// paused.
type SnapshotResult struct {
	Gen uint64 // the newest volume generation the snapshot sees
	// Settle is how long the barrier took to come: every node wrote its
	// data, its log and its dirty blocks back, and each node stopped
	// changing anything from its own revoke on.
	Settle time.Duration
	// Held is how long the barrier was held in write mode: the volume
	// snapshot itself. Nodes change nothing until it is given back.
	Held time.Duration
}

// SnapshotFS takes a file-system-consistent snapshot of volume name
// (Frangipani §8): a clerk of its own ("snap.VOLUME") takes the barrier
// lock in write mode, which every fs node gives up only after it settled
// (filesys.FS.Revoke of the barrier: data, log and dirty blocks written
// in place); then the volume snapshot is taken and the barrier given back.
// A node that died meanwhile holds its barrier until another node (or
// this clerk) replayed its log, so the snapshot never needs a log replay.
// If this process dies while it holds the barrier, its session ends with
// its lease and the nodes go on; a second SnapshotFS of the same volume
// fences the first.
func SnapshotFS(ctx context.Context, cc *coordclient.Client, name, snap string, log *slog.Logger) (SnapshotResult, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := clustermap.ValidName(snap); err != nil {
		return SnapshotResult{}, fmt.Errorf("snapshot: %w", err)
	}
	m, err := cc.Map(ctx, 0)
	if err != nil {
		return SnapshotResult{}, fmt.Errorf("snapshot: read the cluster map: %s", coordclient.ErrorMessage(err))
	}
	v := m.Volume(name)
	if v == nil {
		return SnapshotResult{}, fmt.Errorf("snapshot: no volume %q", name)
	}
	if _, ok := v.Snapshots[snap]; ok {
		return SnapshotResult{}, fmt.Errorf("snapshot: volume %s already has a snapshot %q (delete it first or pick another name)", name, snap)
	}
	id := "snap." + name
	session, err := openSession(ctx, cc, id, name)
	if err != nil {
		return SnapshotResult{}, fmt.Errorf("snapshot: %w", err)
	}
	vol, err := volume.Open(ctx, cc, name, volume.Options{Writer: id})
	if err != nil {
		return SnapshotResult{}, fmt.Errorf("snapshot: open volume %s: %w", name, err)
	}
	defer vol.Close()
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	cl, err := lockclerk.New(lockclerk.Config{ID: id, Session: session, Groups: clustermap.LockGroupsN,
		Servers: NewLockResolver(cc), Logger: log,
		// The barrier covers nothing cached here; it is pinned until given back.
		OnRevoke: func(string, uint64, lock.Mode) error { return nil },
		OnRecover: func(table, dead string, s uint64) error {
			return filesys.RecoverLog(runCtx, NewFSDevice(vol), dead, s, filesys.RecoverOptions{Logger: log, Volume: table})
		},
	})
	if err != nil {
		return SnapshotResult{}, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		cl.Run(runCtx)
	}()
	defer func() {
		stop()
		<-done
	}()
	// Ending the session gives the barrier back and spares the next
	// snapshot this session's lease.
	end := func() {
		if err := endSession(ctx, cc, cl, name); err != nil {
			log.Warn("the snapshot's lock session ends with its lease", "err", err)
		}
	}
	if err := cl.Open(name); err != nil {
		end()
		return SnapshotResult{}, fmt.Errorf("snapshot: open lock table %s: %w", name, err)
	}
	var res SnapshotResult
	start := time.Now()
	if err := cl.Acquire(ctx, name, filesys.BarrierLock, lock.Write); err != nil {
		end()
		return res, fmt.Errorf("snapshot: take the barrier of %s (every fs node writes back first): %w", name, err)
	}
	res.Settle = time.Since(start)
	held := time.Now()
	err = cc.Call(ctx, func(ctx context.Context, c pb.CoordinatorClient) error {
		r, err := c.Snapshot(ctx, &pb.SnapshotRequest{Volume: name, Name: snap})
		if err == nil {
			res.Gen = r.Gen
		}
		return err
	})
	cl.Unpin(name, filesys.BarrierLock, lock.Write)
	cl.Close(name) // gives the barrier back
	res.Held = time.Since(held)
	end()
	if err != nil {
		return res, fmt.Errorf("snapshot %s of volume %s: %s", snap, name, coordclient.ErrorMessage(err))
	}
	log.Info("snapshot taken", "volume", name, "snapshot", snap, "settle", res.Settle, "held", res.Held)
	return res, nil
}

// SnapshotDevice is a volume snapshot as a read-only filesys.Device.
type SnapshotDevice struct {
	vol  *volume.Volume
	snap string
}

// NewSnapshotDevice returns snapshot snap of vol as a read-only device.
func NewSnapshotDevice(vol *volume.Volume, snap string) SnapshotDevice {
	return SnapshotDevice{vol: vol, snap: snap}
}

// ReadAt reads p at off as the snapshot holds it.
func (d SnapshotDevice) ReadAt(ctx context.Context, p []byte, off uint64) error {
	return deviceError(d.vol.ReadSnapshotAt(ctx, d.snap, p, off))
}

func (d SnapshotDevice) refuse() error {
	return fmt.Errorf("%w: snapshot %s is read-only", filesys.ErrReadOnly, d.snap)
}

// WriteData, WriteMeta, WriteMetaBlocks and Decommit refuse: a snapshot
// never changes (a read-only file system never calls them).
func (d SnapshotDevice) WriteData(context.Context, []byte, uint64) error       { return d.refuse() }
func (d SnapshotDevice) WriteMeta(context.Context, []byte, uint64) error       { return d.refuse() }
func (d SnapshotDevice) WriteMetaBlocks(context.Context, []byte, uint64) error { return d.refuse() }
func (d SnapshotDevice) Decommit(context.Context, uint64, uint64) error        { return d.refuse() }

// SnapshotFSNode is a snapshot of a volume's file system, opened read-only
// on this node: no lock session, no log, nothing written.
type SnapshotFSNode struct {
	FS       *filesys.FS
	Volume   string
	Snapshot string
	vol      *volume.Volume
}

// MountSnapshot opens snapshot snap of volume name's file system read-only.
func MountSnapshot(ctx context.Context, cc *coordclient.Client, name, snap string, opts FSNodeOptions) (*SnapshotFSNode, error) {
	vol, err := volume.Open(ctx, cc, name, volume.Options{Registerer: opts.Registerer})
	if err != nil {
		return nil, fmt.Errorf("open volume %s: %w", name, err)
	}
	dev := NewSnapshotDevice(vol, snap)
	fsys, err := filesys.Open(ctx, filesys.Config{Dev: dev, ReadOnly: true, Table: name + "@" + snap, ID: "snapshot",
		DataCacheBytes: opts.DataCacheBytes, StreamReads: opts.StreamReads, Logger: opts.Logger, Registerer: opts.Registerer})
	if err != nil {
		vol.Close()
		return nil, fmt.Errorf("open snapshot %s of volume %s: %w", snap, name, err)
	}
	return &SnapshotFSNode{FS: fsys, Volume: name, Snapshot: snap, vol: vol}, nil
}

// Close closes the snapshot's file system and volume.
func (n *SnapshotFSNode) Close(ctx context.Context) error {
	err := n.FS.Close(ctx)
	n.vol.Close()
	return err
}

// snapshotDataCache bounds the clean file data each snapshot opened under
// a mount's .plumeria/snapshots caches (the kernel caches pages too).
const snapshotDataCache = 32 << 20

// Snapshots lists and opens the snapshots of volume name for a mount's
// .plumeria/snapshots (history.Snapshots).
func Snapshots(cc *coordclient.Client, name string, opts FSNodeOptions) history.Snapshots {
	return volumeSnapshots{cc: cc, name: name, opts: opts}
}

type volumeSnapshots struct {
	cc   *coordclient.Client
	name string
	opts FSNodeOptions
}

func (s volumeSnapshots) List(ctx context.Context) ([]history.Snapshot, error) {
	m, err := s.cc.Map(ctx, 0)
	if err != nil {
		return nil, errors.New(coordclient.ErrorMessage(err))
	}
	v := m.Volume(s.name)
	if v == nil {
		return nil, fmt.Errorf("no volume %q", s.name)
	}
	snaps := make([]history.Snapshot, 0, len(v.Snapshots))
	for name := range v.Snapshots {
		hs := history.Snapshot{Name: name}
		if ns, ok := v.SnapshotTimes[name]; ok {
			hs.At = time.Unix(0, ns)
		}
		snaps = append(snaps, hs)
	}
	return snaps, nil
}

// Open opens snapshot snap, which the caller found in List.
func (s volumeSnapshots) Open(ctx context.Context, snap string) (*filesys.FS, func(context.Context), error) {
	opts := s.opts
	if opts.DataCacheBytes >= 0 {
		opts.DataCacheBytes = snapshotDataCache // per snapshot opened in a mount
	}
	n, err := MountSnapshot(ctx, s.cc, s.name, snap, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", filesys.ErrIO, err)
	}
	return n.FS, func(ctx context.Context) { n.Close(ctx) }, nil
}
