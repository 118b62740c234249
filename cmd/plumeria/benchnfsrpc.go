package main

// A pipelined ONC RPC client for `bench nfs`'s sequential phase, and the
// four NFSv3 procedures it sends (CREATE, WRITE, COMMIT, READ).
//
// go-nfs-client's rpc.Client is not used here. Its Call may be called
// from several goroutines (it writes each record under a mutex and hands
// replies to callers by xid), but it is built for one call at a time:
//   - a call with no reply within rpc.DefaultReadTimeout is sent again
//     with the same xid, and if the first reply then arrives, its reader
//     goroutine blocks for ever on an unbuffered channel no one reads: the
//     connection hangs;
//   - a broken connection is redialed and the call resent, silently;
//     a second disconnect closes the reply channels of the first again
//     (a panic);
//   - its reader waits for the mutex while a caller holds it across the
//     write of a whole 1 MiB record, and it panics on a short reply.
// A benchmark wants none of that: here a call that fails or gets no
// reply fails the connection and every call on it, and nothing is resent.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	nfsc "github.com/willscott/go-nfs-client/nfs"
)

// ONC RPC (RFC 5531) and NFSv3 (RFC 1813) numbers sent and checked.
const (
	rpcCall        = 0
	rpcReply       = 1
	rpcVersion     = 2
	rpcAccepted    = 0
	rpcAuthSys     = 1
	rpcLastFrag    = 1 << 31
	nfsProgram     = 100003
	nfsVersion     = 3
	nfsProcRead    = 6
	nfsProcWrite   = 7
	nfsProcCreate  = 8
	nfsProcCommit  = 21
	nfsUnstable    = 0
	nfsGuarded     = 1
	nfsFattrBytes  = 84 // fattr3: 5 uint32s, 8 uint64s
	nfsWccPreBytes = 24 // wcc_attr: size, mtime, ctime
)

// rpcReplyBytesMax bounds a reply record: a READ of benchNFSChunkBytes and
// its headers (the gateway's rtmax is 1 MiB).
const rpcReplyBytesMax = benchNFSChunkBytes + 64<<10

// errRPCClosed ends the calls still waiting when the client is closed.
var errRPCClosed = errors.New("rpc: connection closed")

// rpcClient sends calls from many goroutines on one TCP connection, each
// as soon as it is made, and one reader goroutine hands each reply to its
// caller by xid: the pipelining of the Linux NFS client. Nothing is sent
// again; the first failure (a write, a read, a reply to no call, a call
// unanswered for timeout) closes the connection and fails every call.
type rpcClient struct {
	nc      net.Conn
	cred    []byte        // credential and verifier, as every call carries them
	timeout time.Duration // a call unanswered this long fails the connection
	xid     atomic.Uint32
	wmu     sync.Mutex    // one record at a time on nc
	done    chan struct{} // closed when the reader has returned
	mu      struct {
		sync.Mutex
		pending map[uint32]chan rpcResult
		err     error // why the connection ended; nil while it serves
	}
}

type rpcResult struct {
	body []byte // the reply's results, after accept_stat SUCCESS
	err  error
}

// dialRPC connects to addr and calls as AUTH_SYS uid/gid.
func dialRPC(addr string, uid, gid uint32, timeout time.Duration) (*rpcClient, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("connect to the gateway at %s: %w", addr, err)
	}
	return newRPCClient(nc, uid, gid, timeout), nil
}

// newRPCClient serves calls on nc, which it owns from now on.
func newRPCClient(nc net.Conn, uid, gid uint32, timeout time.Duration) *rpcClient {
	c := &rpcClient{nc: nc, cred: authSysCred(uid, gid), timeout: timeout, done: make(chan struct{})}
	c.xid.Store(uint32(time.Now().UnixNano()))
	c.mu.pending = map[uint32]chan rpcResult{}
	go c.read()
	return c
}

// authSysCred encodes an AUTH_SYS credential (stamp 0, machine name,
// uid, gid, no more groups) and an AUTH_NONE verifier.
func authSysCred(uid, gid uint32) []byte {
	var body []byte
	body = xdrU32(body, 0)
	body = xdrOpaque(body, []byte("plumeria-bench"))
	body = xdrU32(body, uid)
	body = xdrU32(body, gid)
	body = xdrU32(body, 0)
	b := xdrU32(nil, rpcAuthSys)
	b = xdrOpaque(b, body)
	return append(b, 0, 0, 0, 0, 0, 0, 0, 0) // AUTH_NONE, empty
}

// close ends the connection and waits for its reader.
func (c *rpcClient) close() {
	c.fail(errRPCClosed)
	<-c.done
}

// fail ends the connection for the first reason given: every waiting
// call gets err.
func (c *rpcClient) fail(err error) {
	c.mu.Lock()
	if c.mu.err == nil {
		c.mu.err = err
		for xid, ch := range c.mu.pending {
			ch <- rpcResult{err: err}
			delete(c.mu.pending, xid)
		}
	}
	c.mu.Unlock()
	c.nc.Close()
}

// call sends procedure proc of NFSv3 with args (their concatenation is
// the procedure's arguments, sent without copying) and returns the
// reply's results.
func (c *rpcClient) call(proc uint32, args ...[]byte) ([]byte, error) {
	xid := c.xid.Add(1)
	ch := make(chan rpcResult, 1) // fail and read never wait on it
	c.mu.Lock()
	if err := c.mu.err; err != nil {
		c.mu.Unlock()
		return nil, err
	}
	c.mu.pending[xid] = ch
	c.mu.Unlock()

	head := make([]byte, 4, 64+len(c.cred))
	for _, v := range []uint32{xid, rpcCall, rpcVersion, nfsProgram, nfsVersion, proc} {
		head = xdrU32(head, v)
	}
	head = append(head, c.cred...)
	n := len(head) - 4
	for _, a := range args {
		n += len(a)
	}
	binary.BigEndian.PutUint32(head, rpcLastFrag|uint32(n))
	bufs := append(net.Buffers{head}, args...)
	c.wmu.Lock()
	c.nc.SetWriteDeadline(time.Now().Add(c.timeout))
	_, err := bufs.WriteTo(c.nc)
	c.wmu.Unlock()
	if err != nil {
		c.fail(fmt.Errorf("rpc: send xid %d: %w", xid, err))
	}
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.body, r.err
	case <-t.C:
		select {
		case r := <-ch: // came as the timer fired
			return r.body, r.err
		default:
		}
		c.fail(fmt.Errorf("rpc: no reply to xid %d (procedure %d) in %v", xid, proc, c.timeout))
		r := <-ch
		return r.body, r.err
	}
}

// read hands replies to their callers until the connection ends.
func (c *rpcClient) read() {
	defer close(c.done)
	r := bufio.NewReaderSize(c.nc, 256<<10)
	for {
		rec, err := readRPCRecord(r, rpcReplyBytesMax)
		if err != nil {
			c.fail(fmt.Errorf("rpc: read a reply: %w", err))
			return
		}
		xid, body, err := parseRPCReply(rec)
		if err != nil {
			c.fail(err)
			return
		}
		c.mu.Lock()
		ch, ok := c.mu.pending[xid]
		delete(c.mu.pending, xid)
		c.mu.Unlock()
		if !ok {
			c.fail(fmt.Errorf("rpc: a reply to xid %d, which no call awaits", xid))
			return
		}
		ch <- rpcResult{body: body}
	}
}

// readRPCRecord reads one record (RFC 5531 §11: fragments, each after a
// 4-byte header of its length and, in the top bit, whether it is the
// last) of at most max bytes.
func readRPCRecord(r io.Reader, max int) ([]byte, error) {
	var rec []byte
	for {
		var h [4]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return nil, err
		}
		mark := binary.BigEndian.Uint32(h[:])
		n := int(mark &^ rpcLastFrag)
		if len(rec)+n > max {
			return nil, fmt.Errorf("record of more than %d bytes", max)
		}
		rec = slices.Grow(rec, n)[:len(rec)+n]
		if _, err := io.ReadFull(r, rec[len(rec)-n:]); err != nil {
			return nil, err
		}
		if mark&rpcLastFrag != 0 {
			return rec, nil
		}
	}
}

// parseRPCReply returns a reply's xid and, if the call was accepted and
// succeeded, its results; otherwise an error saying why not.
func parseRPCReply(rec []byte) (xid uint32, body []byte, err error) {
	d := xdrDecoder{b: rec}
	xid = d.u32()
	if typ := d.u32(); d.err == nil && typ != rpcReply {
		return xid, nil, fmt.Errorf("rpc: xid %d: message type %d, not a reply", xid, typ)
	}
	if stat := d.u32(); d.err == nil && stat != rpcAccepted {
		return xid, nil, fmt.Errorf("rpc: xid %d: call denied (reject_stat %d)", xid, d.u32())
	}
	d.u32()    // verifier flavor
	d.opaque() // verifier body
	if stat := d.u32(); d.err == nil && stat != 0 {
		return xid, nil, fmt.Errorf("rpc: xid %d: accept_stat %d (1 PROG_UNAVAIL, 3 PROC_UNAVAIL, 4 GARBAGE_ARGS, 5 SYSTEM_ERR)", xid, stat)
	}
	if d.err != nil {
		return xid, nil, fmt.Errorf("rpc: reply to xid %d: %w", xid, d.err)
	}
	return xid, d.b, nil
}

// nfsStatus reads an NFSv3 status and returns it as an error (nil for
// NFS3_OK), as go-nfs-client maps them (os.ErrExist and so on).
func nfsStatus(d *xdrDecoder) error {
	st := d.u32()
	if d.err != nil {
		return d.err
	}
	return nfsc.NFS3Error(st)
}

// nfsCreateGuarded creates name (mode 0644) in the directory of handle
// dir with a GUARDED CREATE and returns its handle.
func (c *rpcClient) nfsCreateGuarded(dir []byte, name string) ([]byte, error) {
	args := xdrOpaque(nil, dir)
	args = xdrOpaque(args, []byte(name))
	// sattr3: mode 0644; uid, gid, size, atime, mtime unset.
	for _, v := range []uint32{nfsGuarded, 1, 0o644, 0, 0, 0, 0, 0} {
		args = xdrU32(args, v)
	}
	res, err := c.call(nfsProcCreate, args)
	if err != nil {
		return nil, err
	}
	d := xdrDecoder{b: res}
	if err := nfsStatus(&d); err != nil {
		return nil, fmt.Errorf("create %s: %w", name, err)
	}
	follows := d.u32()
	fh := d.opaque()
	if d.err != nil || follows == 0 || len(fh) == 0 {
		return nil, fmt.Errorf("create %s: the reply has no file handle", name)
	}
	return fh, nil
}

// nfsWriteUnstable writes p at off with an UNSTABLE WRITE and returns
// the reply's verifier.
func (c *rpcClient) nfsWriteUnstable(fh []byte, off uint64, p []byte) (verf uint64, err error) {
	args := xdrOpaque(nil, fh)
	args = xdrU64(args, off)
	args = xdrU32(args, uint32(len(p)))
	args = xdrU32(args, nfsUnstable)
	args = xdrU32(args, uint32(len(p)))
	res, err := c.call(nfsProcWrite, args, p, make([]byte, xdrPad(len(p))))
	if err != nil {
		return 0, err
	}
	d := xdrDecoder{b: res}
	if err := nfsStatus(&d); err != nil {
		return 0, fmt.Errorf("write %d bytes at %d: %w", len(p), off, err)
	}
	d.wcc()
	n, _, verf := d.u32(), d.u32(), d.u64()
	if d.err != nil {
		return 0, fmt.Errorf("write at %d: %w", off, d.err)
	}
	if int(n) != len(p) {
		return 0, fmt.Errorf("write at %d: %d of %d bytes written", off, n, len(p))
	}
	return verf, nil
}

// nfsCommit commits the whole file and returns the reply's verifier.
func (c *rpcClient) nfsCommit(fh []byte) (verf uint64, err error) {
	args := xdrOpaque(nil, fh)
	args = xdrU64(args, 0)
	args = xdrU32(args, 0) // offset 0, count 0: the whole file
	res, err := c.call(nfsProcCommit, args)
	if err != nil {
		return 0, err
	}
	d := xdrDecoder{b: res}
	if err := nfsStatus(&d); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	d.wcc()
	verf = d.u64()
	if d.err != nil {
		return 0, fmt.Errorf("commit: %w", d.err)
	}
	return verf, nil
}

// nfsRead reads n bytes at off and returns them (aliasing the reply);
// fewer is an error.
func (c *rpcClient) nfsRead(fh []byte, off uint64, n int) ([]byte, error) {
	args := xdrOpaque(nil, fh)
	args = xdrU64(args, off)
	args = xdrU32(args, uint32(n))
	res, err := c.call(nfsProcRead, args)
	if err != nil {
		return nil, err
	}
	d := xdrDecoder{b: res}
	if err := nfsStatus(&d); err != nil {
		return nil, fmt.Errorf("read %d bytes at %d: %w", n, off, err)
	}
	d.postOpAttr()
	d.u32() // count
	d.u32() // eof
	data := d.opaque()
	if d.err != nil {
		return nil, fmt.Errorf("read at %d: %w", off, d.err)
	}
	if len(data) != n {
		return nil, fmt.Errorf("read at %d: %d of %d bytes", off, len(data), n)
	}
	return data, nil
}

func xdrU32(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }
func xdrU64(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }
func xdrPad(n int) int                 { return (4 - n%4) % 4 }

// xdrOpaque appends variable-length opaque data: length, bytes, padding.
func xdrOpaque(b, p []byte) []byte {
	b = xdrU32(b, uint32(len(p)))
	b = append(b, p...)
	return append(b, make([]byte, xdrPad(len(p)))...)
}

// xdrDecoder reads XDR from b; the first short read sets err, after
// which every read returns zero.
type xdrDecoder struct {
	b   []byte
	err error
}

func (d *xdrDecoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.err = io.ErrUnexpectedEOF
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *xdrDecoder) u32() uint32 {
	if p := d.take(4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (d *xdrDecoder) u64() uint64 {
	if p := d.take(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

// opaque reads variable-length opaque data; the result aliases d's bytes.
func (d *xdrDecoder) opaque() []byte {
	n := int(d.u32())
	p := d.take(n)
	d.take(xdrPad(n))
	return p
}

// postOpAttr skips a post_op_attr.
func (d *xdrDecoder) postOpAttr() {
	if d.u32() != 0 {
		d.take(nfsFattrBytes)
	}
}

// wcc skips a wcc_data: pre_op_attr, post_op_attr.
func (d *xdrDecoder) wcc() {
	if d.u32() != 0 {
		d.take(nfsWccPreBytes)
	}
	d.postOpAttr()
}
