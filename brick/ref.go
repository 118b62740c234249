package brick

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/brick/ec"
	"github.com/plumeria-fs/plumeria/brick/store"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// Refs at the brick (docs/plan-j.md, "Erasure coding"). A coded block's
// entry at a home replica is a ref (store.OpRef): the 13-byte payload of
// an ec.Ref naming the stripe that holds the block's data, at the block's
// own key. A ref is another version of the block with the same content,
// so between bricks it travels as a put does: replicated (BlockOp REF),
// backfilled and reconciled (pushKeys), repaired (FetchBlock answers it as
// a ref, copied as it is), listed in inventories and block versions,
// pruned and dropped with its PG. Only a read needs its data, and a read
// never takes a ref for zeros or for its payload: every read path meets
// it in checked, which asks resolveRef.
//
// The primary swaps puts for refs with swapToRefs; the reverse (a ref
// back to a put) is an ordinary write of the block.

// resolveRef returns the data of block of volume vol whose live entry at
// this brick is the ref payload ref: read from the stripe it names, or
// rebuilt from the stripe's other shards (stripe.go readCoded). DataLoss
// for a payload that is not a ref.
func (s *Server) resolveRef(ctx context.Context, vol, block uint64, ref []byte) ([]byte, error) {
	r, err := ec.DecodeRef(ref)
	if err != nil {
		return nil, status.Errorf(codes.DataLoss, "block %d/%d holds a bad ref %x: %v", vol, block, ref, err)
	}
	return s.readCoded(ctx, vol, block, r)
}

// coderWriter is the writer id a swap's changes carry (fencing applies to
// clients; nobody fences this one), as pruneWriter is a prune's.
var coderWriter = &pb.Writer{Id: "plumeria.ec"}

// errSwapLate is wrapped by swapToRefs when it would swap past its bound.
var errSwapLate = errors.New("brick: swap to refs too late for the stripe collector")

// refSwap asks swapToRefs to replace the entry of block at gen, if it
// still has seq, by the ref payload ref (ec.EncodeRef) or, with data set
// instead, by a put of data (moving a coded block back home: the entry
// must then be a ref).
type refSwap struct {
	block, gen uint64
	seq        uint64 // the seq of the entry the caller read (and coded)
	ref        []byte
	data       []byte // one block; nil for a swap to a ref
}

// swapToRefs replaces, at the primary of PG pg of volume vol and on every
// member, the entries the caller read (and coded into a stripe) by refs
// to it. It runs as a primary-initiated change with seqs of its own, as a
// prune does (pruneChunk): under the serving map, admitted as a write by
// coderWriter holding the blocks exclusively, through replicate with its
// fault handling. So every member swaps the same entries in the PG's
// order of changes, or misses the change and is resynced like a member
// that missed a write.
//
// A block whose entry at (block, gen) no longer has the seq the caller
// read, or is gone or a tombstone, is left as it is (a write or decommit
// came between the read and the swap): only unchanged entries are
// swapped, so no reader's bytes change. An entry at gen that a newer gen
// has since hidden from the live volume keeps its content and may still
// be swapped. It returns the count swapped; the others were left alone.
//
// notAfter, unless zero, bounds when the swap may happen: if, holding
// the blocks, the time is past it, nothing is swapped and the error wraps
// errSwapLate (the stripe collector's bound on a coding step, stripegc.go).
// Errors: InvalidArgument for a block outside the PG, a key given twice,
// a payload that is not a valid ref, or more than store.BatchOpsMax
// blocks; the admission's and replication's refusals as a write gets.
func (s *Server) swapToRefs(ctx context.Context, vol uint64, pg uint32, blocks []refSwap, notAfter time.Time) (swapped int, err error) {
	if len(blocks) == 0 {
		return 0, nil
	}
	if len(blocks) > store.BatchOpsMax {
		return 0, status.Errorf(codes.InvalidArgument, "swap of %d blocks to refs: at most %d at once", len(blocks), store.BatchOpsMax)
	}
	m, done, err := s.begin(ctx, s.serving.Load().Epoch, vol, pg)
	if err != nil {
		return 0, err
	}
	defer done()
	v, p, err := pgOf(m, vol, pg, 0, 0)
	if err != nil {
		return 0, err
	}
	keys, spans, err := checkSwaps(v, pg, blocks)
	if err != nil {
		return 0, err
	}
	unlock, err := s.admit(ctx, m, v, pg, p, m.Epoch, coderWriter, spans)
	if err != nil {
		return 0, err
	}
	defer unlock()
	if late := time.Since(notAfter); !notAfter.IsZero() && late > 0 {
		return 0, fmt.Errorf("swap to refs %v past its bound: %w", late.Round(time.Millisecond), errSwapLate)
	}
	metas, err := s.store.Metas(keys)
	if err != nil {
		return 0, storeErr(err, "swap to refs")
	}
	var ops []store.Op
	home := blocks[0].data != nil // checkSwaps: all of one kind
	for i, b := range blocks {
		if me := metas[i]; !me.Present || me.Tombstone || me.Seq != b.seq || home && !me.Ref {
			continue
		}
		seq, err := s.nextSeq(m.Epoch)
		if err != nil {
			return 0, err
		}
		op := store.Op{Kind: store.OpRef, Key: keys[i], Seq: seq, Ref: b.ref}
		if home {
			op = store.Op{Kind: store.OpPut, Key: keys[i], Seq: seq, Data: b.data}
		}
		ops = append(ops, op)
	}
	if len(ops) == 0 {
		return 0, nil
	}
	// A swap to refs frees space (a 4 KiB put becomes a 65-byte ref), so
	// it may use the metadata reserve, as a prune does: a full brick must
	// still be able to code its data away. Moving data home takes space
	// like any write.
	if err := s.replicate(ctx, m, v, pg, p, coderWriter, ops, !home); err != nil {
		return 0, err
	}
	return len(ops), nil
}

// checkSwaps checks a swap's blocks against v and returns their keys and
// the spans to hold: each block in PG pg, each key once, each payload a
// valid ref.
func checkSwaps(v *clustermap.Volume, pg uint32, blocks []refSwap) ([]store.Key, []span, error) {
	per := uint64(v.ChunkBytes) / limits.BlockBytes
	keys := make([]store.Key, len(blocks))
	spans := make([]span, len(blocks))
	seen := make(map[store.Key]bool, len(blocks))
	for i, b := range blocks {
		if got := clustermap.PGOfChunk(v.ID, b.block/per, len(v.PGs)); got != pg {
			return nil, nil, status.Errorf(codes.InvalidArgument, "swap of block %d of volume %s to a ref at pg %d: the block is in pg %d", b.block, v.Name, pg, got)
		}
		switch {
		case (b.data != nil) != (blocks[0].data != nil):
			return nil, nil, status.Errorf(codes.InvalidArgument, "swap of block %d of volume %s: refs and puts mixed in one swap", b.block, v.Name)
		case b.data != nil && (len(b.data) != limits.BlockBytes || b.ref != nil):
			return nil, nil, status.Errorf(codes.InvalidArgument, "swap of block %d of volume %s home: %d bytes, want one block and no ref", b.block, v.Name, len(b.data))
		case b.data == nil:
			if _, err := ec.DecodeRef(b.ref); err != nil {
				return nil, nil, status.Errorf(codes.InvalidArgument, "swap of block %d of volume %s: %v", b.block, v.Name, err)
			}
		}
		keys[i] = store.Key{Vol: v.ID, Block: b.block, Gen: b.gen}
		if seen[keys[i]] {
			return nil, nil, status.Errorf(codes.InvalidArgument, "swap of block %d gen %d of volume %s given twice", b.block, b.gen, v.Name)
		}
		seen[keys[i]] = true
		spans[i] = span{b.block, b.block + 1}
	}
	return keys, spans, nil
}
