package rpcbuf

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/plumeria-fs/plumeria/internal/pb"
)

func TestPoolSizes(t *testing.T) {
	p := &Pool{}
	for _, n := range []int{0, 1, 256, 257, 4096, 1 << 20, 1<<20 + 100, 1<<20 + 16<<10 + 1, 8 << 20} {
		b := p.Get(n)
		if len(*b) != n {
			t.Fatalf("Get(%d): length %d", n, len(*b))
		}
		if i := tierFor(n); i >= 0 && cap(*b) != tiers[i] {
			t.Fatalf("Get(%d): capacity %d, want the tier's %d", n, cap(*b), tiers[i])
		}
		p.Put(b)
		// A prefix comes back to the same tier and is handed out whole.
		c := p.Get(n)
		if len(*c) != n || cap(*c) < n {
			t.Fatalf("Get(%d) after Put: length %d capacity %d", n, len(*c), cap(*c))
		}
	}
	// A buffer the pool did not make (odd capacity) is not pooled.
	odd := make([]byte, 300)
	p.Put(&odd)
	if b := p.Get(300); cap(*b) != 4<<10 {
		t.Fatalf("Get(300) returned a foreign buffer of capacity %d", cap(*b))
	}
}

func TestCodecRoundTrip(t *testing.T) {
	if _, ok := encoding.GetCodecV2("proto").(codec); !ok {
		t.Fatalf("the proto codec is %T, not this package's", encoding.GetCodecV2("proto"))
	}
	for _, n := range []int{0, 100, 1 << 20, 3<<20 + 7} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i * 7)
		}
		bs, err := codec{}.Marshal(&pb.ReadResponse{Data: data})
		if err != nil {
			t.Fatal(err)
		}
		// As received: cut into 16 KiB frames, reassembled by Unmarshal;
		// the buffers are freed (and may be reused, dirty) before the
		// message is looked at.
		flat := bs.Materialize()
		bs.Free()
		var frames mem.BufferSlice
		for len(flat) > 0 {
			k := min(len(flat), 16<<10)
			frames = append(frames, mem.Copy(flat[:k], shared))
			flat = flat[k:]
		}
		var got pb.ReadResponse
		if err := (codec{}).Unmarshal(frames, &got); err != nil {
			t.Fatal(err)
		}
		frames.Free()
		for range 4 { // dirty the pool's buffers
			b := shared.Get(n + 64)
			for i := range *b {
				(*b)[i] = 0xAA
			}
			shared.Put(b)
		}
		if !bytes.Equal(got.Data, data) {
			t.Fatalf("%d bytes: round trip changed the data", n)
		}
	}
	if _, err := (codec{}).Marshal("not a message"); err == nil {
		t.Fatal("Marshal of a string: no error")
	}
}

// frames cuts b into buffers at the given cut points (as gRPC's frames).
func frames(b []byte, cuts []byte) mem.BufferSlice {
	var out mem.BufferSlice
	for i := 0; len(b) > 0; i++ {
		k := len(b)
		if i < len(cuts) {
			k = min(k, int(cuts[i])%17+1)
		}
		out = append(out, mem.SliceBuffer(b[:k:k]))
		b = b[k:]
	}
	return out
}

// checkInto decodes msg (cut at cuts) with Into and the usual way, and
// fails if they disagree.
func checkInto(t *testing.T, msg, cuts []byte, dstLen int) {
	t.Helper()
	var want pb.WriteRequest
	wantErr := proto.Unmarshal(msg, &want)
	in := &Into{Msg: &pb.WriteRequest{}, Field: 5, Dst: make([]byte, dstLen)}
	err := codec{}.Unmarshal(frames(msg, cuts), in)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("Into: error %v, usual decode: %v", err, wantErr)
	}
	if err != nil {
		return
	}
	if in.N != len(want.Data) {
		t.Fatalf("Into: N %d, the field has %d bytes", in.N, len(want.Data))
	}
	if in.N <= dstLen && !bytes.Equal(in.Dst[:in.N], want.Data) {
		t.Fatalf("Into: field bytes differ")
	}
	got := in.Msg.(*pb.WriteRequest)
	if len(got.Data) != 0 {
		t.Fatalf("Into: Msg kept the field (%d bytes)", len(got.Data))
	}
	want.Data = nil
	if !proto.Equal(got, &want) {
		t.Fatalf("Into: other fields differ: %v, want %v", got, &want)
	}
}

func TestInto(t *testing.T) {
	data := make([]byte, 100_000)
	for i := range data {
		data[i] = byte(i * 13)
	}
	full, err := proto.Marshal(&pb.WriteRequest{MapEpoch: 7, Vol: 1<<40 + 3, Pg: 9, Offset: 1 << 33, Data: data, Writer: &pb.Writer{Id: "n1", Epoch: 5}, Reserved: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, cuts := range [][]byte{nil, {0}, {1, 2, 3, 4, 5, 6, 7, 8, 9}, bytes.Repeat([]byte{16}, 10000)} {
		checkInto(t, full, cuts, len(data))
		checkInto(t, full, cuts, len(data)-1) // too small: nothing copied, N says so
		for _, k := range []int{1, 5, 20, len(full) - 1} {
			checkInto(t, full[:k], cuts, len(data)) // truncated: an error, as proto
		}
	}
	// The field twice: the last one wins, as in proto.
	twice := protowire.AppendBytes(protowire.AppendTag(full, 5, protowire.BytesType), []byte("last"))
	checkInto(t, twice, []byte{3, 3, 3}, len(data))
	// Through gRPC's frames as sent: the reply of a chunk read.
	bs, err := codec{}.Marshal(&pb.ReadResponse{Data: data})
	if err != nil {
		t.Fatal(err)
	}
	flat := bs.Materialize()
	in := &Into{Msg: &pb.ReadResponse{}, Field: 1, Dst: make([]byte, len(data))}
	if err := (codec{}).Unmarshal(frames(flat, bytes.Repeat([]byte{255}, 100)), in); err != nil || in.N != len(data) || !bytes.Equal(in.Dst, data) {
		t.Fatalf("chunk read reply: err %v, N %d", err, in.N)
	}
}

func FuzzInto(f *testing.F) {
	full, _ := proto.Marshal(&pb.WriteRequest{MapEpoch: 1, Data: []byte("0123456789abcdef"), Writer: &pb.Writer{Id: "x"}})
	f.Add(full, []byte{1, 2, 3}, uint8(16))
	f.Add(full[:7], []byte{0}, uint8(3))
	f.Add([]byte{0x2a, 0x80}, []byte{}, uint8(0))
	f.Add([]byte{0x2b, 0x2c}, []byte{1}, uint8(0)) // a group
	f.Fuzz(func(t *testing.T, msg, cuts []byte, dstLen uint8) {
		checkInto(t, msg, cuts, int(dstLen))
	})
}

// TestIntoFrom: a reply handed over as a message (an in-process call)
// lands as a decoded one would: the field in Dst (N its length; nothing
// copied when Dst is too small), every other field in Msg, the message
// itself unchanged; a reply of another type is refused.
func TestIntoFrom(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 1000)
	m := &pb.WriteRequest{MapEpoch: 7, Vol: 3, Data: data, Writer: &pb.Writer{Id: "n1", Epoch: 5}}
	orig := proto.Clone(m)
	for _, dst := range []int{len(data), len(data) + 5, len(data) - 1} {
		in := &Into{Msg: &pb.WriteRequest{Pg: 99}, Field: 5, Dst: make([]byte, dst)}
		if err := in.From(m); err != nil {
			t.Fatal(err)
		}
		if in.N != len(data) || (dst >= len(data)) != bytes.Equal(in.Dst[:min(dst, len(data))], data) {
			t.Fatalf("Dst of %d bytes: N %d, copied %v", dst, in.N, bytes.Equal(in.Dst[:min(dst, len(data))], data))
		}
		want := proto.Clone(m).(*pb.WriteRequest)
		want.Data = nil
		if !proto.Equal(in.Msg, want) {
			t.Fatalf("Msg %v, want %v", in.Msg, want)
		}
		in.Msg.(*pb.WriteRequest).Writer.Id = "changed" // a copy, not m's
	}
	if !proto.Equal(m, orig) {
		t.Fatalf("From changed its argument: %v", m)
	}
	in := &Into{Msg: &pb.ReadResponse{}, Field: 1, Dst: make([]byte, 10)}
	if err := in.From(m); err == nil {
		t.Fatal("a WriteRequest read into a ReadResponse")
	}
}
