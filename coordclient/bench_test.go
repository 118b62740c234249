package coordclient

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/internal/rpcbuf"
)

// chunkServer answers every Read with a fresh 1 MiB chunk, as a brick does.
type chunkServer struct {
	pb.UnimplementedBrickServer
	data []byte
}

func (s *chunkServer) Read(context.Context, *pb.ReadRequest) (*pb.ReadResponse, error) {
	return &pb.ReadResponse{Data: append([]byte(nil), s.data...)}, nil
}

// BenchmarkChunkRPC: what gRPC itself costs per byte of data on this
// machine, with the connection options every Plumeria client uses (Dial)
// and a server with the brick's message and window limits: 1 MiB
// responses, 16 in flight on one connection. MB/s is of chunk data; on
// the 2-core development machine it is ~1.1-1.4 GB/s with both cores busy,
// i.e. ~1.5 ms of CPU per MiB that crosses a connection (session 11).
func BenchmarkChunkRPC(b *testing.B) {
	cl := benchServer(b, &chunkServer{data: make([]byte, 1<<20)})
	if _, err := cl.Read(context.Background(), &pb.ReadRequest{}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(1 << 20)
	b.ResetTimer()
	work := make(chan struct{}, b.N)
	for range b.N {
		work <- struct{}{}
	}
	close(work)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range work {
				if _, err := cl.Read(context.Background(), &pb.ReadRequest{}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// benchServer serves srv on loopback with a brick's gRPC options and
// returns a client dialed as every Plumeria client dials.
func benchServer(b *testing.B, srv pb.BrickServer) pb.BrickClient {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(limits.RPCMessageBytesMax), grpc.MaxSendMsgSize(limits.RPCMessageBytesMax),
		grpc.InitialWindowSize(limits.RPCStreamWindowBytes), grpc.InitialConnWindowSize(limits.RPCConnWindowBytes), rpcbuf.ServerOption(),
		grpc.NumStreamWorkers(limits.RPCStreamWorkers))
	pb.RegisterBrickServer(gs, srv)
	go gs.Serve(lis)
	b.Cleanup(gs.Stop)
	cc, err := Dial(lis.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	return pb.NewBrickClient(cc)
}

type smallServer struct{ pb.UnimplementedBrickServer }

func (smallServer) Replicate(context.Context, *pb.ReplicateRequest) (*pb.ReplicateResponse, error) {
	return &pb.ReplicateResponse{}, nil
}

// BenchmarkSmallRPC: one small unary call at a time (a 4 KiB Replicate and
// its empty answer), with the options every Plumeria client and brick use:
// the round trip a replicated 4 KiB write pays per hop (80-110 us on the
// 2-core development machine when idle, session 14).
func BenchmarkSmallRPC(b *testing.B) {
	cl := benchServer(b, smallServer{})
	req := &pb.ReplicateRequest{Writer: &pb.Writer{Id: "w"}, Ops: []*pb.BlockOp{{Kind: pb.BlockOp_PUT, Data: make([]byte, limits.BlockBytes)}}}
	b.ResetTimer()
	for range b.N {
		if _, err := cl.Replicate(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
