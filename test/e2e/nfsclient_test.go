package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// A bare ONC RPC (RFC 5531) client over TCP for the NFS gateway's tests:
// it builds every byte of a call itself, so a test can send what no
// client library would (a forged handle, a stable_how of its choice,
// garbage, an oversized record) and read back the exact reply (write
// verifiers, accept and reject states). One call at a time per client.

// RPC and NFS numbers the tests use (RFC 5531, RFC 1813).
const (
	rpcProgNFS   = 100003
	rpcProgMount = 100005

	rpcAcceptSuccess = 0
	rpcGarbageArgs   = 4
	rpcRejectAuth    = 1 // reject_stat AUTH_ERROR
	rpcAuthTooWeak   = 5

	nfsProcGetattr = 1
	nfsProcLookup  = 3
	nfsProcRead    = 6
	nfsProcWrite   = 7
	nfsProcCreate  = 8
	nfsProcLink    = 15
	nfsProcCommit  = 21
	mountProcMnt   = 1

	nfs3OK           = 0
	nfs3ErrAcces     = 13
	nfs3ErrROFS      = 30
	nfs3ErrStale     = 70
	nfs3ErrBadHandle = 10001
	mnt3ErrAcces     = 13

	stableUnstable = 0
	stableFileSync = 2

	rpcReplyTimeout = 90 * time.Second // a call may wait out a dead node's lease (15 s) and its recovery
)

// xdrEnc appends XDR (RFC 4506).
type xdrEnc struct{ b []byte }

func (e *xdrEnc) u32(v uint32) *xdrEnc { e.b = binary.BigEndian.AppendUint32(e.b, v); return e }
func (e *xdrEnc) u64(v uint64) *xdrEnc { e.b = binary.BigEndian.AppendUint64(e.b, v); return e }

func (e *xdrEnc) opaque(p []byte) *xdrEnc {
	e.u32(uint32(len(p)))
	e.b = append(e.b, p...)
	e.b = append(e.b, make([]byte, (4-len(p)%4)%4)...)
	return e
}

func (e *xdrEnc) str(s string) *xdrEnc { return e.opaque([]byte(s)) }

// xdrDec reads XDR; a short read sets err and returns zeros from then on.
type xdrDec struct {
	b   []byte
	err error
}

func (d *xdrDec) take(n int) []byte {
	if d.err != nil || len(d.b) < n {
		if d.err == nil {
			d.err = fmt.Errorf("reply short: want %d bytes, %d left", n, len(d.b))
		}
		return make([]byte, n)
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *xdrDec) u32() uint32 { return binary.BigEndian.Uint32(d.take(4)) }
func (d *xdrDec) u64() uint64 { return binary.BigEndian.Uint64(d.take(8)) }

func (d *xdrDec) opaque() []byte {
	n := int(d.u32())
	if n > 1<<21 {
		d.err = fmt.Errorf("opaque of %d bytes", n)
		return nil
	}
	p := d.take((n + 3) &^ 3)
	return bytes.Clone(p[:n])
}

// fattr3 is 84 bytes; the tests look at a few fields.
type fattr3 struct {
	typ, mode, uid, gid uint32
	size, fileid        uint64
}

func (d *xdrDec) fattr() fattr3 {
	var a fattr3
	a.typ, a.mode = d.u32(), d.u32()
	d.u32() // nlink
	a.uid, a.gid = d.u32(), d.u32()
	a.size = d.u64()
	d.take(8 + 8 + 8) // used, rdev, fsid
	a.fileid = d.u64()
	d.take(24) // atime, mtime, ctime
	return a
}

func (d *xdrDec) postOpAttr() {
	if d.u32() != 0 {
		d.fattr()
	}
}

func (d *xdrDec) wcc() {
	if d.u32() != 0 {
		d.take(24) // pre_op_attr: size, mtime, ctime
	}
	d.postOpAttr()
}

// rpcReply is a decoded reply: accepted with stat (accept_stat) and the
// results in body, or denied with stat (reject_stat) and auth (auth_stat).
type rpcReply struct {
	xid    uint32
	denied bool
	stat   uint32
	auth   uint32
	body   *xdrDec
}

func (r rpcReply) String() string {
	if r.denied {
		return fmt.Sprintf("xid %#x MSG_DENIED reject_stat %d auth_stat %d", r.xid, r.stat, r.auth)
	}
	return fmt.Sprintf("xid %#x MSG_ACCEPTED accept_stat %d", r.xid, r.stat)
}

// rpcClient speaks to one gateway over one TCP connection as uid/gid
// (AUTH_SYS).
type rpcClient struct {
	t        *testing.T
	nc       net.Conn
	xid      uint32
	uid, gid uint32
}

func dialRPC(t *testing.T, addr string, uid, gid uint32) *rpcClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatalf("dial gateway %s: %v", addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rpcClient{t: t, nc: nc, xid: uint32(time.Now().UnixNano()), uid: uid, gid: gid}
}

// callHeader returns a call's header (no record mark) with a fresh xid.
func (c *rpcClient) callHeader(prog, proc uint32) (uint32, []byte) {
	c.xid++
	cred := (&xdrEnc{}).u32(1).str("e2e").u32(c.uid).u32(c.gid).u32(1).u32(c.gid)
	e := (&xdrEnc{}).u32(c.xid).u32(0).u32(2).u32(prog).u32(3).u32(proc)
	e.u32(1).opaque(cred.b) // AUTH_SYS
	e.u32(0).u32(0)         // verifier AUTH_NONE
	return c.xid, e.b
}

// send writes rec as one record (one last fragment).
func (c *rpcClient) send(rec []byte) {
	c.t.Helper()
	c.nc.SetWriteDeadline(time.Now().Add(rpcReplyTimeout))
	mark := binary.BigEndian.AppendUint32(nil, 1<<31|uint32(len(rec)))
	if _, err := c.nc.Write(append(mark, rec...)); err != nil {
		c.t.Fatalf("send a record of %d bytes: %v", len(rec), err)
	}
}

// recv reads the next reply, whatever its xid.
func (c *rpcClient) recv() (rpcReply, error) {
	c.nc.SetReadDeadline(time.Now().Add(rpcReplyTimeout))
	var rec []byte
	for {
		var mark [4]byte
		if _, err := io.ReadFull(c.nc, mark[:]); err != nil {
			return rpcReply{}, fmt.Errorf("read a reply's record mark: %w", err)
		}
		m := binary.BigEndian.Uint32(mark[:])
		frag := make([]byte, m&^(1<<31))
		if _, err := io.ReadFull(c.nc, frag); err != nil {
			return rpcReply{}, fmt.Errorf("read a reply of %d bytes: %w", len(frag), err)
		}
		rec = append(rec, frag...)
		if m&(1<<31) != 0 {
			break
		}
	}
	d := &xdrDec{b: rec}
	r := rpcReply{xid: d.u32(), body: d}
	if mt := d.u32(); mt != 1 {
		return r, fmt.Errorf("not a reply: msg_type %d in % x", mt, rec)
	}
	switch d.u32() {
	case 0: // MSG_ACCEPTED
		d.u32() // verifier
		d.opaque()
		r.stat = d.u32()
	default:
		r.denied = true
		r.stat = d.u32()
		if r.stat == rpcRejectAuth {
			r.auth = d.u32()
		}
	}
	return r, d.err
}

// call sends a call and returns its reply, accepted or not.
func (c *rpcClient) call(prog, proc uint32, args []byte) rpcReply {
	c.t.Helper()
	xid, h := c.callHeader(prog, proc)
	c.send(append(h, args...))
	r, err := c.recv()
	if err != nil {
		c.t.Fatalf("call %d/%d: %v", prog, proc, err)
	}
	if r.xid != xid {
		c.t.Fatalf("call %d/%d with xid %#x: the reply has xid %#x", prog, proc, xid, r.xid)
	}
	return r
}

// nfs makes an NFSv3 call that must be accepted; it returns the nfsstat3
// and the rest of the results.
func (c *rpcClient) nfs(proc uint32, args *xdrEnc) (uint32, *xdrDec) {
	c.t.Helper()
	r := c.call(rpcProgNFS, proc, args.b)
	if r.denied || r.stat != rpcAcceptSuccess {
		c.t.Fatalf("NFS procedure %d: %v, want an accepted call", proc, r)
	}
	return r.body.u32(), r.body
}

// mount returns the handle of path (MOUNT v3 MNT) and the mount status.
func (c *rpcClient) mount(path string) ([]byte, uint32) {
	c.t.Helper()
	r := c.call(rpcProgMount, mountProcMnt, (&xdrEnc{}).str(path).b)
	if r.denied || r.stat != rpcAcceptSuccess {
		c.t.Fatalf("MNT %s: %v", path, r)
	}
	st := r.body.u32()
	if st != 0 {
		return nil, st
	}
	return r.body.opaque(), st
}

func (c *rpcClient) getattr(fh []byte) (fattr3, uint32) {
	c.t.Helper()
	st, d := c.nfs(nfsProcGetattr, (&xdrEnc{}).opaque(fh))
	if st != nfs3OK {
		return fattr3{}, st
	}
	return d.fattr(), st
}

func (c *rpcClient) lookup(dir []byte, name string) ([]byte, uint32) {
	c.t.Helper()
	st, d := c.nfs(nfsProcLookup, (&xdrEnc{}).opaque(dir).str(name))
	if st != nfs3OK {
		return nil, st
	}
	return d.opaque(), st
}

// create makes name in dir (GUARDED, with mode) and returns its handle.
func (c *rpcClient) create(dir []byte, name string, mode uint32) ([]byte, uint32) {
	c.t.Helper()
	args := (&xdrEnc{}).opaque(dir).str(name).u32(1) // GUARDED
	args.u32(1).u32(mode).u32(0).u32(0).u32(0).u32(0).u32(0)
	st, d := c.nfs(nfsProcCreate, args)
	if st != nfs3OK {
		return nil, st
	}
	if d.u32() == 0 {
		c.t.Fatalf("CREATE %s: NFS3_OK without a handle", name)
	}
	return d.opaque(), st
}

// writeReply is WRITE's result.
type writeReply struct {
	count, committed uint32
	verf             [8]byte
}

func (c *rpcClient) write(fh []byte, off uint64, data []byte, stable uint32) (writeReply, uint32) {
	c.t.Helper()
	st, d := c.nfs(nfsProcWrite, (&xdrEnc{}).opaque(fh).u64(off).u32(uint32(len(data))).u32(stable).opaque(data))
	d.wcc()
	var w writeReply
	if st == nfs3OK {
		w.count, w.committed = d.u32(), d.u32()
		copy(w.verf[:], d.take(8))
	}
	if d.err != nil {
		c.t.Fatalf("WRITE reply: %v", d.err)
	}
	return w, st
}

// commit asks the whole file be made durable and returns the verifier.
func (c *rpcClient) commit(fh []byte) ([8]byte, uint32) {
	c.t.Helper()
	st, d := c.nfs(nfsProcCommit, (&xdrEnc{}).opaque(fh).u64(0).u32(0))
	d.wcc()
	var v [8]byte
	if st == nfs3OK {
		copy(v[:], d.take(8))
	}
	if d.err != nil {
		c.t.Fatalf("COMMIT reply: %v", d.err)
	}
	return v, st
}

func (c *rpcClient) link(fh, dir []byte, name string) uint32 {
	c.t.Helper()
	st, _ := c.nfs(nfsProcLink, (&xdrEnc{}).opaque(fh).opaque(dir).str(name))
	return st
}

// read returns up to count bytes of fh at off.
func (c *rpcClient) read(fh []byte, off uint64, count uint32) ([]byte, uint32) {
	c.t.Helper()
	st, d := c.nfs(nfsProcRead, (&xdrEnc{}).opaque(fh).u64(off).u32(count))
	d.postOpAttr()
	if st != nfs3OK {
		return nil, st
	}
	d.u32() // count
	d.u32() // eof
	p := d.opaque()
	if d.err != nil {
		c.t.Fatalf("READ reply: %v", d.err)
	}
	return p, st
}
