package brick

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/brick/repl"
	"github.com/plumeria-fs/plumeria/brick/store"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// begin serves a client request (Write, Read, Decommit) at the primary: it
// brings the brick's map up to the request's epoch and returns it with
// mapMu held shared; the caller must call done. Holding mapMu makes a map
// install wait for requests under the old map, so a fence or snapshot is in
// force at this primary once its install returns.
func (s *Server) begin(ctx context.Context, epoch uint64, vol uint64, pg uint32) (m *clustermap.Map, done func(), err error) {
	if err := s.catchUpLatest(ctx, epoch); err != nil {
		return nil, nil, err
	}
	// Serve under a map that knows the PG's newest configuration: backups
	// refuse requests from a primary routed with an older one.
	s.pgMu.Lock()
	at := s.core.ServeEpoch(repl.PGKey{Vol: vol, PG: pg}, epoch)
	s.pgMu.Unlock()
	if err := s.catchUpServing(ctx, at); err != nil {
		return nil, nil, err
	}
	s.mapMu.RLock()
	return s.serving.Load(), s.mapMu.RUnlock, nil
}

// beginPeer serves a request from another brick (Replicate, Backfill,
// Inventory). It takes no lock: a primary waiting for its backups while an
// install waits for the primary must never wait for an install here in
// turn (that cycle across two bricks would deadlock).
func (s *Server) beginPeer(ctx context.Context, epoch uint64) (*clustermap.Map, error) {
	if err := s.catchUpLatest(ctx, epoch); err != nil {
		return nil, err
	}
	return s.latest.Load(), nil
}

// pgOf checks that the volume and PG exist and that [off, off+n) lies in
// one chunk of that PG.
func pgOf(m *clustermap.Map, vol uint64, pg uint32, off, n uint64) (*clustermap.Volume, *clustermap.PG, error) {
	v, p, err := repl.Locate(m, vol, pg, off, n)
	return v, p, grpcErr(err)
}

// writerOf converts a request's writer for the core (nil stays nil).
func writerOf(w *pb.Writer) *repl.Writer {
	if w == nil {
		return nil
	}
	return &repl.Writer{ID: w.Id, Epoch: w.Epoch}
}

// admit runs the primary's checks for a client request on a PG (the core
// decides: repl.Core.Admit): the PG did not change since the request's
// epoch, this brick leads it with a lease and a settled hand-off, the
// writer is not fenced (w nil: a read), its in-sync replicas were
// reconciled since this brick took the lead (reconcile.go); then it takes
// the request's blocks (spans: exclusive for changes, shared for reads:
// pglock.go) and checks the PG is not waiting for a missed
// replica to be resynced (Core.Serve).
func (s *Server) admit(ctx context.Context, m *clustermap.Map, v *clustermap.Volume, pg uint32, p *clustermap.PG, epoch uint64, w *pb.Writer, spans []span) (unlock func(), err error) {
	k := pgKey{Vol: v.ID, PG: pg}
	req := repl.Request{PG: k, Epoch: epoch, Now: time.Now().UnixNano()}
	if w != nil {
		if w.Id == "" {
			return nil, status.Error(codes.InvalidArgument, "write without a writer id")
		}
		req.Writer = writerOf(w)
	}
	s.pgMu.Lock()
	reconcile, err := s.core.Admit(m, req)
	s.pgMu.Unlock()
	if err != nil {
		return nil, grpcErr(err)
	}
	if reconcile {
		if err := s.ensureReconciled(ctx, m, v, pg, p); err != nil {
			return nil, err
		}
	}
	unlock = s.lockBlocks(k, spans, w != nil)
	s.pgMu.Lock()
	err = s.core.Serve(m, k)
	s.pgMu.Unlock()
	if err != nil {
		unlock()
		s.kickCore()
		return nil, grpcErr(err)
	}
	return unlock, nil
}

func storeErr(err error, what string) error {
	switch {
	case errors.Is(err, store.ErrNoSpace):
		return status.Errorf(codes.ResourceExhausted, "%s: %v (free space on that brick, raise its --capacity, or add bricks)", what, err)
	case errors.Is(err, store.ErrCorrupt):
		return status.Errorf(codes.DataLoss, "%s: %v", what, err)
	case status.Code(err) != codes.Unknown:
		return err
	}
	return status.Errorf(codes.Internal, "%s: %v", what, err)
}

// Write merges data into the blocks it covers, assigns seqs, and applies
// the result here and on every other member of the PG before answering.
func (s *Server) Write(ctx context.Context, r *pb.WriteRequest) (*pb.WriteResponse, error) {
	w := clientWrite{epoch: r.MapEpoch, vol: r.Vol, pg: r.Pg, writer: r.Writer, reserved: r.Reserved, versionAt: r.VersionAt}
	return s.write(ctx, w, []*pb.Extent{{Offset: r.Offset, Data: r.Data, FileVersion: r.FileVersion}})
}

// WriteV is Write of several extents of one PG as one change (one
// admission, one store batch per member, one Replicate per backup);
// extents apply in order, a later one winning where two overlap.
func (s *Server) WriteV(ctx context.Context, r *pb.WriteVRequest) (*pb.WriteResponse, error) {
	w := clientWrite{epoch: r.MapEpoch, vol: r.Vol, pg: r.Pg, writer: r.Writer, reserved: r.Reserved}
	return s.write(ctx, w, r.Extents)
}

// clientWrite is what Write and WriteV share besides their extents.
type clientWrite struct {
	epoch     uint64
	vol       uint64
	pg        uint32
	writer    *pb.Writer
	reserved  bool
	versionAt uint32
}

func (s *Server) write(ctx context.Context, r clientWrite, exts []*pb.Extent) (*pb.WriteResponse, error) {
	defer s.inflight.enter(kindWrite)()
	exts = slices.DeleteFunc(exts, func(e *pb.Extent) bool { return len(e.Data) == 0 })
	if len(exts) == 0 {
		return &pb.WriteResponse{}, nil
	}
	if r.writer == nil {
		return nil, status.Error(codes.InvalidArgument, "write without a writer id")
	}
	start := time.Now()
	m, done, err := s.begin(ctx, r.epoch, r.vol, r.pg)
	if err != nil {
		return nil, err
	}
	defer done()
	v, p, spans, n, err := checkWrite(m, r, exts)
	if err != nil {
		return nil, err
	}
	unlock, err := s.admit(ctx, m, v, r.pg, p, r.epoch, r.writer, spans)
	if err != nil {
		return nil, err
	}
	defer unlock()
	ops, stale, err := s.writeOps(ctx, m, v, p, r, exts)
	if err != nil {
		return nil, err
	}
	if len(ops) > 0 {
		if err := s.replicate(ctx, m, v, r.pg, p, r.writer, ops, r.reserved); err != nil {
			return nil, err
		}
	}
	s.io.Write(n, time.Since(start))
	return &pb.WriteResponse{Stale: stale}, nil
}

// checkWrite checks a write's extents (non-empty) against m: each lies in
// one chunk of the PG, versioned ones cover whole blocks, and all of them
// touch at most store.BatchOpsMax blocks. It returns the PG, the blocks of
// each extent and the bytes written.
func checkWrite(m *clustermap.Map, r clientWrite, exts []*pb.Extent) (v *clustermap.Volume, p *clustermap.PG, spans []span, n int, err error) {
	spans = make([]span, len(exts))
	blocks := uint64(0)
	for i, e := range exts {
		if v, p, err = pgOf(m, r.vol, r.pg, e.Offset, uint64(len(e.Data))); err != nil {
			return nil, nil, nil, 0, err
		}
		if err := checkFileVersion(v, e.FileVersion); err != nil {
			return nil, nil, nil, 0, err
		}
		if r.versionAt > 0 && e.FileVersion != 0 {
			return nil, nil, nil, 0, status.Errorf(codes.InvalidArgument, "write at %d of file version %d is versioned too (version_at): give one or the other", e.Offset, e.FileVersion)
		}
		if r.versionAt > 0 && (e.Offset%limits.BlockBytes != 0 || len(e.Data)%limits.BlockBytes != 0 || r.versionAt+7 > limits.BlockBytes) {
			return nil, nil, nil, 0, status.Errorf(codes.InvalidArgument, "versioned write at %d length %d (version at byte %d): must cover whole %d-byte blocks", e.Offset, len(e.Data), r.versionAt-1, limits.BlockBytes)
		}
		spans[i].lo, spans[i].hi = repl.BlockRange(e.Offset, uint64(len(e.Data)), limits.BlockBytes)
		n, blocks = n+len(e.Data), blocks+spans[i].hi-spans[i].lo
	}
	if blocks > store.BatchOpsMax {
		return nil, nil, nil, 0, status.Errorf(codes.InvalidArgument, "write of %d extents touching %d blocks: at most %d blocks per request", len(exts), blocks, store.BatchOpsMax)
	}
	return v, p, spans, n, nil
}

// checkFileVersion refuses a file version (f != 0) on a volume without
// file versions, and one above clustermap.FileVersionMax.
func checkFileVersion(v *clustermap.Volume, f uint32) error {
	switch {
	case f == 0:
		return nil
	case !v.FileVersions:
		return status.Errorf(codes.InvalidArgument, "volume %s does not keep file versions", v.Name)
	case f > clustermap.FileVersionMax:
		return status.Errorf(codes.InvalidArgument, "file version %d of volume %s: at most %d", f, v.Name, clustermap.FileVersionMax)
	}
	return nil
}

// writeOps turns a write's extents into one put per block they touch, each
// with its own seq, stored at the gen of the extent's file version
// (Volume.StoreGen): a whole block as given, a partial one merged into the
// live volume's bytes (or into the put of an earlier extent of the same
// write), a versioned one only if newer than the stored block (else
// counted in stale). The caller holds the blocks.
func (s *Server) writeOps(ctx context.Context, m *clustermap.Map, v *clustermap.Volume, p *clustermap.PG, r clientWrite, exts []*pb.Extent) (ops []store.Op, stale uint32, err error) {
	var at map[uint64]int // block -> its op, when several extents may share blocks
	if len(exts) > 1 {
		at = make(map[uint64]int)
	}
	for _, e := range exts {
		lo, hi := repl.BlockRange(e.Offset, uint64(len(e.Data)), limits.BlockBytes)
		for b := lo; b < hi; b++ {
			// Inclusive ends: the last block of the space ends at 2^64-1.
			bStart := b * limits.BlockBytes
			from := max(bStart, e.Offset)
			last := min(bStart+limits.BlockBytes-1, e.Offset+uint64(len(e.Data))-1)
			piece := e.Data[from-e.Offset : last-e.Offset+1]
			gen := v.StoreGen(e.FileVersion)
			i, earlier := at[b]
			if earlier && ops[i].Key.Gen == gen { // an earlier extent of this write put it
				ops[i].Data = repl.Merge(ops[i].Data, limits.BlockBytes, int(from-bStart), piece)
				continue
			}
			var block []byte
			switch {
			case earlier: // of another file version: over what the live volume will read
				block = repl.Merge(ops[i].Data, limits.BlockBytes, int(from-bStart), piece)
			case r.versionAt > 0:
				base, err := s.readBlock(ctx, m, v, p, b, store.Reader{Gen: v.LiveReadGen()})
				if err != nil {
					return nil, 0, err
				}
				if !repl.VersionNewer(base, piece, int(r.versionAt-1)) {
					stale++
					if repl.VersionFork(base, piece, int(r.versionAt-1)) {
						s.log.WarnContext(ctx, "versioned write of a block with the same version but other bytes; kept the stored block", "vol", v.Name, "block", b, "writer", r.writer.Id)
					}
					continue
				}
				block = piece
			case len(piece) == limits.BlockBytes:
				block = piece
			default:
				base, err := s.readBlock(ctx, m, v, p, b, store.Reader{Gen: v.LiveReadGen()})
				if err != nil {
					return nil, 0, err
				}
				block = repl.Merge(base, limits.BlockBytes, int(from-bStart), piece)
			}
			seq, err := s.nextSeq(m.Epoch)
			if err != nil {
				return nil, 0, err
			}
			if at != nil {
				at[b] = len(ops)
			}
			ops = append(ops, store.Op{Kind: store.OpPut, Key: store.Key{Vol: v.ID, Block: b, Gen: gen}, Seq: seq, Data: block})
		}
	}
	return ops, stale, nil
}

// replicate applies ops locally and on every other member, in parallel,
// and succeeds only if all did (repl.Decide). A member that failed may
// have missed what the others applied: it is marked faulty until the
// coordinator has made it syncing (under a new Since, so a backfill pass
// that predates the miss does not count) and the PG refuses requests
// meanwhile (repl.Core.Serve). A write an in-sync backup refused (full, failing)
// comes back Unavailable: its retry succeeds on the members left in sync.
// When this brick's own apply failed and an in-sync member applied the ops,
// this brick is the one that missed them (see core.go). reserved ops may
// use the space stores keep for metadata (store.ApplyReserved).
func (s *Server) replicate(ctx context.Context, m *clustermap.Map, v *clustermap.Volume, pg uint32, p *clustermap.PG, w *pb.Writer, ops []store.Op, reserved bool) error {
	others := slices.DeleteFunc(slices.Clone(p.Bricks), func(b string) bool { return b == s.cfg.Name })
	type result struct {
		brick string
		err   error
		sure  bool // the member certainly did not apply the change
	}
	results := make(chan result, len(others)+1)
	// Once the primary starts applying, every member finishes the change
	// even if the client gives up: a member cut off by the client's
	// cancellation would count as one that missed it, and be resynced.
	ctx = context.WithoutCancel(ctx)
	go func() {
		if err := s.applyOps(ctx, ops, reserved); err != nil {
			results <- result{s.cfg.Name, storeErr(err, fmt.Sprintf("brick %s: apply", s.cfg.Name)), true}
			return
		}
		results <- result{brick: s.cfg.Name}
	}()
	req := &pb.ReplicateRequest{MapEpoch: m.Epoch, Vol: v.ID, Pg: pg, Primary: s.cfg.Name, Writer: w, Ops: toPB(ops), Reserved: reserved}
	for _, b := range others {
		go func() {
			cl, err := s.peers.client(m, b)
			if err == nil {
				rctx, cancel := context.WithTimeout(ctx, replicateTimeout)
				_, err = cl.Replicate(rctx, req)
				cancel()
			}
			sure := false
			if err != nil {
				code := status.Code(err)
				// These a backup answers before it applies anything.
				sure = code == codes.PermissionDenied || code == codes.ResourceExhausted || code == codes.FailedPrecondition || code == codes.InvalidArgument
				if code != codes.PermissionDenied && code != codes.ResourceExhausted {
					code = codes.Unavailable
				}
				err = status.Errorf(code, "replicate volume %s pg %d to %s: %v", v.Name, pg, b, errMsg(err))
			}
			results <- result{b, err, sure}
		}()
	}
	var replies repl.Replies
	var localErr, fenceErr, first error
	for range len(others) + 1 {
		r := <-results
		switch {
		case r.err == nil:
			replies.Applied = append(replies.Applied, r.brick)
			continue
		case r.brick == s.cfg.Name:
			localErr = r.err
		case status.Code(r.err) == codes.PermissionDenied:
			fenceErr = r.err
		}
		if r.sure {
			replies.Refused = append(replies.Refused, r.brick)
		} else {
			replies.Unknown = append(replies.Unknown, r.brick)
		}
		if first == nil {
			first = r.err
		}
	}
	replies.Fenced = fenceErr != nil
	s.pgMu.Lock()
	out := s.core.Replicated(pgKey{Vol: v.ID, PG: pg}, p.Since, replies, p.Syncing)
	s.pgMu.Unlock()
	if len(out.Missed) > 0 {
		s.log.WarnContext(ctx, "replicas missed a change; marking them for resync", "vol", v.Name, "pg", pg, "missed", out.Missed, "err", errMsg(first))
		s.kickCore()
	}
	switch {
	case out.OK:
		return nil
	case fenceErr != nil:
		return fenceErr
	case out.Retry:
		return status.Errorf(codes.Unavailable, "volume %s pg %d: %s; the replicas that missed it are being resynced: retry", v.Name, pg, errMsg(first))
	case localErr != nil:
		return localErr
	}
	return first
}

// applyOps applies ops to this brick's store, reserved ones with
// store.ApplyReserved.
func (s *Server) applyOps(ctx context.Context, ops []store.Op, reserved bool) error {
	if reserved {
		return s.store.ApplyReserved(ctx, ops)
	}
	return s.store.Apply(ctx, ops)
}

func errMsg(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Message()
	}
	return err.Error()
}

// readBlock returns the block's bytes as r reads them (nil means zeros),
// repairing a corrupt local copy from another in-sync member and
// resolving a ref (resolveRef): a partial write over a coded block merges
// into its data, never into zeros or the ref's bytes.
func (s *Server) readBlock(ctx context.Context, m *clustermap.Map, v *clustermap.Volume, p *clustermap.PG, block uint64, r store.Reader) ([]byte, error) {
	data, e, err := s.store.LatestAt(v.ID, block, r)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return s.checked(ctx, m, v, p, data, e, err)
}

// checked returns the bytes of a block the store read (nil: zeros, for a
// tombstone), repairing a corrupt local copy from another in-sync member.
// For a ref (e.Ref), data is its payload and the block's bytes are what
// resolveRef makes of it.
func (s *Server) checked(ctx context.Context, m *clustermap.Map, v *clustermap.Volume, p *clustermap.PG, data []byte, e store.Entry, err error) ([]byte, error) {
	switch {
	case errors.Is(err, store.ErrCorrupt):
		s.log.WarnContext(ctx, "corrupt block; repairing from a replica", "vol", v.Name, "block", e.Key.Block, "err", err)
		op, err := s.repair(ctx, m, v, p, e.Key)
		switch {
		case err != nil:
			return nil, err
		case op.Kind == store.OpRef:
			return s.resolveRef(ctx, v.ID, op.Key.Block, op.Ref)
		}
		return op.Data, nil // nil for a tombstone
	case err != nil:
		return nil, storeErr(err, "read")
	case e.Tombstone:
		return nil, nil
	case e.Ref:
		return s.resolveRef(ctx, v.ID, e.Key.Block, data)
	}
	return data, nil
}
