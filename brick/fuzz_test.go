package brick

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/plumeria-fs/plumeria/brick/ec"
	"github.com/plumeria-fs/plumeria/brick/store"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// FuzzReplicateDecode feeds arbitrary bytes through the decoding a backup
// does on a Replicate or Backfill request: protobuf, then op validation.
// It must never panic, and accepted ops must be well formed.
func FuzzReplicateDecode(f *testing.F) {
	good, _ := proto.Marshal(&pb.ReplicateRequest{MapEpoch: 3, Vol: 1, Pg: 2, Primary: "b1",
		Writer: &pb.Writer{Id: "w", Epoch: 1},
		Ops: []*pb.BlockOp{{Kind: pb.BlockOp_PUT, Block: 7, Gen: 1, Seq: 9, Data: make([]byte, limits.BlockBytes)},
			{Kind: pb.BlockOp_REMOVE, Block: 8, Gen: 1, Seq: 10}}})
	f.Add(good)
	withRef, _ := proto.Marshal(&pb.ReplicateRequest{MapEpoch: 3, Vol: 1, Pg: 2, Primary: "b1",
		Writer: &pb.Writer{Id: "plumeria.ec"},
		Ops: []*pb.BlockOp{{Kind: pb.BlockOp_REF, Block: 7, Gen: 1, Seq: 11, Data: ec.EncodeRef(ec.Ref{SG: 1, StripeSeq: 5, Len: 2})},
			{Kind: pb.BlockOp_REF, Block: 8, Gen: 1, Seq: 12, Data: make([]byte, store.RefBytes-1)}}})
	f.Add(withRef)
	f.Add([]byte{})
	f.Add([]byte{0x32, 0x02, 0x08, 0x07})
	f.Add([]byte{0x32, 0x04, 0x08, 0x03, 0x2a, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r pb.ReplicateRequest
		if err := proto.Unmarshal(b, &r); err != nil {
			return
		}
		ops, err := fromPB(r.Vol, r.Ops)
		if err != nil {
			return
		}
		for _, op := range ops {
			if op.Kind < store.OpPut || op.Kind > store.OpRef {
				t.Fatalf("accepted op kind %d", op.Kind)
			}
			if op.Data != nil && (op.Kind != store.OpPut || len(op.Data) != limits.BlockBytes) {
				t.Fatalf("accepted kind %d with %d data bytes", op.Kind, len(op.Data))
			}
			if (op.Kind == store.OpRef) != (op.Ref != nil) || op.Ref != nil && len(op.Ref) != store.RefBytes {
				t.Fatalf("accepted kind %d with %d ref bytes", op.Kind, len(op.Ref))
			}
		}
	})
}

// FuzzWriteVDecode feeds arbitrary bytes through what a primary does with
// a WriteV request before it takes any block: protobuf, then checkWrite
// against a map. It must never panic; an accepted write has each extent in
// one chunk of its PG, spans that match the extents, and at most
// store.BatchOpsMax blocks.
func FuzzWriteVDecode(f *testing.F) {
	m := &clustermap.Map{Epoch: 3, Volumes: []clustermap.Volume{{ID: 1, Name: "v", ChunkBytes: 64 << 10, PGs: make([]clustermap.PG, 4)}}}
	vol := &m.Volumes[0]
	off := uint64(0)
	for vol.PGOf(off) != 2 {
		off += 64 << 10
	}
	good, _ := proto.Marshal(&pb.WriteVRequest{MapEpoch: 3, Vol: 1, Pg: 2, Writer: &pb.Writer{Id: "w", Epoch: 1},
		Extents: []*pb.Extent{{Offset: off, Data: make([]byte, limits.BlockBytes)}, {Offset: off + 5000, Data: []byte("x")}}})
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{0x22, 0x04, 0x08, 0x07, 0x12, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r pb.WriteVRequest
		if err := proto.Unmarshal(b, &r); err != nil {
			return
		}
		exts := slices.DeleteFunc(r.Extents, func(e *pb.Extent) bool { return len(e.Data) == 0 })
		if len(exts) == 0 {
			return
		}
		_, p, spans, n, err := checkWrite(m, clientWrite{epoch: r.MapEpoch, vol: r.Vol, pg: r.Pg, writer: r.Writer}, exts)
		if err != nil {
			return
		}
		if p != &vol.PGs[r.Pg] || len(spans) != len(exts) {
			t.Fatalf("accepted pg %d with %d spans for %d extents", r.Pg, len(spans), len(exts))
		}
		blocks, bytes := uint64(0), 0
		for i, e := range exts {
			end := e.Offset + uint64(len(e.Data)) - 1
			if end < e.Offset || e.Offset/(64<<10) != end/(64<<10) || vol.PGOf(e.Offset) != r.Pg {
				t.Fatalf("accepted extent at %d of %d bytes", e.Offset, len(e.Data))
			}
			if spans[i].lo != e.Offset/limits.BlockBytes || spans[i].hi != end/limits.BlockBytes+1 {
				t.Fatalf("extent at %d of %d bytes: span %v", e.Offset, len(e.Data), spans[i])
			}
			blocks, bytes = blocks+spans[i].hi-spans[i].lo, bytes+len(e.Data)
		}
		if blocks > store.BatchOpsMax || bytes != n {
			t.Fatalf("accepted %d blocks, %d bytes (reported %d)", blocks, bytes, n)
		}
	})
}
