package nfs

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// XDR (RFC 4506) on byte slices. The decoder reads one RPC record that is
// already in memory: it never allocates for opaque data (WRITE payloads
// and names alias the record) and bounds every length by what is left, so
// a hostile length cannot make it allocate. Errors are sticky: after the
// first one every read returns zero values and err says what was short.
//
// The XDR codec served here (rasky/go-xdr, under go-nfs-client) reads
// through an io.Reader with an allocation per integer and copies opaque
// data; a server that decodes a 1 MiB WRITE per request wants neither.

// errGarbage marks arguments that do not decode (GARBAGE_ARGS).
var errGarbage = errors.New("nfs: malformed XDR")

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) short(what string, n int) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s needs %d bytes, %d left", errGarbage, what, n, len(d.b))
	}
	d.b = nil
}

func (d *decoder) u32() uint32 {
	if len(d.b) < 4 {
		d.short("uint32", 4)
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) u64() uint64 {
	if len(d.b) < 8 {
		d.short("uint64", 8)
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) boolean() bool {
	v := d.u32()
	if v > 1 && d.err == nil {
		d.err = fmt.Errorf("%w: bool %d", errGarbage, v)
	}
	return v == 1
}

// fixed returns the next n bytes (and skips their padding), aliasing the record.
func (d *decoder) fixed(n int) []byte {
	padded := (n + 3) &^ 3
	if n < 0 || len(d.b) < padded {
		d.short("opaque", padded)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[padded:]
	return v
}

// opaque reads a variable-length opaque of at most max bytes.
func (d *decoder) opaque(max int) []byte {
	n := d.u32()
	if d.err != nil {
		return nil
	}
	if n > uint32(max) {
		if d.err == nil {
			d.err = fmt.Errorf("%w: opaque of %d bytes, at most %d", errGarbage, n, max)
		}
		d.b = nil
		return nil
	}
	return d.fixed(int(n))
}

func (d *decoder) str(max int) string { return string(d.opaque(max)) }

// encoder appends XDR to b.
type encoder struct{ b []byte }

func (e *encoder) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *encoder) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }

func (e *encoder) boolean(v bool) {
	if v {
		e.u32(1)
	} else {
		e.u32(0)
	}
}

// fixed appends p and its padding.
func (e *encoder) fixed(p []byte) {
	e.b = append(e.b, p...)
	if pad := (4 - len(p)%4) % 4; pad > 0 {
		e.b = append(e.b, make([]byte, pad)...)
	}
}

func (e *encoder) opaque(p []byte) { e.u32(uint32(len(p))); e.fixed(p) }

func (e *encoder) str(s string) {
	e.u32(uint32(len(s)))
	e.b = append(e.b, s...)
	if pad := (4 - len(s)%4) % 4; pad > 0 {
		e.b = append(e.b, make([]byte, pad)...)
	}
}
