package brick

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/brick/repl"
	"github.com/plumeria-fs/plumeria/brick/store"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// replicateTimeout bounds one replication to a backup before the primary
// reports it as having missed the change (the backup is then resynced: a
// map change and a backfill). A backup that is alive but slow (its disk
// busy with a queue of writes to the same PG, which it applies in turn)
// must not be taken for a failed one: resyncs under load add load. A dead
// backup is taken out of the map by the coordinator's heartbeats anyway.
const replicateTimeout = 10 * time.Second

// Read serves a range within one chunk from the primary's store, as of the
// live volume or a named snapshot, and on a volume with file versions as of
// a file version (clustermap/fileversions.go).
func (s *Server) Read(ctx context.Context, r *pb.ReadRequest) (*pb.ReadResponse, error) {
	defer s.inflight.enter(kindRead)()
	start := time.Now()
	m, done, err := s.begin(ctx, r.MapEpoch, r.Vol, r.Pg)
	if err != nil {
		return nil, err
	}
	defer done()
	v, p, err := pgOf(m, r.Vol, r.Pg, r.Offset, uint64(r.Length))
	if err != nil {
		return nil, err
	}
	lo, hi := repl.BlockRange(r.Offset, uint64(r.Length), limits.BlockBytes)
	unlock, err := s.admit(ctx, m, v, r.Pg, p, r.MapEpoch, nil, []span{{lo, hi}})
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := checkFileVersion(v, r.FileVersion); err != nil {
		return nil, err
	}
	reader := store.Reader{Gen: v.LiveReadGen(), Version: r.FileVersion}
	if r.Snapshot != "" {
		g, ok := v.SnapshotReadGen(r.Snapshot)
		if !ok {
			return nil, status.Errorf(codes.NotFound, "volume %s has no snapshot %q", v.Name, r.Snapshot)
		}
		reader.Gen = g
	}
	out := make([]byte, r.Length)
	// A read of whole blocks (a chunk, a page) lands in out as it is read.
	var into []byte
	if r.Offset%limits.BlockBytes == 0 && uint64(r.Length)%limits.BlockBytes == 0 {
		into = out
	}
	blocks, err := s.store.LatestRangeAt(v.ID, lo, hi, reader, into)
	if err != nil {
		return nil, storeErr(err, "read")
	}
	for _, blk := range blocks {
		if blk.InDst {
			continue
		}
		data := blk.Data
		if blk.Entry.Ref {
			data = blk.Ref // not in dst, not zeros: checked resolves it
		}
		data, err := s.checked(ctx, m, v, p, data, blk.Entry, blk.Err)
		if err != nil {
			return nil, err
		}
		if data == nil {
			continue // a tombstone
		}
		// Inclusive ends: the last block of the space ends at 2^64-1.
		b := blk.Entry.Key.Block
		bStart := b * limits.BlockBytes
		from := max(bStart, r.Offset)
		last := min(bStart+limits.BlockBytes-1, r.Offset+uint64(r.Length)-1)
		copy(out[from-r.Offset:last-r.Offset+1], data[from-bStart:last-bStart+1])
	}
	s.io.Read(len(out), time.Since(start))
	return &pb.ReadResponse{Data: out}, nil
}

// repair fetches key from another in-sync member, verifies it arrived
// whole, rewrites the local copy and returns the op it applied: a put, a
// tombstone, or a ref (copied as the ref it is, not resolved).
func (s *Server) repair(ctx context.Context, m *clustermap.Map, v *clustermap.Volume, p *clustermap.PG, key store.Key) (store.Op, error) {
	if key == (store.Key{}) {
		k, ok, err := s.latestKey(v.ID, key.Block, key.Gen)
		if err != nil || !ok {
			return store.Op{}, status.Errorf(codes.DataLoss, "volume %s: corrupt block and its key cannot be found: %v", v.Name, err)
		}
		key = k
	}
	var lastErr error
	for _, b := range p.InSync() {
		if b == s.cfg.Name {
			continue
		}
		cl, err := s.peers.client(m, b)
		if err != nil {
			lastErr = err
			continue
		}
		r, err := cl.FetchBlock(ctx, &pb.FetchBlockRequest{Vol: key.Vol, Block: key.Block, Gen: key.Gen})
		if err != nil {
			lastErr = fmt.Errorf("%s: %s", b, errMsg(err))
			continue
		}
		op, err := fetchedOp(key, r)
		if err != nil {
			lastErr = fmt.Errorf("%s sent %w", b, err)
			continue
		}
		if err := s.store.Apply(ctx, []store.Op{op}); err != nil {
			return store.Op{}, storeErr(err, "rewrite repaired block")
		}
		s.log.InfoContext(ctx, "repaired corrupt block from replica", "vol", v.Name, "block", key.Block, "gen", key.Gen, "from", b, "ref", op.Kind == store.OpRef)
		repairs.Inc()
		return op, nil
	}
	return store.Op{}, status.Errorf(codes.DataLoss, "volume %s block %d gen %d: corrupt here and no replica could supply it (last error: %v)", v.Name, key.Block, key.Gen, lastErr)
}

// fetchedOp turns a FetchBlock answer for key into the op that stores
// it: a tombstone, a ref (exactly store.RefBytes, no data) or a put
// (exactly one block).
func fetchedOp(key store.Key, r *pb.FetchBlockResponse) (store.Op, error) {
	switch {
	case r.Tombstone && len(r.Data)+len(r.Ref) == 0:
		return store.Op{Kind: store.OpTombstone, Key: key, Seq: r.Seq}, nil
	case r.Tombstone:
		return store.Op{}, fmt.Errorf("a tombstone with %d data and %d ref bytes", len(r.Data), len(r.Ref))
	case len(r.Ref) > 0:
		if len(r.Ref) != store.RefBytes || len(r.Data) != 0 {
			return store.Op{}, fmt.Errorf("a ref of %d bytes with %d data bytes", len(r.Ref), len(r.Data))
		}
		return store.Op{Kind: store.OpRef, Key: key, Seq: r.Seq, Ref: r.Ref}, nil
	case len(r.Data) != limits.BlockBytes:
		return store.Op{}, fmt.Errorf("%d bytes for a block", len(r.Data))
	}
	return store.Op{Kind: store.OpPut, Key: key, Seq: r.Seq, Data: r.Data}, nil
}

// latestKey finds the key Latest(vol, block, maxGen) would read.
func (s *Server) latestKey(vol, block, maxGen uint64) (store.Key, bool, error) {
	var k store.Key
	found := false
	err := s.store.Scan(vol, block, block+1, func(e store.Entry) bool {
		if e.Gen <= maxGen {
			k, found = e.Key, true
		}
		return true
	})
	return k, found, err
}

// FetchBlock returns one exact stored block, verified by the local store;
// a ref goes as its payload (FetchBlockResponse.ref), never resolved.
func (s *Server) FetchBlock(ctx context.Context, r *pb.FetchBlockRequest) (*pb.FetchBlockResponse, error) {
	data, e, err := s.store.Get(store.Key{Vol: r.Vol, Block: r.Block, Gen: r.Gen})
	if errors.Is(err, store.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "brick %s holds no block %d gen %d of volume %d", s.cfg.Name, r.Block, r.Gen, r.Vol)
	}
	if err != nil {
		return nil, storeErr(err, "fetch block")
	}
	if e.Ref {
		return &pb.FetchBlockResponse{Seq: e.Seq, Ref: data}, nil
	}
	return &pb.FetchBlockResponse{Data: data, Seq: e.Seq, Tombstone: e.Tombstone}, nil
}

// Decommit frees the blocks of [offset, offset+length) that this PG holds:
// blocks only the live generation uses are removed; blocks a snapshot still
// sees are hidden by a tombstone. Partly covered blocks are zeroed. On a
// volume with file versions it does so at the request's file version: the
// readers of earlier ones still read what they did.
func (s *Server) Decommit(ctx context.Context, r *pb.DecommitRequest) (*pb.DecommitResponse, error) {
	defer s.inflight.enter(kindWrite)()
	m, done, err := s.begin(ctx, r.MapEpoch, r.Vol, r.Pg)
	if err != nil {
		return nil, err
	}
	defer done()
	v, p, err := pgOf(m, r.Vol, r.Pg, 0, 0)
	if err != nil {
		return nil, err
	}
	if r.Length == 0 {
		return &pb.DecommitResponse{}, nil
	}
	if r.Offset+r.Length < r.Offset && r.Offset+r.Length != 0 {
		return nil, status.Errorf(codes.InvalidArgument, "decommit at %d length %d passes 2^64", r.Offset, r.Length)
	}
	if r.Writer == nil {
		return nil, status.Error(codes.InvalidArgument, "decommit without a writer id")
	}
	if err := checkFileVersion(v, r.FileVersion); err != nil {
		return nil, err
	}
	// The blocks the range touches, partly covered ones included; an end
	// of 0 is 2^64.
	lo, hi := r.Offset/limits.BlockBytes, ^uint64(0)
	if end := r.Offset + r.Length; end != 0 {
		hi = (end-1)/limits.BlockBytes + 1
	}
	unlock, err := s.admit(ctx, m, v, r.Pg, p, r.MapEpoch, r.Writer, []span{{lo, hi}})
	if err != nil {
		return nil, err
	}
	defer unlock()
	ops, err := s.decommitOps(ctx, m, v, r.Pg, p, r.Offset, r.Length, r.FileVersion)
	if err != nil {
		return nil, err
	}
	for len(ops) > 0 {
		n := min(len(ops), decommitBatchOps)
		// Freeing space may use the metadata reserve: a full volume
		// must still let its users delete.
		if err := s.replicate(ctx, m, v, r.Pg, p, r.Writer, ops[:n], true); err != nil {
			return nil, err
		}
		ops = ops[n:]
	}
	return &pb.DecommitResponse{}, nil
}

const decommitBatchOps = 1024

// decommitOps returns the changes of a decommit of [off, off+n) at file
// version f (0: none), all at gen = v.StoreGen(f): per whole block, the
// entry at exactly gen ("cur") is removed if no older entry exists, else
// a tombstone at gen hides the older ones (a snapshot or a reader of an
// earlier file version may read them); partly covered blocks get a put at
// gen of the live bytes with the range zeroed. Entries above gen (none,
// while the file system's versions of a block grow within a generation)
// are left alone.
func (s *Server) decommitOps(ctx context.Context, m *clustermap.Map, v *clustermap.Volume, pg uint32, p *clustermap.PG, off, n uint64, f uint32) ([]store.Op, error) {
	gen := v.StoreGen(f)
	end := off + n // 0 means 2^64
	blo := off / limits.BlockBytes
	if off%limits.BlockBytes != 0 {
		blo++
	}
	bhi := end / limits.BlockBytes
	if end == 0 {
		bhi = ^uint64(0)
	}
	blocksPerChunk := uint64(v.ChunkBytes) / limits.BlockBytes
	var ops []store.Op
	add := func(op store.Op) error {
		seq, err := s.nextSeq(m.Epoch)
		op.Seq = seq
		ops = append(ops, op)
		return err
	}
	// Whole blocks: collect what is stored, per block.
	var curBlock uint64
	var gens []store.Entry
	flush := func() error {
		if len(gens) == 0 {
			return nil
		}
		defer func() { gens = gens[:0] }()
		var cur, lastOlder *store.Entry
		for i := range gens {
			if gens[i].Gen == gen {
				cur = &gens[i]
			} else {
				lastOlder = &gens[i]
			}
		}
		switch {
		case lastOlder == nil && cur != nil:
			return add(store.Op{Kind: store.OpRemove, Key: cur.Key})
		case lastOlder == nil:
			return nil
		case cur != nil && cur.Tombstone:
			return nil // the live volume already reads zeros here
		case cur == nil && lastOlder.Tombstone && (!v.FileVersions || uint32(lastOlder.Gen) <= uint32(gen)):
			return nil // so do the live volume and the readers of file versions from gen's on
		}
		// A snapshot, or a reader of an earlier file version, sees an
		// older entry: hide it from the live volume.
		return add(store.Op{Kind: store.OpTombstone, Key: store.Key{Vol: v.ID, Block: gens[0].Block, Gen: gen}})
	}
	var scanErr error
	visit := func(e store.Entry) bool {
		if clustermap.PGOfChunk(v.ID, e.Block/blocksPerChunk, len(v.PGs)) != pg || e.Gen > gen {
			return true
		}
		if e.Block != curBlock {
			if scanErr = flush(); scanErr != nil {
				return false
			}
			curBlock = e.Block
		}
		gens = append(gens, e)
		return true
	}
	if blo < bhi {
		var err error
		if clo, chi := blo/blocksPerChunk, (bhi-1)/blocksPerChunk+1; chi-clo <= decommitChunksMax {
			// Only this PG's chunks of the range: the others' blocks
			// (15 in 16 with 16 PGs) need not be visited.
			for c := clo; c < chi && err == nil && scanErr == nil; c++ {
				if clustermap.PGOfChunk(v.ID, c, len(v.PGs)) == pg {
					err = s.store.Scan(v.ID, max(blo, c*blocksPerChunk), min(bhi, (c+1)*blocksPerChunk), visit)
				}
			}
		} else {
			err = s.store.Scan(v.ID, blo, bhi, visit)
		}
		if err == nil {
			err = scanErr
		}
		if err == nil {
			err = flush()
		}
		if err != nil {
			return nil, storeErr(err, "decommit scan")
		}
	}
	// Partly covered edge blocks are zeroed in place.
	for _, edge := range edgeRanges(off, end) {
		b := edge[0] / limits.BlockBytes
		if clustermap.PGOfChunk(v.ID, b/blocksPerChunk, len(v.PGs)) != pg {
			continue
		}
		base, err := s.readBlock(ctx, m, v, p, b, store.Reader{Gen: v.LiveReadGen()})
		if err != nil {
			return nil, err
		}
		if base == nil {
			continue
		}
		within := int(edge[0] - b*limits.BlockBytes)
		block := repl.Merge(base, limits.BlockBytes, within, make([]byte, edge[1]-edge[0]))
		if err := add(store.Op{Kind: store.OpPut, Key: store.Key{Vol: v.ID, Block: b, Gen: gen}, Data: block}); err != nil {
			return nil, status.Errorf(codes.Unavailable, "%v", err)
		}
	}
	return ops, nil
}

// BlockVersions lists the entries the primary holds for the block at
// r.Offset at or below the live volume's reader gen, ascending, each as
// the generation it was written in, its file version and whether it is a
// tombstone or a ref. Admitted as a read.
func (s *Server) BlockVersions(ctx context.Context, r *pb.BlockVersionsRequest) (*pb.BlockVersionsResponse, error) {
	defer s.inflight.enter(kindRead)()
	m, done, err := s.begin(ctx, r.MapEpoch, r.Vol, r.Pg)
	if err != nil {
		return nil, err
	}
	defer done()
	v, p, err := pgOf(m, r.Vol, r.Pg, r.Offset, 1)
	if err != nil {
		return nil, err
	}
	b := r.Offset / limits.BlockBytes
	unlock, err := s.admit(ctx, m, v, r.Pg, p, r.MapEpoch, nil, []span{{b, b + 1}})
	if err != nil {
		return nil, err
	}
	defer unlock()
	live := v.LiveReadGen()
	resp := &pb.BlockVersionsResponse{}
	err = s.store.Scan(v.ID, b, b+1, func(e store.Entry) bool {
		if e.Gen > live {
			return false
		}
		g, f := v.SplitStoreGen(e.Gen)
		resp.Versions = append(resp.Versions, &pb.BlockVersionsResponse_Version{SnapGen: g, FileVersion: f, Tombstone: e.Tombstone, Ref: e.Ref})
		return true
	})
	if err != nil {
		return nil, storeErr(err, "block versions")
	}
	return resp, nil
}

// decommitChunksMax bounds the chunks of a decommit's range scanned one by
// one (this PG's only); a larger range (a whole volume) is scanned whole.
const decommitChunksMax = 1 << 16

// edgeRanges returns the partly covered block pieces [from, to) at the
// start and end of [off, end). An end or to of 0 stands for 2^64.
func edgeRanges(off, end uint64) [][2]uint64 {
	bs := uint64(limits.BlockBytes)
	var out [][2]uint64
	if off%bs != 0 {
		to := (off/bs + 1) * bs // 0 when the block is the last one
		if end != 0 && (to == 0 || end <= to) {
			return [][2]uint64{{off, end}}
		}
		out = append(out, [2]uint64{off, to})
	}
	if end != 0 && end%bs != 0 && end/bs*bs >= off {
		out = append(out, [2]uint64{end / bs * bs, end})
	}
	return out
}
