package brick

import (
	"testing"

	"google.golang.org/protobuf/proto"

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
	f.Add([]byte{})
	f.Add([]byte{0x32, 0x02, 0x08, 0x07})
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
			if op.Kind < 1 || op.Kind > 3 {
				t.Fatalf("accepted op kind %d", op.Kind)
			}
			if op.Data != nil && len(op.Data) != limits.BlockBytes {
				t.Fatalf("accepted %d data bytes", len(op.Data))
			}
		}
	})
}
