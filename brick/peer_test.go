package brick

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/plumeria-fs/plumeria/brick/ec"
	"github.com/plumeria-fs/plumeria/brick/store"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// TestOpsWire: every op kind, a ref among them, survives toPB and fromPB
// as it was; a REF carries its payload in data and nothing else.
func TestOpsWire(t *testing.T) {
	ref := ec.EncodeRef(ec.Ref{SG: 3, StripeSeq: 1 << 40, Len: 7})
	key := func(b uint64) store.Key { return store.Key{Vol: 5, Block: b, Gen: 2} }
	ops := []store.Op{
		{Kind: store.OpPut, Key: key(1), Seq: 10, Data: bytes.Repeat([]byte{1}, limits.BlockBytes)},
		{Kind: store.OpRef, Key: key(2), Seq: 11, Ref: ref},
		{Kind: store.OpTombstone, Key: key(3), Seq: 12},
		{Kind: store.OpRemove, Key: key(4), Seq: 13},
	}
	wire := toPB(ops)
	if w := wire[1]; w.Kind != pb.BlockOp_REF || !bytes.Equal(w.Data, ref) || w.Block != 2 || w.Gen != 2 || w.Seq != 11 {
		t.Fatalf("ref on the wire: %v", w)
	}
	back, err := fromPB(5, wire)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, ops) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, ops)
	}
	for _, n := range []int{0, store.RefBytes - 1, store.RefBytes + 1, limits.BlockBytes} {
		_, err := fromPB(5, []*pb.BlockOp{{Kind: pb.BlockOp_REF, Block: 2, Seq: 1, Data: make([]byte, n)}})
		if err == nil || !strings.Contains(err.Error(), "ref of") {
			t.Fatalf("ref of %d bytes: %v", n, err)
		}
	}
	if _, err := fromPB(5, []*pb.BlockOp{{Kind: 4, Block: 2, Seq: 1}}); err == nil {
		t.Fatal("unknown kind 4 accepted")
	}
}

// TestFetchedOp: a FetchBlock answer becomes the op that stores it as it
// was: a ref as a ref, never as data; malformed answers are refused.
func TestFetchedOp(t *testing.T) {
	ref := ec.EncodeRef(ec.Ref{SG: 1, StripeSeq: 9, Len: 1})
	block := bytes.Repeat([]byte{4}, limits.BlockBytes)
	key := store.Key{Vol: 1, Block: 2, Gen: 3}
	for _, c := range []struct {
		r    *pb.FetchBlockResponse
		want store.Op
		bad  bool
	}{
		{r: &pb.FetchBlockResponse{Seq: 5, Data: block}, want: store.Op{Kind: store.OpPut, Key: key, Seq: 5, Data: block}},
		{r: &pb.FetchBlockResponse{Seq: 5, Ref: ref}, want: store.Op{Kind: store.OpRef, Key: key, Seq: 5, Ref: ref}},
		{r: &pb.FetchBlockResponse{Seq: 5, Tombstone: true}, want: store.Op{Kind: store.OpTombstone, Key: key, Seq: 5}},
		{r: &pb.FetchBlockResponse{Seq: 5, Ref: ref, Data: block}, bad: true},
		{r: &pb.FetchBlockResponse{Seq: 5, Ref: ref[:5]}, bad: true},
		{r: &pb.FetchBlockResponse{Seq: 5, Tombstone: true, Ref: ref}, bad: true},
		{r: &pb.FetchBlockResponse{Seq: 5, Data: ref}, bad: true}, // a ref's bytes as data
		{r: &pb.FetchBlockResponse{Seq: 5}, bad: true},
	} {
		op, err := fetchedOp(key, c.r)
		if (err != nil) != c.bad || (!c.bad && !reflect.DeepEqual(op, c.want)) {
			t.Fatalf("%v: %+v, %v", c.r, op, err)
		}
	}
}

// TestEntryOp: the op backfill and reconciliation send for an entry keeps
// its kind, a ref as a ref.
func TestEntryOp(t *testing.T) {
	ref := ec.EncodeRef(ec.Ref{SG: 1, StripeSeq: 9, Len: 1})
	key := store.Key{Vol: 1, Block: 2, Gen: 3}
	if op := entryOp(key, store.Entry{Key: key, Seq: 4, Ref: true}, ref); op.Kind != store.OpRef || !bytes.Equal(op.Ref, ref) || op.Data != nil || op.Seq != 4 {
		t.Fatalf("ref: %+v", op)
	}
	if op := entryOp(key, store.Entry{Key: key, Seq: 4, Tombstone: true}, nil); op.Kind != store.OpTombstone || op.Seq != 4 {
		t.Fatalf("tombstone: %+v", op)
	}
}
