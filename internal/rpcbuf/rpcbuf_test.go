package rpcbuf

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

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
