package nfs

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys"
)

// sinkConn is a connection whose replies are checked and dropped.
type sinkConn struct {
	net.Conn
	t       *testing.T
	replies int
}

func (c *sinkConn) Write(p []byte) (int, error) {
	// Every reply is one well-formed record.
	if _, err := readRecord(bufio.NewReader(bytes.NewReader(p)), nil, len(p)); err != nil {
		c.t.Fatalf("reply is not a record: %v", err)
	}
	c.replies++
	return len(p), nil
}
func (c *sinkConn) SetWriteDeadline(time.Time) error { return nil }
func (c *sinkConn) Close() error                     { return nil }

// FuzzServe feeds arbitrary records to the server as calls of an allowed
// client: none may crash it, and each gets at most one well-formed reply.
func FuzzServe(f *testing.F) {
	fsys := testFS(f)
	uuid, key, _ := fsys.Identity()
	s, err := New(fsys, uuid, key, Options{Export: "fs", Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, NoRootSquash: true})
	if err != nil {
		f.Fatal(err)
	}
	rootAttr, err := fsys.Getattr(context.Background(), filesys.RootIno)
	if err != nil {
		f.Fatal(err)
	}
	root := s.h.make(rootAttr.Ino, rootAttr.Gen)
	rc := &rawClient{t: f}
	strip := func(rec []byte) []byte { return rec[4:] }
	f.Add(strip(rc.callBytes(progMount, 1, func(e *encoder) { e.str("/fs") })))
	f.Add(strip(rc.callBytes(progPortmap, 3, func(e *encoder) { e.u32(progNFS); e.u32(3); e.u32(6); e.u32(0) })))
	for proc := range uint32(22) {
		f.Add(strip(rc.callBytes(progNFS, proc, func(e *encoder) {
			e.opaque(root)
			e.str("name")
			e.u64(0)
			e.u32(4096)
			e.u32(0)
			e.opaque([]byte("data"))
		})))
	}
	f.Add(strip(rc.callBytes(progNFS, 8, func(e *encoder) { e.opaque(root); e.str("x"); e.u32(createExclusive); e.u64(7) })))
	f.Fuzz(func(t *testing.T, rec []byte) {
		sc := &sinkConn{t: t}
		c := &conn{s: s, nc: sc, peer: netip.MustParseAddr("127.0.0.1"), allowed: true}
		c.serve(rec)
		if sc.replies > 1 {
			t.Fatalf("%d replies to one call", sc.replies)
		}
	})
}

// FuzzRecord checks record marking: any byte stream gives records no
// longer than the bound, or an error.
func FuzzRecord(f *testing.F) {
	f.Add([]byte{0x80, 0, 0, 4, 1, 2, 3, 4})
	f.Add([]byte{0, 0, 0, 2, 1, 2, 0x80, 0, 0, 1, 3})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReader(bytes.NewReader(in))
		for {
			rec, err := readRecord(r, nil, 64)
			if err != nil && err != errTooBig {
				return
			}
			if len(rec) > 64 {
				t.Fatalf("record of %d bytes, bound 64", len(rec))
			}
		}
	})
}

// FuzzHandle: no input but a handle made under the key parses.
func FuzzHandle(f *testing.F) {
	h := newHandles([16]byte{1}, [32]byte{2})
	f.Add(h.make(5, 9))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ino, gen, err := h.parse(b)
		if err == nil && !bytes.Equal(h.make(ino, gen), b) {
			t.Fatalf("parsed a handle not made here: %x", b)
		}
	})
}
