package rpcbuf

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Into is a reply whose one large bytes field is written straight into a
// buffer of the caller's: pass it as the reply of ClientConn.Invoke. A
// message arrives as gRPC frames (16 KiB each); decoding it the usual way
// copies every byte three times more (the frames reassembled into one
// buffer, the field copied out of it by proto, and the field copied into
// the caller's buffer) and allocates the field. Into copies the field's
// bytes once, from the frames to Dst (a chunk read: session 13).
//
// Every other field is decoded into Msg as usual; Msg's own copy of Field
// stays empty. N is the field's length as received (its last occurrence,
// as proto decodes it; 0 if absent): when N > len(Dst) it was not copied
// and the caller must treat the reply as wrong. Dst[:N] holds the field
// when decoding succeeds; after an error Dst may hold anything.
type Into struct {
	Msg   proto.Message
	Field protowire.Number
	Dst   []byte
	N     int
}

var errTruncated = errors.New("proto: message truncated")

// decode reads the message from data without reassembling it, through
// gRPC's reader over the frames.
func (in *Into) decode(data mem.BufferSlice) error {
	r := data.Reader()
	defer r.Close()
	var rest []byte // every other field as it came, for proto.Unmarshal
	in.N = 0
	for r.Remaining() > 0 {
		// Other fields are kept as they came (unknown ones too), so
		// the tag and varints are copied, not encoded again.
		mark := len(rest)
		tag, rest1, err := readVarint(r, rest, true)
		if err != nil {
			return err
		}
		rest = rest1
		num, typ := protowire.DecodeTag(tag)
		switch typ {
		case protowire.VarintType:
			_, rest, err = readVarint(r, rest, false)
		case protowire.Fixed32Type:
			rest, err = readN(r, rest, 4)
		case protowire.Fixed64Type:
			rest, err = readN(r, rest, 8)
		case protowire.BytesType:
			var v uint64
			if v, rest, err = readVarint(r, rest, false); err != nil {
				return err
			}
			if v > uint64(r.Remaining()) {
				return errTruncated
			}
			if num != in.Field {
				rest, err = readN(r, rest, int(v))
				break
			}
			rest, in.N = rest[:mark], int(v) // a later occurrence replaces it
			if in.N <= len(in.Dst) {
				_, err = io.ReadFull(r, in.Dst[:in.N])
			} else {
				_, err = io.CopyN(io.Discard, r, int64(in.N))
			}
		default:
			// Groups (not in proto3, but valid wire format): decode the
			// usual way.
			return in.decodeWhole(data)
		}
		if err != nil {
			return err
		}
	}
	return proto.Unmarshal(rest, in.Msg)
}

// From sets the reply from m, the reply message itself (an in-process
// call: internal/inproc) rather than its encoding: Field's bytes are
// copied into Dst as decode copies them (N set the same way), every other
// field is copied into Msg. m is not changed.
func (in *Into) From(m proto.Message) error {
	src := m.ProtoReflect()
	if src.Descriptor() != in.Msg.ProtoReflect().Descriptor() {
		return fmt.Errorf("proto: a %s reply cannot be read into a %s", src.Descriptor().FullName(), in.Msg.ProtoReflect().Descriptor().FullName())
	}
	proto.Reset(in.Msg)
	rest := src.New() // m without Field, sharing m's values
	in.N = 0
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Number() != in.Field {
			rest.Set(fd, v)
			return true
		}
		b := v.Bytes()
		if in.N = len(b); in.N <= len(in.Dst) {
			copy(in.Dst, b)
		}
		return true
	})
	proto.Merge(in.Msg, rest.Interface()) // copies what rest shares with m
	return nil
}

// decodeWhole decodes a reassembled copy of the message and moves the
// field into Dst.
func (in *Into) decodeWhole(data mem.BufferSlice) error {
	if err := proto.Unmarshal(data.Materialize(), in.Msg); err != nil {
		return err
	}
	m := in.Msg.ProtoReflect()
	fd := m.Descriptor().Fields().ByNumber(in.Field)
	if fd == nil {
		return fmt.Errorf("proto: %s has no field %d", m.Descriptor().FullName(), in.Field)
	}
	b := m.Get(fd).Bytes()
	in.N = len(b)
	if len(b) <= len(in.Dst) {
		copy(in.Dst, b)
	}
	m.Clear(fd)
	return nil
}

// readVarint reads a varint (a tag when tag is set) with protowire's
// checks and appends its bytes as they were to dst.
func readVarint(r *mem.Reader, dst []byte, tag bool) (uint64, []byte, error) {
	start := len(dst)
	for {
		c, err := r.ReadByte()
		if err != nil {
			return 0, dst, errTruncated
		}
		dst = append(dst, c)
		if c < 0x80 || len(dst)-start == protowire.SizeVarint(math.MaxUint64) {
			break
		}
	}
	b := dst[start:]
	var v uint64
	var n int
	if tag {
		num, typ, k := protowire.ConsumeTag(b)
		v, n = protowire.EncodeTag(num, typ), k
	} else {
		v, n = protowire.ConsumeVarint(b)
	}
	if n < 0 {
		return 0, dst, protowire.ParseError(n)
	}
	return v, dst, nil
}

// readN appends the next n bytes of r to dst.
func readN(r *mem.Reader, dst []byte, n int) ([]byte, error) {
	if n > r.Remaining() {
		return dst, errTruncated
	}
	dst = slices.Grow(dst, n)
	_, err := io.ReadFull(r, dst[len(dst):len(dst)+n])
	return dst[:len(dst)+n], err
}
