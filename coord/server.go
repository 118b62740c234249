// Package coord is the coordinator role: a Raft group (hashicorp/raft) that
// holds the cluster map, detects dead bricks by heartbeats, and changes the
// map through the pure functions of clustermap. Only the leader changes the
// map; followers forward requests to it.
//
// Guarantee: a brick is declared dead only after limits.BrickDeadAfter
// without a heartbeat, which exceeds the primary lease it was granted, so a
// new primary never overlaps an old one that still believes it leads.
package coord

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/iostat"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/internal/pki"
	"github.com/plumeria-fs/plumeria/internal/prom"
)

// Config configures a coordinator.
type Config struct {
	Name    string   // Raft server id; unique in the cluster
	Addr    string   // advertised address (gRPC and Raft share it)
	DataDir string   // Raft log, stable store and snapshots live in DataDir/raft
	Join    []string // existing coordinators to join; empty bootstraps a new cluster
	Logger  *slog.Logger
	// Timing; zero means the limits package default.
	DeadAfter time.Duration
	Lease     time.Duration
	// Registerer receives the metrics (coord/metrics.go, label
	// coordinator=Name); nil means prometheus.DefaultRegisterer. A later
	// coordinator of the same name replaces an earlier one's series.
	Registerer prometheus.Registerer
	// CA signs joining nodes' and renewing members' certificates
	// (security.go); nil, or one without its key: this coordinator
	// refuses to (FailedPrecondition). CertLifetime is the lifetime of the
	// certificates it issues; 0 is pki.LeafLifetime.
	CA           *pki.CA
	CertLifetime time.Duration
	// Tokens are join tokens this coordinator puts in the map when it
	// leads, unless there already or expired (plumeria init's first
	// token, security.go).
	Tokens []clustermap.JoinToken
}

// Server is a running coordinator.
type Server struct {
	pb.UnimplementedCoordinatorServer
	cfg  Config
	log  *slog.Logger
	raft *raft.Raft
	fsm  *fsm
	stop chan struct{}
	wg   sync.WaitGroup

	propMu sync.Mutex // serialises map changes on the leader

	removedNoted atomic.Bool // noteRemoved logged already

	metrics            *collector
	recoveriesRecorded atomic.Uint64 // RecordRecovered calls that added a record, as leader

	mu struct {
		sync.Mutex
		leaderSince time.Time
		seen        map[string]time.Time // member name → last heartbeat received
		epochs      map[string]uint64    // member name → map epoch it reported
		usage       map[string]brickUsage
		leaderConn  *leaderConn
	}
}

type brickUsage struct {
	used, capacity int64
	chunks         map[pgKey]int64
	io             *iostat.Snapshot // nil: the brick sent none
	// space: the brick's latest count of each volume's live and history
	// bytes (brick/history.go); kept across heartbeats that carry none.
	space map[uint64]volumeSpace
}

// volumeSpace is one brick's count of one volume's bytes.
type volumeSpace struct {
	live, history int64
	stripe        int64     // shard bytes of the volume's stripes
	taken         time.Time // when the count started, by this coordinator's clock
}

type pgKey struct {
	vol uint64
	pg  uint32
}

type leaderConn struct {
	addr string
	cl   pb.CoordinatorClient
	conn io.Closer
}

// ErrNotLeader means this coordinator cannot serve a change and no leader is known.
var ErrNotLeader = errors.New("coord: no leader known yet (election in progress)")

// Start opens the Raft store, starts Raft on the given stream layer and
// registers the gRPC service on gs.
func Start(cfg Config, layer raft.StreamLayer, gs grpc.ServiceRegistrar) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.DeadAfter == 0 {
		cfg.DeadAfter = deadAfterDefault
	}
	if cfg.Lease == 0 {
		cfg.Lease = leaseDefault
	}
	if cfg.DeadAfter <= cfg.Lease {
		return nil, fmt.Errorf("coord: dead-after %v must exceed the brick lease %v", cfg.DeadAfter, cfg.Lease)
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("role", "coordinator"), fsm: newFSM(), stop: make(chan struct{})}
	s.mu.seen = map[string]time.Time{}
	s.mu.epochs = map[string]uint64{}
	s.mu.usage = map[string]brickUsage{}

	dir := filepath.Join(cfg.DataDir, "raft")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("coord: create %s: %w", dir, err)
	}
	store, err := raftboltdb.NewBoltStore(filepath.Join(dir, "raft.db"))
	if err != nil {
		return nil, fmt.Errorf("coord: open raft store in %s: %w", dir, err)
	}
	snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		return nil, fmt.Errorf("coord: open snapshot store in %s: %w", dir, err)
	}
	hl := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Error, Output: os.Stderr})
	trans := raft.NewNetworkTransportWithLogger(layer, 3, 5*time.Second, hl)
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.Name)
	rc.Logger = hl
	rc.HeartbeatTimeout = 500 * time.Millisecond
	rc.ElectionTimeout = 500 * time.Millisecond
	rc.LeaderLeaseTimeout = 250 * time.Millisecond
	rc.CommitTimeout = 20 * time.Millisecond
	rc.SnapshotThreshold = 1024
	existing, err := raft.HasExistingState(store, store, snaps)
	if err != nil {
		return nil, fmt.Errorf("coord: read raft state: %w", err)
	}
	r, err := raft.NewRaft(rc, s.fsm, store, store, snaps, trans)
	if err != nil {
		return nil, fmt.Errorf("coord: start raft: %w", err)
	}
	s.raft = r
	if !existing && len(cfg.Join) == 0 {
		f := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: raft.ServerAddress(cfg.Addr)}}})
		if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return nil, fmt.Errorf("coord: bootstrap: %w", err)
		}
		s.log.Info("bootstrapped a new cluster", "name", cfg.Name, "addr", cfg.Addr)
	}
	s.metrics = newCollector(s)
	if err := prom.Replace(cfg.Registerer, s.metrics); err != nil {
		r.Shutdown()
		return nil, fmt.Errorf("coord: register metrics: %w", err)
	}
	pb.RegisterCoordinatorServer(gs, s)
	s.wg.Add(2)
	go s.loop()
	go s.joinLoop(existing)
	return s, nil
}

// Stop shuts Raft down.
func (s *Server) Stop() {
	prom.Registerer(s.cfg.Registerer).Unregister(s.metrics)
	close(s.stop)
	s.wg.Wait()
	_ = s.raft.Shutdown().Error()
	s.mu.Lock()
	if s.mu.leaderConn != nil {
		s.mu.leaderConn.conn.Close()
	}
	s.mu.Unlock()
}

// joinLoop asks the existing cluster to add this coordinator, until it is
// a member. A coordinator restarting on its Raft state asks only if it
// hears no leader for rejoinAfter: it was removed (`plumeria coord remove`)
// and nobody talks to it any more.
func (s *Server) joinLoop(existing bool) {
	defer s.wg.Done()
	if len(s.cfg.Join) == 0 || existing && s.waitMember() {
		return
	}
	cl, err := coordclient.New(s.cfg.Join...)
	if err != nil {
		s.log.Error("join", "err", err)
		return
	}
	defer cl.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := cl.Call(ctx, func(ctx context.Context, c pb.CoordinatorClient) error {
			_, err := c.Join(ctx, &pb.JoinRequest{Name: s.cfg.Name, Addr: s.cfg.Addr})
			return err
		})
		cancel()
		if err == nil {
			s.log.Info("joined the coordinator group", "via", s.cfg.Join)
			return
		}
		s.log.Warn("join failed; retrying", "err", err)
		select {
		case <-s.stop:
			return
		case <-time.After(time.Second):
		}
	}
}

// rejoinAfter is how long a restarted coordinator waits to hear from a
// leader that counts it as a member before it asks to join again.
const rejoinAfter = 5 * time.Second

// waitMember reports whether, within rejoinAfter, a leader is known and
// the configuration names this coordinator (or Stop was called).
func (s *Server) waitMember() bool {
	deadline := time.After(rejoinAfter)
	for {
		if _, id := s.raft.LeaderWithID(); id != "" && s.inConfiguration() {
			return true
		}
		select {
		case <-s.stop:
			return true
		case <-deadline:
			s.log.Warn("no leader counts this coordinator as a member (was it removed?); asking to join again", "via", s.cfg.Join)
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *Server) inConfiguration() bool {
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, srv := range f.Configuration().Servers {
		if srv.ID == raft.ServerID(s.cfg.Name) {
			return true
		}
	}
	return false
}

func (s *Server) isLeader() bool { return s.raft.State() == raft.Leader }

// leader returns a client for the current leader, or ErrNotLeader.
func (s *Server) leader() (pb.CoordinatorClient, error) {
	addr, _ := s.raft.LeaderWithID()
	if addr == "" {
		return nil, ErrNotLeader
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if lc := s.mu.leaderConn; lc != nil && lc.addr == string(addr) {
		return lc.cl, nil
	}
	if s.mu.leaderConn != nil {
		s.mu.leaderConn.conn.Close()
	}
	conn, err := coordclient.Dial(string(addr))
	if err != nil {
		return nil, err
	}
	s.mu.leaderConn = &leaderConn{addr: string(addr), cl: pb.NewCoordinatorClient(conn), conn: conn}
	return s.mu.leaderConn.cl, nil
}

// mutate applies fn to the current map on the leader and commits the result
// through Raft. fn returns nil for "no change".
func (s *Server) mutate(fn func(m *clustermap.Map) (*clustermap.Map, error)) (*clustermap.Map, error) {
	s.propMu.Lock()
	defer s.propMu.Unlock()
	if !s.isLeader() {
		return nil, ErrNotLeader
	}
	if err := s.raft.Barrier(5 * time.Second).Error(); err != nil {
		return nil, fmt.Errorf("coord: catch up before change: %w", err)
	}
	cur := s.fsm.Map()
	n, err := fn(cur)
	if err != nil || n == nil {
		return cur, err
	}
	n.Epoch = cur.Epoch + 1
	if err := n.Validate(); err != nil {
		return nil, fmt.Errorf("coord: refusing invalid map: %w", err)
	}
	f := s.raft.Apply(clustermap.Encode(n), 10*time.Second)
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("coord: commit map epoch %d: %w", n.Epoch, err)
	}
	if rerr, ok := f.Response().(error); ok && rerr != nil {
		return nil, rerr
	}
	s.log.Info("map changed", "epoch", n.Epoch)
	return n, nil
}

// Addr returns the advertised address.
func (s *Server) Addr() string { return s.cfg.Addr }

// Map returns the local copy of the map (possibly behind the leader's).
func (s *Server) Map() *clustermap.Map { return s.fsm.Map() }

// IsLeader reports whether this coordinator leads.
func (s *Server) IsLeader() bool { return s.isLeader() }
