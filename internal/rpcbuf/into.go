package rpcbuf

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
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
// as proto decodes it; 0 if absent): when N > len(Dst) nothing was copied
// and the caller must treat the reply as wrong. Dst[:N] is written only
// when the whole message decodes without error.
type Into struct {
	Msg   proto.Message
	Field protowire.Number
	Dst   []byte
	N     int
}

var errTruncated = errors.New("proto: message truncated")

// decode reads the message from data without reassembling it.
func (in *Into) decode(data mem.BufferSlice) error {
	r := frameReader{bufs: data, left: data.Len()}
	var rest []byte // every other field as it came, for proto.Unmarshal
	type span struct{ start, n int }
	var last *span // the field's last occurrence: offset in the message, length
	for r.left > 0 {
		// Other fields are kept as they came (unknown ones too), so
		// the tag and varints are copied, not encoded again.
		mark := len(rest)
		tag, rest1, err := r.varint(rest, true)
		if err != nil {
			return err
		}
		rest = rest1
		num, typ := protowire.DecodeTag(tag)
		switch typ {
		case protowire.VarintType:
			if _, rest, err = r.varint(rest, false); err != nil {
				return err
			}
		case protowire.Fixed32Type, protowire.Fixed64Type:
			n := 4
			if typ == protowire.Fixed64Type {
				n = 8
			}
			if rest, err = r.appendN(rest, n); err != nil {
				return err
			}
		case protowire.BytesType:
			v, rest1, err := r.varint(rest, false)
			if err != nil {
				return err
			}
			rest = rest1
			if v > uint64(r.left) {
				return errTruncated
			}
			n := int(v)
			if num == in.Field {
				rest = rest[:mark]
				last = &span{r.off(), n}
				r.skip(n)
				continue
			}
			if rest, err = r.appendN(rest, n); err != nil {
				return err
			}
		default:
			// Groups (not in proto3, but valid wire format): decode the
			// usual way.
			return in.decodeWhole(data)
		}
	}
	if err := proto.Unmarshal(rest, in.Msg); err != nil {
		return err
	}
	in.N = 0
	if last != nil {
		in.N = last.n
		if last.n <= len(in.Dst) {
			r := frameReader{bufs: data, left: data.Len()}
			r.skip(last.start)
			r.copyTo(in.Dst[:last.n])
		}
	}
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

// frameReader reads a message across the buffers it arrived in.
type frameReader struct {
	bufs mem.BufferSlice
	i    int    // the buffer being read
	b    []byte // what is left of it
	left int    // bytes left in all buffers
	read int    // bytes read so far
}

func (r *frameReader) off() int { return r.read }

// cur returns the unread part of the current buffer, moving to the next
// non-empty one as needed; nil at the end.
func (r *frameReader) cur() []byte {
	for len(r.b) == 0 {
		if r.i >= len(r.bufs) {
			return nil
		}
		r.b = r.bufs[r.i].ReadOnlyData()
		r.i++
	}
	return r.b
}

func (r *frameReader) advance(n int) {
	r.b = r.b[n:]
	r.left -= n
	r.read += n
}

// varint reads a varint (a tag when tag is set) with protowire's checks and
// appends its bytes as they were to dst.
func (r *frameReader) varint(dst []byte, tag bool) (uint64, []byte, error) {
	var scratch [binaryMaxVarint]byte
	b := r.cur()
	if len(b) < len(scratch) && len(b) < r.left { // it may span buffers
		b = scratch[:r.peekInto(scratch[:])]
	}
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
	dst = append(dst, b[:n]...)
	r.skip(n)
	return v, dst, nil
}

// binaryMaxVarint is the longest a varint may be.
const binaryMaxVarint = 10

// peekInto copies the next bytes into p without consuming them; it returns
// how many it copied.
func (r *frameReader) peekInto(p []byte) int {
	save := *r
	defer func() { *r = save }()
	n := 0
	for n < len(p) {
		c := r.cur()
		if c == nil {
			break
		}
		k := copy(p[n:], c)
		r.advance(k)
		n += k
	}
	return n
}

// skip consumes n bytes (n <= r.left).
func (r *frameReader) skip(n int) {
	for n > 0 {
		c := r.cur()
		k := min(n, len(c))
		r.advance(k)
		n -= k
	}
}

// copyTo fills p from the message (len(p) <= r.left).
func (r *frameReader) copyTo(p []byte) {
	for len(p) > 0 {
		c := r.cur()
		k := copy(p, c)
		r.advance(k)
		p = p[k:]
	}
}

// appendN appends the next n bytes to dst.
func (r *frameReader) appendN(dst []byte, n int) ([]byte, error) {
	if n > r.left {
		return dst, errTruncated
	}
	for n > 0 {
		c := r.cur()
		k := min(n, len(c))
		dst = append(dst, c[:k]...)
		r.advance(k)
		n -= k
	}
	return dst, nil
}
