package coordclient

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"

	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/internal/rpcbuf"
)

type smallServer struct{ pb.UnimplementedBrickServer }

func (smallServer) Replicate(context.Context, *pb.ReplicateRequest) (*pb.ReplicateResponse, error) {
	return &pb.ReplicateResponse{}, nil
}

// BenchmarkSmallRPC: one small unary call at a time (a 4 KiB Replicate and
// its empty answer), with the options every Plumeria client and brick use:
// the round trip a replicated 4 KiB write pays per hop.
func BenchmarkSmallRPC(b *testing.B) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(limits.RPCMessageBytesMax), grpc.MaxSendMsgSize(limits.RPCMessageBytesMax),
		grpc.InitialWindowSize(limits.RPCStreamWindowBytes), grpc.InitialConnWindowSize(limits.RPCConnWindowBytes), rpcbuf.ServerOption(),
		grpc.NumStreamWorkers(limits.RPCStreamWorkers))
	pb.RegisterBrickServer(gs, smallServer{})
	go gs.Serve(lis)
	defer gs.Stop()
	cc, err := Dial(lis.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	cl := pb.NewBrickClient(cc)
	req := &pb.ReplicateRequest{Writer: &pb.Writer{Id: "w"}, Ops: []*pb.BlockOp{{Kind: pb.BlockOp_PUT, Data: make([]byte, limits.BlockBytes)}}}
	b.ResetTimer()
	for range b.N {
		if _, err := cl.Replicate(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
