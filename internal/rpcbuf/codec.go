package rpcbuf

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// codec is gRPC's protobuf codec (google.golang.org/grpc/encoding/proto)
// with its buffers from the shared pool instead of gRPC's default one,
// which clears each buffer it hands out: the encoded message on the
// sending side and the reassembled one on the receiving side. It replaces
// the "proto" codec for the whole process (registered when this package
// is loaded, after gRPC's own).
type codec struct{}

func init() { encoding.RegisterCodecV2(codec{}) }

func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m := messageOf(v)
	if m == nil {
		return nil, fmt.Errorf("proto: cannot marshal %T: not a proto.Message", v)
	}
	size := proto.Size(m)
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := proto.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := shared.Get(size)
	// UseCachedSize: the size was just computed, and a message being sent
	// is not changed meanwhile.
	b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend((*buf)[:0], m)
	if err != nil {
		shared.Put(buf)
		return nil, err
	}
	*buf = b
	return mem.BufferSlice{mem.NewBuffer(buf, shared)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	if in, ok := v.(*Into); ok {
		return in.decode(data)
	}
	m := messageOf(v)
	if m == nil {
		return fmt.Errorf("proto: cannot unmarshal into %T: not a proto.Message", v)
	}
	if len(data) == 1 { // one frame: no reassembly
		return proto.Unmarshal(data[0].ReadOnlyData(), m)
	}
	buf := data.MaterializeToBuffer(shared)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

func messageOf(v any) proto.Message {
	switch v := v.(type) {
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v)
	case protoadapt.MessageV2:
		return v
	}
	return nil
}
