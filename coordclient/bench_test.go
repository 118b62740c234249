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
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(limits.RPCMessageBytesMax), grpc.MaxSendMsgSize(limits.RPCMessageBytesMax),
		grpc.InitialWindowSize(limits.RPCStreamWindowBytes), grpc.InitialConnWindowSize(limits.RPCConnWindowBytes), rpcbuf.ServerOption())
	pb.RegisterBrickServer(gs, &chunkServer{data: make([]byte, 1<<20)})
	go gs.Serve(lis)
	defer gs.Stop()
	cc, err := Dial(lis.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	cl := pb.NewBrickClient(cc)
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
