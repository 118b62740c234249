// Package brick is the brick role: it stores chunks of virtual disks in its
// local store (brick/store), serves reads and writes as the primary of its
// placement groups, replicates to backups, backfills new replicas and
// repairs corrupt blocks from peers. Decisions live in brick/repl; this
// package does the I/O around them.
//
// Guarantee: a write is acknowledged only after every member of the PG in
// the map this brick holds has made it durable; a brick refuses requests
// routed with an older map epoch, writes of fenced writers, and primary
// work once its lease from the coordinator has run out.
package brick

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

	"google.golang.org/grpc"

	"github.com/plumeria-fs/plumeria/brick/ec"
	"github.com/plumeria-fs/plumeria/brick/repl"
	"github.com/plumeria-fs/plumeria/brick/store"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/iostat"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// Config configures a brick.
type Config struct {
	Name          string
	Addr          string // advertised gRPC address
	DataDir       string // the store lives in DataDir/store
	Domain        map[string]string
	CapacityBytes int64  // 0: free space of DataDir's file system
	Class         string // storage class (clustermap.Brick.Class); "" is the default class
	Coord         *coordclient.Client
	Logger        *slog.Logger
	// HeartbeatInterval zero means limits.HeartbeatInterval.
	HeartbeatInterval time.Duration
	// HistoryInterval is the time between passes counting live and
	// history bytes (history.go); zero means historyEvery.
	HistoryInterval time.Duration
	// StripeGCInterval is the time between sweeps for unreferenced
	// stripes (stripegc.go); zero means stripeGCEvery.
	StripeGCInterval time.Duration
	// StripeGCGrace is how long two sweeps must find a stripe
	// unreferenced before it is deleted, and twice the longest a coding
	// step may take from its first shard write to its swap; zero means
	// stripeGCGrace. Every brick of a cluster must run the same value.
	StripeGCGrace time.Duration
}

// Server is a running brick.
type Server struct {
	pb.UnimplementedBrickServer
	cfg   Config
	log   *slog.Logger
	store *store.Store
	peers *peers
	// stripes caches shards read for coded blocks (stripe.go); coders
	// holds one Reed-Solomon coder per profile and chunk size.
	stopOnce sync.Once
	stripes  *stripeCache
	// relayoutSlots holds one token per chunk being coded (Relayout).
	relayoutSlots chan struct{}
	codersMu      sync.Mutex
	coders        map[[3]int]*ec.Coder
	stop          chan struct{}
	wg            sync.WaitGroup

	runCtx    context.Context // background work; cancelled by Stop
	cancelRun context.CancelFunc

	// Two views of the map (see mapstate.go): latest is the newest map
	// received, used by requests from other bricks; serving is the map the
	// primary-side handlers run under, switched by the installer while it
	// holds mapMu exclusively (handlers hold it shared for their duration).
	mapMu   sync.RWMutex
	latest  atomic.Pointer[clustermap.Map]
	serving atomic.Pointer[clustermap.Map]
	served  chan struct{} // closed and replaced at every install; guarded by pgMu
	kick    chan struct{} // wakes the installer
	beat    chan struct{} // a heartbeat now: a new map is served (cap 1)

	removed atomic.Bool // the map dropped this brick (brick remove)

	// pgMu guards the replication core (every decision of the protocol:
	// brick/repl.Core) and the bookkeeping of the background work it asks
	// for (core.go).
	pgMu           sync.Mutex
	core           *repl.Core
	seqs           *seqFile                                               // the seq reservation on disk
	pgLock         map[pgKey]*pgLock                                      // per-PG order (pglock.go)
	reporting      map[pgKey]bool                                         // a fault report runs for the PG
	replicaFailed  func(ctx context.Context, k pgKey, brick string) error // reports to the coordinator (tests replace it)
	reconciling    bool                                                   // reconcileLoop runs
	reconcileAgain bool                                                   // a map arrived while it ran
	coreKick       chan struct{}                                          // wakes coreLoop: the core has work ready

	fetchMu sync.Mutex // single-flight map refresh

	pruned    *pruneFile    // PGs pruned after snapshot deletions (prune.go)
	pruneKick chan struct{} // wakes pruneLoop

	bf struct {
		sync.Mutex
		running map[bfKey]bool
	}
	usage    atomic.Pointer[[]*pb.PGUsage]
	history  atomic.Pointer[historyReport] // the latest pass of historyLoop
	gc       stripeGC                      // the stripe collector (stripegc.go)
	inflight inflight                      // requests being served, by kind (memmetrics.go)
	io       iostat.Counters               // client reads and writes served, for heartbeats
}

type pgKey = repl.PGKey

type bfKey struct {
	pgKey
	target string
}

// New opens the store and registers the brick service on gs (before gs
// serves). Call Run once gs serves, to join the cluster.
func New(cfg Config, gs grpc.ServiceRegistrar) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = limits.HeartbeatInterval
	}
	if cfg.HistoryInterval == 0 {
		cfg.HistoryInterval = historyEvery
	}
	if cfg.StripeGCInterval == 0 {
		cfg.StripeGCInterval = stripeGCEvery
	}
	if cfg.StripeGCGrace == 0 {
		cfg.StripeGCGrace = stripeGCGrace
	}
	dir := filepath.Join(cfg.DataDir, "store")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("brick: create %s: %w", dir, err)
	}
	st, err := store.Open(dir, store.Options{CapacityBytes: cfg.CapacityBytes, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("brick %s: open store in %s: %w", cfg.Name, dir, err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("role", "brick", "brick", cfg.Name), store: st,
		peers: newPeers(), stripes: newStripeCache(stripeCacheBytes),
		relayoutSlots: make(chan struct{}, relayoutSlotsMax), stop: make(chan struct{}), pgLock: map[pgKey]*pgLock{}, reporting: map[pgKey]bool{},
		served: make(chan struct{}), kick: make(chan struct{}, 1), beat: make(chan struct{}, 1), coreKick: make(chan struct{}, 1), pruneKick: make(chan struct{}, 1)}
	s.bf.running = map[bfKey]bool{}
	s.gc.grace.Store(int64(cfg.StripeGCGrace))
	s.replicaFailed = s.reportReplicaFailed
	s.runCtx, s.cancelRun = context.WithCancel(context.Background())
	s.latest.Store(&clustermap.Map{})
	s.serving.Store(&clustermap.Map{})
	if err := s.initSeq(); err != nil {
		st.Close()
		return nil, err
	}
	if s.pruned, err = openPruneFile(cfg.DataDir); err != nil {
		st.Close()
		return nil, fmt.Errorf("brick %s: %w", cfg.Name, err)
	}
	pb.RegisterBrickServer(gs, s)
	memory.add(s)
	return s, nil
}

// Run registers with the coordinator (retrying until ctx ends) and starts
// heartbeats, usage and history counting, pruning, stripe collection and
// the cleaner.
func (s *Server) Run(ctx context.Context) error {
	for {
		err := s.register(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("brick %s: register with coordinator: %w", s.cfg.Name, err)
		}
		s.log.Warn("cannot register with a coordinator yet; retrying", "err", err)
	}
	s.log.Info("brick registered", "addr", s.cfg.Addr, "epoch", s.latest.Load().Epoch)
	s.wg.Add(10)
	go s.installer()
	go s.coreLoop()
	go s.heartbeatLoop()
	go s.usageLoop()
	go s.historyLoop()
	go s.orphanLoop()
	go s.rebuildLoop()
	go s.pruneLoop()
	go s.stripeGCLoop()
	go func() { defer s.wg.Done(); s.store.RunCleaner(s.ctx(), 10*time.Second) }()
	return nil
}

// ctx returns the context of the server's background work, cancelled by Stop.
func (s *Server) ctx() context.Context { return s.runCtx }

// Stop stops background work and closes the store.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		close(s.stop)
		memory.remove(s)
		s.cancelRun()
		s.wg.Wait()
		s.peers.close()
		s.store.Close()
	})
}

// Store exposes the local store (for status and tests).
func (s *Server) Store() *store.Store { return s.store }

// initSeq makes the replication core with its seq counter above every seq
// already stored, and above those it may have assigned without storing
// (repl.NewCore), so a restarted primary never reuses one.
func (s *Server) initSeq() error {
	vols, err := s.store.Vols()
	if err != nil {
		return fmt.Errorf("brick: list volumes: %w", err)
	}
	var maxSeq uint64
	for _, v := range vols {
		if err := s.store.Scan(v, 0, ^uint64(0), func(e store.Entry) bool {
			maxSeq = max(maxSeq, e.Seq)
			return true
		}); err != nil {
			return fmt.Errorf("brick: scan volume %d: %w", v, err)
		}
	}
	seqs, err := openSeqFile(s.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("brick %s: %w", s.cfg.Name, err)
	}
	s.seqs = seqs
	s.core = repl.NewCore(s.cfg.Name, maxSeq, seqs.durable)
	return nil
}

// features is what this build declares to the coordinator: it stores
// shards of stripes (shard.go) and refs (store format 2).
var features = []string{clustermap.FeatureEC}

func (s *Server) register(ctx context.Context) error {
	st := s.store.Stats()
	return s.cfg.Coord.Call(ctx, func(ctx context.Context, cl pb.CoordinatorClient) error {
		r, err := cl.RegisterBrick(ctx, &pb.RegisterBrickRequest{Name: s.cfg.Name, Addr: s.cfg.Addr,
			Domain: s.cfg.Domain, CapacityBytes: st.CapacityBytes, Class: s.cfg.Class, Features: features})
		if err != nil {
			return err
		}
		m, err := coordclient.DecodeMap(r.MapJson)
		if err != nil {
			return err
		}
		s.setLatest(m)
		return nil
	})
}

func (s *Server) heartbeatLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		s.heartbeat()
		select {
		case <-s.stop:
			return
		case <-t.C:
		case <-s.beat:
			// A new map is served: say so at once, for the coordinator's
			// fences and snapshots wait for every brick to report it.
		}
	}
}

// heartbeat renews the lease, counted from the moment the request was
// sent. It reports the SERVING epoch: the coordinator's fences, snapshots
// and primary hand-offs wait until every brick serves a new enough map (or
// its lease ran out), so renewing the lease never waits for an install.
func (s *Server) heartbeat() {
	sent := time.Now()
	st := s.store.Stats()
	req := &pb.HeartbeatRequest{Name: s.cfg.Name, Kind: pb.HeartbeatRequest_BRICK, MapEpoch: s.serving.Load().Epoch,
		UsedBytes: st.UsedBytes, CapacityBytes: st.CapacityBytes, Addr: s.cfg.Addr, Io: ioStats(s.io.Snapshot()),
		VolumeBytes: s.historyBytes(sent)}
	if u := s.usage.Load(); u != nil {
		req.Usage = *u
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var resp *pb.HeartbeatResponse
	err := s.cfg.Coord.Call(ctx, func(ctx context.Context, cl pb.CoordinatorClient) error {
		var err error
		resp, err = cl.Heartbeat(ctx, req)
		return err
	})
	if err != nil {
		s.log.Debug("heartbeat failed", "err", err)
		return
	}
	if len(resp.MapJson) > 0 {
		m, err := coordclient.DecodeMap(resp.MapJson)
		if err != nil {
			s.log.Error("heartbeat: bad map from coordinator", "err", err)
			return
		}
		s.setLatest(m)
		if s.latest.Load().Brick(s.cfg.Name) == nil && !s.removed.Swap(true) {
			// `plumeria brick remove` took this brick out of the map: it
			// must not add itself back. Restarting the process joins again.
			s.log.Warn("this brick was removed from the cluster; stop the process (restarting it would join again)")
		}
	}
	s.pgMu.Lock()
	s.core.SetLease(sent.Add(time.Duration(resp.LeaseMs)*time.Millisecond).UnixNano(), resp.InstalledEpoch)
	s.pgMu.Unlock()
}

// ioStats converts counters for the heartbeat (proto IOStats).
func ioStats(c iostat.Snapshot) *pb.IOStats {
	return &pb.IOStats{ReadOps: c.Read.Ops, ReadBytes: c.Read.Bytes, ReadLatency: c.Read.Latency,
		WriteOps: c.Write.Ops, WriteBytes: c.Write.Bytes, WriteLatency: c.Write.Latency}
}

// usageLoop counts, every few seconds, the chunks this brick holds per PG
// (reported in heartbeats for status' chunk and degraded counts).
func (s *Server) usageLoop() {
	defer s.wg.Done()
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		s.countUsage()
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
	}
}

func (s *Server) countUsage() {
	m := s.latest.Load()
	var out []*pb.PGUsage
	for _, v := range m.Volumes {
		counts := map[uint32]int64{}
		err := s.store.Chunks(v.ID, uint64(v.ChunkBytes)/limits.BlockBytes, func(c uint64) {
			counts[clustermap.PGOfChunk(v.ID, c, len(v.PGs))]++
		})
		if err != nil {
			s.log.Warn("count usage", "vol", v.Name, "err", err)
			continue
		}
		for pg, n := range counts {
			out = append(out, &pb.PGUsage{Vol: v.ID, Pg: pg, Chunks: n})
		}
	}
	s.usage.Store(&out)
}

// nextSeq assigns a fresh seq under the current map epoch, recording a new
// seq reservation on disk first when the core asks for one (seqfile.go).
func (s *Server) nextSeq(epoch uint64) (uint64, error) {
	s.pgMu.Lock()
	seq, reserve, err := s.core.NextSeq(epoch)
	s.pgMu.Unlock()
	if err != nil || reserve == 0 {
		return seq, grpcErr(err)
	}
	if err := s.seqs.ensure(reserve); err != nil {
		return 0, storeErr(err, fmt.Sprintf("brick %s", s.cfg.Name))
	}
	s.pgMu.Lock()
	s.core.Reserved(reserve)
	s.pgMu.Unlock()
	return seq, nil
}

func (s *Server) pgLockOf(k pgKey) *pgLock {
	s.pgMu.Lock()
	defer s.pgMu.Unlock()
	l := s.pgLock[k]
	if l == nil {
		l = newPGLock()
		s.pgLock[k] = l
	}
	return l
}

// lockPG takes the whole PG exclusively (backfill batches, inventories,
// reconciliation, orphan removal): it waits for every request on the PG.
func (s *Server) lockPG(k pgKey) func() {
	l := s.pgLockOf(k)
	l.rw.Lock()
	return l.rw.Unlock
}

// lockBlocks takes the blocks of spans of the PG: exclusive for changes,
// shared for reads (see pgLock).
func (s *Server) lockBlocks(k pgKey, spans []span, excl bool) func() {
	return s.pgLockOf(k).lockRanges(spans, excl)
}

var errStopped = errors.New("brick: stopping")
