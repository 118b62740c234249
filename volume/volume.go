// Package volume is the virtual-disk client: it cuts reads, writes and
// decommits of a sparse 2^64-byte volume into chunk-sized requests, routes
// each to the primary of its placement group under the newest map it has,
// and retries through map changes (failover, backfill, epoch bumps).
//
// Guarantee: WriteAt returns nil only when every replica of every touched
// chunk has the bytes durable; a fenced writer gets ErrFenced and its
// write is never retried.
package volume

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/inproc"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/internal/rpcbuf"
)

// Errors returned (wrapped) by Volume methods; test with errors.Is.
var (
	ErrFenced     = errors.New("volume: writer fenced")
	ErrNoVolume   = errors.New("volume: no such volume")
	ErrNoSnapshot = errors.New("volume: no such snapshot")
	ErrRange      = errors.New("volume: range passes the end of the 2^64-byte address space")
	ErrDataLoss   = errors.New("volume: data lost on every replica")
	ErrNoSpace    = errors.New("volume: a brick is out of space")
	// ErrNoFileVersions: a file version given on a volume created without
	// file versions.
	ErrNoFileVersions = errors.New("volume: the volume does not keep file versions")
)

// Options configures a Volume.
type Options struct {
	// Writer identifies this client for fencing; empty means a random id.
	Writer string
	// RetryMax bounds retries of one chunk request; 0 = limits.ClientRetryMax.
	RetryMax time.Duration
	// Registerer receives the client's metrics (volume/metrics.go); nil
	// means prometheus.DefaultRegisterer. Volumes of one process that use
	// the same registry share the series of their volume.
	Registerer prometheus.Registerer
}

// Volume is an open virtual disk. Safe for concurrent use.
type Volume struct {
	name  string
	coord *coordclient.Client
	opts  Options
	epoch uint64 // writer fencing epoch, fixed at Open
	// writer is the id and epoch every change request carries (read-only:
	// shared by the requests).
	writer *pb.Writer
	stats  *stats

	mu struct {
		sync.Mutex
		m     *clustermap.Map
		conns map[string]*inproc.Conn
	}
	queues struct { // batch.go
		sync.Mutex
		m map[pgQueueKey]*pgQueue
	}
}

// Open looks the volume up and fixes this writer's fencing epoch at the
// current one: once someone fences the writer, this Volume can never write
// again; a new Open is needed (and will be fenced too if the fence was
// raised beyond the current epoch on purpose).
func Open(ctx context.Context, coord *coordclient.Client, name string, opts Options) (*Volume, error) {
	if opts.Writer == "" {
		opts.Writer = fmt.Sprintf("client-%016x", rand.Uint64())
	}
	if opts.RetryMax == 0 {
		opts.RetryMax = limits.ClientRetryMax
	}
	m, err := coord.Map(ctx, 0)
	if err != nil {
		return nil, fmt.Errorf("open volume %s: %w", name, err)
	}
	if m.Volume(name) == nil {
		return nil, fmt.Errorf("open volume %s: %w (create it with `plumeria volume create`)", name, ErrNoVolume)
	}
	v := &Volume{name: name, coord: coord, opts: opts, epoch: m.FenceEpoch(opts.Writer), stats: newStats(opts.Registerer, name)}
	v.writer = &pb.Writer{Id: opts.Writer, Epoch: v.epoch}
	v.mu.m = m
	v.mu.conns = map[string]*inproc.Conn{}
	v.queues.m = map[pgQueueKey]*pgQueue{}
	return v, nil
}

// Writer returns the writer id and fencing epoch this Volume writes with.
func (v *Volume) Writer() (string, uint64) { return v.opts.Writer, v.epoch }

// Close releases connections.
func (v *Volume) Close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, c := range v.mu.conns {
		c.Close()
	}
}

// Map returns the newest map this client has.
func (v *Volume) Map() *clustermap.Map {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.mu.m
}

func (v *Volume) refresh(ctx context.Context, minEpoch uint64) error {
	m, err := v.coord.Map(ctx, minEpoch)
	if err != nil {
		return err
	}
	v.mu.Lock()
	if m.Epoch > v.mu.m.Epoch {
		v.mu.m = m
	}
	v.mu.Unlock()
	return nil
}

func (v *Volume) brick(m *clustermap.Map, name string) (pb.BrickClient, error) {
	c, err := v.brickConn(m, name)
	if err != nil {
		return nil, err
	}
	return pb.NewBrickClient(c), nil
}

// brickConn returns the connection to brick name.
func (v *Volume) brickConn(m *clustermap.Map, name string) (*inproc.Conn, error) {
	b := m.Brick(name)
	if b == nil {
		return nil, status.Errorf(codes.Unavailable, "brick %s not in map", name)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	c := v.mu.conns[b.Addr]
	if c == nil {
		var err error
		if c, err = coordclient.Dial(b.Addr); err != nil {
			return nil, err
		}
		v.mu.conns[b.Addr] = c
	}
	return c, nil
}

// piece is the part of a request that falls in one chunk.
type piece struct {
	off uint64
	buf []byte // the caller's bytes for this piece
}

func checkRange(off uint64, n int) error {
	if n > 0 && off+uint64(n)-1 < off {
		return fmt.Errorf("%w: offset %d length %d", ErrRange, off, n)
	}
	return nil
}

func split(off uint64, p []byte, chunk uint64) []piece {
	var out []piece
	for len(p) > 0 {
		n := min(uint64(len(p)), chunk-off%chunk)
		out = append(out, piece{off, p[:n]})
		off += n
		p = p[n:]
	}
	return out
}

type reservedKey struct{}

// Reserved marks writes made with the returned context as metadata: they
// may use the space each brick keeps back for it, so that a file system on
// a full volume can still log, commit deletes and free space. Decommits
// always may.
func Reserved(ctx context.Context) context.Context {
	return context.WithValue(ctx, reservedKey{}, true)
}

func isReserved(ctx context.Context) bool {
	r, _ := ctx.Value(reservedKey{}).(bool)
	return r
}

type versionedKey struct{}

// Versioned makes writes made with the returned context versioned: each
// 4 KiB block they cover (they must cover whole blocks) carries a
// little-endian uint64 version at byte off, and a brick keeps its stored
// block when that one's version is not below (WriteRequest.version_at).
// A write that reaches a brick late, after its writer retried and others
// wrote newer versions, then changes nothing.
func Versioned(ctx context.Context, off int) context.Context {
	return context.WithValue(ctx, versionedKey{}, uint32(off)+1)
}

func versionAt(ctx context.Context) uint32 {
	v, _ := ctx.Value(versionedKey{}).(uint32)
	return v
}

// WriteAt writes p at off. It returns once every replica has it durable.
// Plain writes go through the PGs' queues (batch.go: the writes that
// arrive while a PG's requests are under way go together in its next);
// versioned ones are sent alone, since each block's outcome depends on
// what the brick holds.
func (v *Volume) WriteAt(ctx context.Context, p []byte, off uint64) (err error) {
	return v.WriteAtVersion(ctx, p, off, 0)
}

// WriteAtVersion is WriteAt as file version f (1 to
// clustermap.FileVersionMax; 0: none, as WriteAt) of a volume created with
// file versions: the bricks keep the blocks under f, so the readers of
// earlier file versions still read theirs (ReadAtVersion). Within one
// generation of the volume the file versions written to a block must not
// decrease. It goes through the PGs' queues as WriteAt; it may not be
// versioned (Versioned). Errors as WriteAt, and ErrNoFileVersions.
func (v *Volume) WriteAtVersion(ctx context.Context, p []byte, off uint64, f uint32) (err error) {
	defer v.stats.done(opWrite, time.Now(), len(p), &err)
	if err := checkRange(off, len(p)); err != nil {
		return err
	}
	if err := v.checkFileVersion(f); err != nil {
		return err
	}
	if versionAt(ctx) == 0 {
		vol := v.Map().Volume(v.name)
		if vol == nil {
			return fmt.Errorf("volume %s: %w", v.name, ErrNoVolume)
		}
		return v.writeQueued(ctx, vol, p, off, f)
	}
	if f != 0 {
		return fmt.Errorf("volume %s: a write of file version %d may not be versioned (Versioned) too", v.name, f)
	}
	return v.each(ctx, off, p, func(ctx context.Context, m *clustermap.Map, vol *clustermap.Volume, pc piece) error {
		pg := vol.PGOf(pc.off)
		cl, err := v.brick(m, vol.PGs[pg].Primary())
		if err != nil {
			return err
		}
		_, err = cl.Write(ctx, &pb.WriteRequest{MapEpoch: m.Epoch, Vol: vol.ID, Pg: pg, Offset: pc.off, Data: pc.buf,
			Writer: v.writer, Reserved: isReserved(ctx), VersionAt: versionAt(ctx)})
		return err
	})
}

// ReadAt fills p from off. Never-written bytes read as zeros.
func (v *Volume) ReadAt(ctx context.Context, p []byte, off uint64) error {
	return v.ReadSnapshotAtVersion(ctx, "", p, off, 0)
}

// ReadAtVersion fills p from off as file version f (0: the newest) of a
// volume with file versions: each block as the newest write of a file
// version at most f left it (a decommit reads as zeros). Errors as ReadAt,
// and ErrNoFileVersions.
func (v *Volume) ReadAtVersion(ctx context.Context, p []byte, off uint64, f uint32) error {
	return v.ReadSnapshotAtVersion(ctx, "", p, off, f)
}

// FileVersions reports whether the volume keeps file versions (it was
// created with them; that never changes).
func (v *Volume) FileVersions() bool {
	vol := v.Map().Volume(v.name)
	return vol != nil && vol.FileVersions
}

// checkFileVersion refuses a file version on a volume without them, and
// one above clustermap.FileVersionMax.
func (v *Volume) checkFileVersion(f uint32) error {
	switch {
	case f == 0:
		return nil
	case !v.FileVersions():
		return fmt.Errorf("volume %s: file version %d: %w", v.name, f, ErrNoFileVersions)
	case f > clustermap.FileVersionMax:
		return fmt.Errorf("volume %s: file version %d: at most %d", v.name, f, clustermap.FileVersionMax)
	}
	return nil
}

// readDataField is ReadResponse's data field.
var readDataField = (&pb.ReadResponse{}).ProtoReflect().Descriptor().Fields().ByName("data").Number()

// ReadSnapshotAt reads as of the named snapshot ("" = the live volume).
func (v *Volume) ReadSnapshotAt(ctx context.Context, snap string, p []byte, off uint64) error {
	return v.ReadSnapshotAtVersion(ctx, snap, p, off, 0)
}

// ReadSnapshotAtVersion reads as of the named snapshot ("" = the live
// volume) and file version f (0: the newest the snapshot has).
func (v *Volume) ReadSnapshotAtVersion(ctx context.Context, snap string, p []byte, off uint64, f uint32) (err error) {
	defer v.stats.done(opRead, time.Now(), len(p), &err)
	if err := checkRange(off, len(p)); err != nil {
		return err
	}
	if err := v.checkFileVersion(f); err != nil {
		return err
	}
	if snap != "" {
		if err := v.knowSnapshot(ctx, snap); err != nil {
			return err
		}
	}
	return v.each(ctx, off, p, func(ctx context.Context, m *clustermap.Map, vol *clustermap.Volume, pc piece) error {
		pg := vol.PGOf(pc.off)
		c, err := v.brickConn(m, vol.PGs[pg].Primary())
		if err != nil {
			return err
		}
		// The reply's data is decoded straight into the caller's buffer.
		// An attempt that fails may have written some of it; the next
		// one writes all of it again.
		r := &rpcbuf.Into{Msg: &pb.ReadResponse{}, Field: readDataField, Dst: pc.buf}
		req := &pb.ReadRequest{MapEpoch: m.Epoch, Vol: vol.ID, Pg: pg, Offset: pc.off, Length: uint32(len(pc.buf)), Snapshot: snap, FileVersion: f}
		if err := c.Invoke(ctx, pb.Brick_Read_FullMethodName, req, r); err != nil {
			return err
		}
		if r.N != len(pc.buf) {
			return status.Errorf(codes.Unavailable, "brick returned %d bytes for %d", r.N, len(pc.buf))
		}
		return nil
	})
}

// knowSnapshot makes sure the cached map has snap, refreshing it once: the
// snapshot may be newer than the map this client last fetched.
func (v *Volume) knowSnapshot(ctx context.Context, snap string) error {
	has := func() bool {
		vol := v.Map().Volume(v.name)
		if vol == nil {
			return false
		}
		_, ok := vol.Snapshots[snap]
		return ok
	}
	if has() {
		return nil
	}
	if err := v.refresh(ctx, 0); err != nil {
		return fmt.Errorf("volume %s: look up snapshot %q: %w", v.name, snap, err)
	}
	if !has() {
		return fmt.Errorf("volume %s: %w %q", v.name, ErrNoSnapshot, snap)
	}
	return nil
}

// Decommit frees [off, off+n): it then reads as zeros; snapshots keep
// what they saw. n == 0 with off == 0 is not "everything": pass
// DecommitAll for the whole address space.
func (v *Volume) Decommit(ctx context.Context, off, n uint64) (err error) {
	return v.DecommitVersion(ctx, off, n, 0)
}

// DecommitVersion is Decommit as file version f (0: none, as Decommit) of a
// volume with file versions: the range reads as zeros in the live volume
// and in file versions from f on; earlier file versions keep what they
// read. Errors as Decommit, and ErrNoFileVersions.
func (v *Volume) DecommitVersion(ctx context.Context, off, n uint64, f uint32) (err error) {
	if n == 0 {
		return nil
	}
	defer v.stats.done(opDecommit, time.Now(), 0, &err)
	if off+n < off && off+n != 0 {
		return fmt.Errorf("%w: decommit at %d length %d", ErrRange, off, n)
	}
	if err := v.checkFileVersion(f); err != nil {
		return err
	}
	vol := v.Map().Volume(v.name)
	if vol == nil {
		return fmt.Errorf("volume %s: %w", v.name, ErrNoVolume)
	}
	pgs := decommitPGs(vol, off, n)
	errs := make(chan error, len(pgs))
	for _, pg := range pgs {
		go func() {
			errs <- v.retry(ctx, func(ctx context.Context, m *clustermap.Map, vol *clustermap.Volume) error {
				cl, err := v.brick(m, vol.PGs[pg].Primary())
				if err != nil {
					return err
				}
				_, err = cl.Decommit(ctx, &pb.DecommitRequest{MapEpoch: m.Epoch, Vol: vol.ID, Pg: uint32(pg), Offset: off, Length: n,
					Writer: v.writer, FileVersion: f})
				return err
			})
		}()
	}
	var first error
	for range pgs {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// decommitPGs lists the placement groups holding chunks of [off, off+n)
// (n > 0; off+n == 0 means up to 2^64): a PG holds only the chunks that
// hash to it, and a volume keeps its PG count, so a decommit asks no other.
// A range of more than decommitScanChunks chunks asks them all. (A deleted
// small file's extent is one chunk: one request instead of one per PG.)
func decommitPGs(vol *clustermap.Volume, off, n uint64) []int {
	chunk := uint64(vol.ChunkBytes)
	first, last := off/chunk, (off+n-1)/chunk
	all := make([]int, len(vol.PGs))
	for i := range all {
		all[i] = i
	}
	if last-first >= decommitScanChunks {
		return all
	}
	seen := make([]bool, len(vol.PGs))
	var pgs []int
	for c := first; ; c++ {
		if pg := clustermap.PGOfChunk(vol.ID, c, len(vol.PGs)); !seen[pg] {
			seen[pg] = true
			pgs = append(pgs, int(pg))
		}
		if c == last {
			return pgs
		}
	}
}

// decommitScanChunks bounds the chunks decommitPGs hashes.
const decommitScanChunks = 256

// Sync is a no-op kept for the BlockDevice interface: acknowledged writes
// are already durable on every replica.
func (v *Volume) Sync(ctx context.Context) error { return nil }

// each runs fn on every chunk piece of [off, off+len(p)), in parallel up to
// limits.ClientInflightChunksMax, each with retries.
func (v *Volume) each(ctx context.Context, off uint64, p []byte, fn func(context.Context, *clustermap.Map, *clustermap.Volume, piece) error) error {
	vol := v.Map().Volume(v.name)
	if vol == nil {
		return fmt.Errorf("volume %s: %w", v.name, ErrNoVolume)
	}
	pieces := split(off, p, uint64(vol.ChunkBytes))
	if len(pieces) == 1 {
		return v.retry(ctx, func(ctx context.Context, m *clustermap.Map, vol *clustermap.Volume) error {
			return fn(ctx, m, vol, pieces[0])
		})
	}
	sem := make(chan struct{}, limits.ClientInflightChunksMax)
	errs := make(chan error, len(pieces))
	for _, pc := range pieces {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			errs <- v.retry(ctx, func(ctx context.Context, m *clustermap.Map, vol *clustermap.Volume) error { return fn(ctx, m, vol, pc) })
		}()
	}
	var first error
	for range pieces {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// retry runs one chunk request until it succeeds, fails for good, or
// RetryMax passes, refreshing the map between attempts.
func (v *Volume) retry(ctx context.Context, fn func(context.Context, *clustermap.Map, *clustermap.Volume) error) error {
	deadline := time.Now().Add(v.opts.RetryMax)
	backoff := 20 * time.Millisecond
	for attempt := 0; ; attempt++ {
		m := v.Map()
		vol := m.Volume(v.name)
		if vol == nil {
			return fmt.Errorf("volume %s: %w", v.name, ErrNoVolume)
		}
		err := fn(ctx, m, vol)
		if err == nil {
			return nil
		}
		if perm := permanent(v.name, err); perm != nil {
			return perm
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("volume %s: gave up after %d attempts: %s", v.name, attempt+1, coordclient.ErrorMessage(err))
		}
		if rerr := v.refresh(ctx, 0); rerr != nil && ctx.Err() != nil {
			return rerr
		}
		v.stats.retries.Inc()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff + time.Duration(rand.Int64N(int64(backoff)))):
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}

// permanent returns the error to give up with, or nil to retry.
func permanent(name string, err error) error {
	if _, ok := status.FromError(err); !ok {
		return err // our own errors (no snapshot, ...) are final
	}
	msg := coordclient.ErrorMessage(err)
	switch status.Code(err) {
	case codes.PermissionDenied:
		return fmt.Errorf("volume %s: %w: %s", name, ErrFenced, msg)
	case codes.Unauthenticated:
		// Only a missing or revoked certificate (pki.Authorize): no
		// retry can succeed.
		return fmt.Errorf("volume %s: refused: %s", name, msg)
	case codes.InvalidArgument:
		return fmt.Errorf("volume %s: %s", name, msg)
	case codes.DataLoss:
		return fmt.Errorf("volume %s: %w: %s", name, ErrDataLoss, msg)
	case codes.ResourceExhausted:
		return fmt.Errorf("volume %s: %w: %s", name, ErrNoSpace, msg)
	case codes.Unimplemented:
		return fmt.Errorf("volume %s: a brick does not know this request (%s): upgrade the bricks to this client's version", name, msg)
	case codes.NotFound:
		if strings.Contains(msg, "snapshot") {
			return fmt.Errorf("volume %s: %w: %s", name, ErrNoSnapshot, msg)
		}
	}
	return nil
}
