package nfs

// A pipelined NFSv3 client on this package's codec, for `plumeria bench
// nfs` and tests: calls from many goroutines go out on one TCP connection
// as soon as they are made, and one reader hands each reply to its caller
// by xid, as the Linux client does. Nothing is sent again: the first
// failure (a write, a read, a reply to no call, a call unanswered for the
// timeout) closes the connection and fails every call on it.
//
// go-nfs-client's rpc.Client is built for one call at a time: a call with
// no reply within its timeout is sent again with the same xid and the
// late first reply then blocks its reader for ever; a broken connection
// is redialed and the call resent silently; its reader waits while a
// caller writes a whole 1 MiB record.

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClientClosed ends the calls still waiting when the client is closed.
var ErrClientClosed = errors.New("nfs client: connection closed")

// StatusError is an NFS or MOUNT status other than OK in a reply.
type StatusError struct {
	Op     string
	Status uint32
}

func (e *StatusError) Error() string { return fmt.Sprintf("%s: %s", e.Op, statusName(e.Status)) }

// Client calls NFSv3 and MOUNT v3 procedures as AUTH_SYS uid/gid.
type Client struct {
	nc      net.Conn
	cred    []byte        // credential and verifier, as every call carries them
	timeout time.Duration // a call unanswered this long fails the connection
	xid     atomic.Uint32
	wmu     sync.Mutex    // one record at a time on nc
	done    chan struct{} // closed when the reader has returned
	mu      struct {
		sync.Mutex
		pending map[uint32]chan clientResult
		err     error // why the connection ended; nil while it serves
	}
}

type clientResult struct {
	body []byte // the reply's results, after accept_stat SUCCESS
	err  error
}

// Dial connects to the gateway at addr.
func Dial(addr string, uid, gid uint32, timeout time.Duration) (*Client, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("connect to the NFS server at %s: %w", addr, err)
	}
	return NewClient(nc, uid, gid, timeout), nil
}

// NewClient serves calls on nc, which it owns from now on.
func NewClient(nc net.Conn, uid, gid uint32, timeout time.Duration) *Client {
	c := &Client{nc: nc, timeout: timeout, done: make(chan struct{})}
	var body encoder
	body.u32(0) // stamp
	body.str("plumeria")
	body.u32(uid)
	body.u32(gid)
	body.u32(0) // no more groups
	var e encoder
	e.u32(flavorSys)
	e.opaque(body.b)
	e.u32(flavorNone)
	e.u32(0)
	c.cred = e.b
	c.xid.Store(uint32(time.Now().UnixNano()))
	c.mu.pending = map[uint32]chan clientResult{}
	go c.read()
	return c
}

// Close ends the connection and waits for its reader.
func (c *Client) Close() {
	c.fail(ErrClientClosed)
	<-c.done
}

// fail ends the connection for the first reason given: every waiting
// call gets err.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.mu.err == nil {
		c.mu.err = err
		for xid, ch := range c.mu.pending {
			ch <- clientResult{err: err}
			delete(c.mu.pending, xid)
		}
	}
	c.mu.Unlock()
	c.nc.Close()
}

// Call sends procedure proc of program prog (version 3; MOUNT or NFS)
// with args (their concatenation is the procedure's arguments, sent
// without copying) and returns the reply's results.
func (c *Client) Call(prog, proc uint32, args ...[]byte) ([]byte, error) {
	xid := c.xid.Add(1)
	ch := make(chan clientResult, 1) // fail and read never wait on it
	c.mu.Lock()
	if err := c.mu.err; err != nil {
		c.mu.Unlock()
		return nil, err
	}
	c.mu.pending[xid] = ch
	c.mu.Unlock()

	head := encoder{b: make([]byte, 4, 64+len(c.cred))} // record mark
	for _, v := range []uint32{xid, msgCall, rpcVersion, prog, 3, proc} {
		head.u32(v)
	}
	head.b = append(head.b, c.cred...)
	n := len(head.b) - 4
	for _, a := range args {
		n += len(a)
	}
	putMark(head.b, n)
	bufs := append(net.Buffers{head.b}, args...)
	c.wmu.Lock()
	c.nc.SetWriteDeadline(time.Now().Add(c.timeout))
	_, err := bufs.WriteTo(c.nc)
	c.wmu.Unlock()
	if err != nil {
		c.fail(fmt.Errorf("nfs client: send xid %d: %w", xid, err))
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
		c.fail(fmt.Errorf("nfs client: no reply to xid %d (procedure %d) in %v", xid, proc, c.timeout))
		r := <-ch
		return r.body, r.err
	}
}

// read hands replies to their callers until the connection ends.
func (c *Client) read() {
	defer close(c.done)
	r := bufio.NewReaderSize(c.nc, 256<<10)
	for {
		rec, err := readRecord(r, nil, maxRecord)
		if err != nil {
			c.fail(fmt.Errorf("nfs client: read a reply: %w", err))
			return
		}
		xid, body, err := parseReply(rec)
		if err != nil {
			c.fail(err)
			return
		}
		c.mu.Lock()
		ch, ok := c.mu.pending[xid]
		delete(c.mu.pending, xid)
		c.mu.Unlock()
		if !ok {
			c.fail(fmt.Errorf("nfs client: a reply to xid %d, which no call awaits", xid))
			return
		}
		ch <- clientResult{body: body}
	}
}

// parseReply returns a reply's xid and, if the call was accepted and
// succeeded, its results; otherwise an error saying why not.
func parseReply(rec []byte) (xid uint32, body []byte, err error) {
	d := decoder{b: rec}
	xid = d.u32()
	if typ := d.u32(); d.err == nil && typ != msgReply {
		return xid, nil, fmt.Errorf("nfs client: xid %d: message type %d, not a reply", xid, typ)
	}
	if stat := d.u32(); d.err == nil && stat != replyAccepted {
		return xid, nil, fmt.Errorf("nfs client: xid %d: call denied (reject_stat %d)", xid, d.u32())
	}
	d.u32() // verifier flavor
	d.opaque(maxAuthBytes)
	if stat := d.u32(); d.err == nil && stat != acceptSuccess {
		return xid, nil, fmt.Errorf("nfs client: xid %d: accept_stat %d (1 PROG_UNAVAIL, 3 PROC_UNAVAIL, 4 GARBAGE_ARGS, 5 SYSTEM_ERR)", xid, stat)
	}
	if d.err != nil {
		return xid, nil, fmt.Errorf("nfs client: reply to xid %d: %w", xid, d.err)
	}
	return xid, d.b, nil
}

// call is Call, with the status at the head of the results decoded: an
// error unless OK, then the rest to decode.
func (c *Client) call(op string, prog, proc uint32, args ...[]byte) (*decoder, error) {
	res, err := c.Call(prog, proc, args...)
	if err != nil {
		return nil, err
	}
	d := &decoder{b: res}
	if st := d.u32(); d.err != nil {
		return nil, fmt.Errorf("%s: %w", op, d.err)
	} else if st != nfsOK {
		return nil, &StatusError{Op: op, Status: st}
	}
	return d, nil
}

// Mount returns the handle of export path.
func (c *Client) Mount(path string) ([]byte, error) {
	var a encoder
	a.str(path)
	d, err := c.call("mount "+path, progMount, 1, a.b)
	if err != nil {
		return nil, err
	}
	fh := d.opaque(fhMax)
	if d.err != nil {
		return nil, fmt.Errorf("mount %s: %w", path, d.err)
	}
	return fh, nil
}

// CreateGuarded creates name (mode 0644) in directory dir with a GUARDED
// CREATE and returns its handle.
func (c *Client) CreateGuarded(dir []byte, name string) ([]byte, error) {
	var a encoder
	a.opaque(dir)
	a.str(name)
	// GUARDED; sattr3: mode 0644; uid, gid, size, atime, mtime unset.
	for _, v := range []uint32{createGuarded, 1, 0o644, 0, 0, 0, dontChange, dontChange} {
		a.u32(v)
	}
	d, err := c.call("create "+name, progNFS, 8, a.b)
	if err != nil {
		return nil, err
	}
	follows := d.boolean()
	fh := d.opaque(fhMax)
	if d.err != nil || !follows || len(fh) == 0 {
		return nil, fmt.Errorf("create %s: the reply has no file handle", name)
	}
	return fh, nil
}

// WriteUnstable writes p at off with an UNSTABLE WRITE and returns the
// reply's verifier.
func (c *Client) WriteUnstable(fh []byte, off uint64, p []byte) (verf uint64, err error) {
	var a encoder
	a.opaque(fh)
	a.u64(off)
	a.u32(uint32(len(p)))
	a.u32(unstable)
	a.u32(uint32(len(p)))
	pad := make([]byte, (4-len(p)%4)%4)
	op := fmt.Sprintf("write %d bytes at %d", len(p), off)
	d, err := c.call(op, progNFS, 7, a.b, p, pad)
	if err != nil {
		return 0, err
	}
	discardWcc(d)
	n, _, verf := d.u32(), d.u32(), d.u64()
	if d.err != nil {
		return 0, fmt.Errorf("%s: %w", op, d.err)
	}
	if int(n) != len(p) {
		return 0, fmt.Errorf("%s: %d written", op, n)
	}
	return verf, nil
}

// Commit commits the whole file and returns the reply's verifier.
func (c *Client) Commit(fh []byte) (verf uint64, err error) {
	var a encoder
	a.opaque(fh)
	a.u64(0)
	a.u32(0) // offset 0, count 0: the whole file
	d, err := c.call("commit", progNFS, 21, a.b)
	if err != nil {
		return 0, err
	}
	discardWcc(d)
	verf = d.u64()
	if d.err != nil {
		return 0, fmt.Errorf("commit: %w", d.err)
	}
	return verf, nil
}

// Read reads n bytes at off and returns them (aliasing the reply); fewer
// is an error.
func (c *Client) Read(fh []byte, off uint64, n int) ([]byte, error) {
	var a encoder
	a.opaque(fh)
	a.u64(off)
	a.u32(uint32(n))
	op := fmt.Sprintf("read %d bytes at %d", n, off)
	d, err := c.call(op, progNFS, 6, a.b)
	if err != nil {
		return nil, err
	}
	discardPostOp(d)
	d.u32() // count
	d.u32() // eof
	data := d.opaque(maxIO)
	if d.err != nil {
		return nil, fmt.Errorf("%s: %w", op, d.err)
	}
	if len(data) != n {
		return nil, fmt.Errorf("%s: %d read", op, len(data))
	}
	return data, nil
}

// fattrBytes is the size of a fattr3: 5 uint32s, 8 uint64s... as sent.
const fattrBytes = 84

func discardPostOp(d *decoder) {
	if d.boolean() {
		d.fixed(fattrBytes)
	}
}

// discardWcc skips a wcc_data: pre-operation size, mtime, ctime, then a
// post_op_attr.
func discardWcc(d *decoder) {
	if d.boolean() {
		d.fixed(24)
	}
	discardPostOp(d)
}
