package brick_test

import (
	"bytes"
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// TestShards: the members of a stripe group store, read, list and delete
// their shards of stripes; a brick refuses shards of positions it does not
// hold and writes placed under an older membership.
func TestShards(t *testing.T) {
	cl := startCluster(t, 4, time.Hour)
	createVolume(t, cl, "v", false)
	resp := ensureProfile(t, cl, "v", 2, 1)
	m, err := clustermap.Decode(resp.MapJson)
	if err != nil {
		t.Fatal(err)
	}
	v := m.Volume("v")
	if resp.Id != 1 || len(v.SGs) == 0 {
		t.Fatalf("profile 2+1: id %d, %d stripe groups", resp.Id, len(v.SGs))
	}
	g := v.SGs[0]
	clients := map[string]pb.BrickClient{}
	for _, name := range g.Bricks {
		conn, err := coordclient.Dial(m.Brick(name).Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		clients[name] = pb.NewBrickClient(conn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const chunk, seq = 7, 1234
	block := func(shard, i int) []byte { return bytes.Repeat([]byte{byte(16*shard + i + 1)}, limits.BlockBytes) }
	for shard, name := range g.Bricks {
		data := slices.Concat(block(shard, 0), block(shard, 1), block(shard, 2))
		if _, err := clients[name].ShardPut(ctx, &pb.ShardPutRequest{MapEpoch: m.Epoch, Vol: v.ID, Sg: 0, Shard: uint32(shard),
			Chunk: chunk, StripeSeq: seq, First: 1, Data: data}); err != nil {
			t.Fatalf("shard put on %s: %v", name, err)
		}
	}
	for shard, name := range g.Bricks {
		r, err := clients[name].ShardRead(ctx, &pb.ShardReadRequest{MapEpoch: m.Epoch, Vol: v.ID, Sg: 0, Shard: uint32(shard),
			Chunk: chunk, StripeSeq: seq, First: 0, Blocks: 4})
		if err != nil {
			t.Fatalf("shard read on %s: %v", name, err)
		}
		want := slices.Concat(make([]byte, limits.BlockBytes), block(shard, 0), block(shard, 1), block(shard, 2))
		if !bytes.Equal(r.Data, want) || !slices.Equal(r.Missing, []uint32{0}) || len(r.Corrupt) != 0 {
			t.Fatalf("shard %d read: missing %v corrupt %v, data equal %v", shard, r.Missing, r.Corrupt, bytes.Equal(r.Data, want))
		}
		// Another stripe seq of the same chunk is another stripe.
		r, err = clients[name].ShardRead(ctx, &pb.ShardReadRequest{MapEpoch: m.Epoch, Vol: v.ID, Sg: 0, Shard: uint32(shard),
			Chunk: chunk, StripeSeq: seq + 1, First: 1, Blocks: 1})
		if err != nil || !slices.Equal(r.Missing, []uint32{0}) {
			t.Fatalf("read of another stripe seq: %v %v", r, err)
		}
		inv, err := clients[name].ShardInventory(ctx, &pb.ShardInventoryRequest{MapEpoch: m.Epoch, Vol: v.ID, Sg: 0})
		if err != nil {
			t.Fatal(err)
		}
		var got []*pb.StripeBlocks
		for {
			ir, err := inv.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ir.Stripes...)
		}
		if len(got) != 1 || got[0].Chunk != chunk || got[0].StripeSeq != seq || got[0].Blocks != 3 {
			t.Fatalf("inventory of %s: %v", name, got)
		}
	}

	// Refusals: another position, an epoch below the group's Since, bad data.
	other := g.Bricks[1]
	for what, req := range map[string]*pb.ShardPutRequest{
		"wrong position": {MapEpoch: m.Epoch, Vol: v.ID, Sg: 0, Shard: 0, Chunk: chunk, StripeSeq: seq, Data: block(0, 0)},
		"stale epoch":    {MapEpoch: g.Since - 1, Vol: v.ID, Sg: 0, Shard: 1, Chunk: chunk, StripeSeq: seq, Data: block(0, 0)},
		"partial block":  {MapEpoch: m.Epoch, Vol: v.ID, Sg: 0, Shard: 1, Chunk: chunk, StripeSeq: seq, Data: []byte("x")},
		"past the shard": {MapEpoch: m.Epoch, Vol: v.ID, Sg: 0, Shard: 1, Chunk: chunk, StripeSeq: seq, First: 1 << 20, Data: block(0, 0)},
		"no such group":  {MapEpoch: m.Epoch, Vol: v.ID, Sg: 999, Shard: 1, Chunk: chunk, StripeSeq: seq, Data: block(0, 0)},
	} {
		_, err := clients[other].ShardPut(ctx, req)
		if c := status.Code(err); c != codes.FailedPrecondition && c != codes.InvalidArgument && c != codes.NotFound {
			t.Errorf("%s: %v, want a refusal", what, err)
		}
	}

	// Delete: every member then lacks the stripe.
	for shard, name := range g.Bricks {
		if _, err := clients[name].ShardDelete(ctx, &pb.ShardDeleteRequest{MapEpoch: m.Epoch, Vol: v.ID, Sg: 0, Chunk: chunk, StripeSeq: seq}); err != nil {
			t.Fatal(err)
		}
		r, err := clients[name].ShardRead(ctx, &pb.ShardReadRequest{MapEpoch: m.Epoch, Vol: v.ID, Sg: 0, Shard: uint32(shard),
			Chunk: chunk, StripeSeq: seq, First: 1, Blocks: 3})
		if err != nil || len(r.Missing) != 3 {
			t.Fatalf("after delete, %s: missing %v err %v", name, r.GetMissing(), err)
		}
	}
}
