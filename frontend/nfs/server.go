// Package nfs serves a Plumeria file system to machines that are not
// cluster members over NFSv3 and MOUNT v3 (RFC 1813) on one TCP port,
// with a portmapper GETPORT answer on the same port. It is an adapter
// like frontend/fuse: it turns RPCs into calls on FileSystem, which
// speaks inode numbers and filesys errors, and it is the only place where
// NFS status codes appear.
//
// Requests on one connection are served in parallel and answered out of
// order (by xid). File handles name the file system, inode and generation
// under a MAC (handle.go), so they survive restarts, renames and a
// failover to another gateway. Every modifying procedure, a WRITE with
// FILE_SYNC or DATA_SYNC and a COMMIT reply only after their effect is
// durable: they wait for the file system's redo log, whose group commit
// puts every request that arrives while a log write is in flight into
// the next one. UNSTABLE writes go to the node's write-behind at memory
// speed; the write verifier changes only when such data may have been
// lost (a new gateway process, a failed data or log write).
//
// No kernel checks permissions here: the caller's AUTH_SYS ids (root
// squashed by default) go to filesys.Caller's checks before each change,
// as the kernel's default_permissions does for a FUSE mount.
package nfs

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumeria-fs/plumeria/filesys"
)

// FileSystem is what the gateway needs from the file system; *filesys.FS
// implements it. Methods are called concurrently; errors are filesys
// sentinels (tested with errors.Is).
type FileSystem interface {
	Lookup(ctx context.Context, dir uint64, name string) (filesys.Attr, error)
	Parent(ctx context.Context, dir uint64) (filesys.Attr, error)
	Getattr(ctx context.Context, ino uint64) (filesys.Attr, error)
	Setattr(ctx context.Context, ino uint64, set filesys.SetAttr) (filesys.Attr, error)
	Create(ctx context.Context, dir uint64, name string, mode uint32, c filesys.Caller, excl bool) (filesys.Attr, error)
	Mknod(ctx context.Context, dir uint64, name string, mode, rdev uint32, c filesys.Caller) (filesys.Attr, error)
	Mkdir(ctx context.Context, dir uint64, name string, mode uint32, c filesys.Caller) (filesys.Attr, error)
	Symlink(ctx context.Context, dir uint64, name, target string, c filesys.Caller) (filesys.Attr, error)
	Link(ctx context.Context, ino, dir uint64, name string) (filesys.Attr, error)
	Unlink(ctx context.Context, dir uint64, name string) error
	Rmdir(ctx context.Context, dir uint64, name string) error
	Rename(ctx context.Context, dir uint64, name string, newDir uint64, newName string, flags uint32) error
	Readlink(ctx context.Context, ino uint64) (string, error)
	Read(ctx context.Context, ino, gen uint64, p []byte, off uint64) (int, error)
	Write(ctx context.Context, ino, gen uint64, p []byte, off uint64, appendMode bool) (int, error)
	// Fsync makes ino's data and every change made so far durable.
	Fsync(ctx context.Context, ino uint64, dataOnly bool) error
	// Flush is a close: it reports a failed write-behind of ino and, on a
	// volume that keeps versions, makes ino's next version.
	Flush(ctx context.Context, ino uint64) error
	// Sync makes every change made so far durable (group commit).
	Sync(ctx context.Context) error
	ReadDir(ctx context.Context, dir uint64, after uint64, max int) ([]filesys.DirEntry, bool, error)
	Statfs(ctx context.Context) (filesys.Statfs, error)
}

// Options configure a Server.
type Options struct {
	// Export is the volume's name; the export's path is "/"+Export.
	Export string
	// Allow lists the client networks served; every other client's calls
	// are refused (AUTH_TOOWEAK, MNT3ERR_ACCES) and logged.
	Allow []netip.Prefix
	// NoRootSquash serves uid 0 as root; by default it is AnonUID/AnonGID.
	NoRootSquash bool
	// AnonUID and AnonGID stand for squashed root and AUTH_NONE callers
	// (zero: 65534, nobody).
	AnonUID, AnonGID uint32
	// ReadOnly refuses every change (NFS3ERR_ROFS).
	ReadOnly bool
	// Verifier is the write verifier to start with (zero: a random one):
	// a gateway that stopped cleanly, every write durable, may pass the
	// one it used so that clients do not resend their data.
	Verifier uint64
	// MaxInFlight bounds the requests served at once per connection
	// (zero: 128).
	MaxInFlight int
	Logger      *slog.Logger
	Registerer  prometheus.Registerer // nil: the default registry
}

// Server serves one file system over NFSv3.
type Server struct {
	fsys    atomic.Pointer[fsBox] // what calls go to now
	opts    Options
	h       *handles
	log     *slog.Logger
	m       *metrics
	verf    atomic.Uint64
	port    atomic.Uint32
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	ln      []net.Listener
	conns   map[net.Conn]struct{}
	closing bool
	drc     *drc
}

// New returns a server of fsys, whose identity (uuid and handle key,
// filesys.FS.Identity) makes and checks file handles.
func New(fsys FileSystem, uuid [16]byte, handleKey [32]byte, opts Options) (*Server, error) {
	if handleKey == ([32]byte{}) {
		return nil, errors.New("nfs: the file system has no handle key (formatted before NFS gateways existed): run plumeria fsck --upgrade on it first")
	}
	if opts.Export == "" || strings.Contains(opts.Export, "/") {
		return nil, fmt.Errorf("nfs: export name %q: want a volume name", opts.Export)
	}
	if opts.AnonUID == 0 {
		opts.AnonUID = 65534
	}
	if opts.AnonGID == 0 {
		opts.AnonGID = 65534
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 128
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, h: newHandles(uuid, handleKey), log: opts.Logger, conns: map[net.Conn]struct{}{}, drc: newDRC()}
	s.m = newMetrics(opts.Registerer, s)
	s.fsys.Store(s.box(fsys))
	v := opts.Verifier
	for v == 0 {
		var b [8]byte
		rand.Read(b[:])
		v = binary.BigEndian.Uint64(b[:])
	}
	s.verf.Store(v)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// fsBox holds the file system calls go to, and the counts the group
// commit factor starts from on it.
type fsBox struct {
	fs                 FileSystem
	logWrites0, waits0 uint64
}

// box is fsys with its counts now.
func (s *Server) box(fsys FileSystem) *fsBox {
	b := &fsBox{fs: fsys}
	if ls, ok := fsys.(logStats); ok {
		b.logWrites0 = ls.LogStats().Batches
	}
	if s.m != nil {
		b.waits0 = s.m.syncN.Load()
	}
	return b
}

// Suspend answers every call NFS3ERR_JUKEBOX (the client retries it
// later) until Resume: the file system stopped (a lost lease, a failed
// write) and a new one is being mounted. Unstable writes acknowledged
// so far may be lost: the verifier changes.
func (s *Server) Suspend(why error) {
	s.fsys.Store(s.box(unavailable{why}))
	s.dataLost(why)
}

// Resume serves fsys, a file system with the same identity (handles
// stay valid) mounted again after Suspend.
func (s *Server) Resume(fsys FileSystem) {
	s.fsys.Store(s.box(fsys))
	s.log.Warn("nfs: serving again on a new mount of the file system")
}

// Verifier is the write verifier clients see now.
func (s *Server) Verifier() uint64 { return s.verf.Load() }

// dataLost changes the write verifier: unstable data acknowledged under
// the old one may not be on disk (a write-behind or log write failed),
// so clients must send it again (they compare the verifier of COMMIT
// with their WRITEs').
func (s *Server) dataLost(why error) {
	old := s.verf.Load()
	s.verf.CompareAndSwap(old, old+1)
	s.m.verifierChanges.Inc()
	s.log.Error("nfs: unstable writes may be lost: clients must resend them (write verifier changed)", "err", why)
}

// Serve accepts connections on ln until Close; each is served on its own
// goroutines.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return net.ErrClosed
	}
	s.ln = append(s.ln, ln)
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		s.port.CompareAndSwap(0, uint32(a.Port))
	}
	s.mu.Unlock()
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			nc.Close()
			return nil
		}
		s.conns[nc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.serveConn(nc)
			s.mu.Lock()
			delete(s.conns, nc)
			s.mu.Unlock()
		}()
	}
}

// closeGrace is how long Close lets requests under way finish before it
// cancels them (a request waiting for a lock, say).
const closeGrace = 10 * time.Second

// Close stops accepting, drops every connection and waits for the
// requests under way (cancelled after closeGrace).
func (s *Server) Close() error {
	s.mu.Lock()
	s.closing = true
	for _, ln := range s.ln {
		ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(closeGrace):
		s.cancel()
		<-done
	}
	s.cancel()
	return nil
}

// allowed reports whether a client at addr may be served.
func (s *Server) allowed(addr netip.Addr) bool {
	addr = addr.Unmap()
	for _, p := range s.opts.Allow {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// maxRecord bounds a request: a WRITE of wtmax bytes and its headers.
const maxRecord = maxIO + 64<<10

// conn is one client connection.
type conn struct {
	s       *Server
	nc      net.Conn
	peer    netip.Addr
	allowed bool
	wmu     sync.Mutex
	wg      sync.WaitGroup
	slots   chan struct{}
	refused atomic.Bool // logged once
}

var recordPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

func (s *Server) serveConn(nc net.Conn) {
	defer nc.Close()
	var peer netip.Addr
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		peer = a.AddrPort().Addr().Unmap()
	}
	c := &conn{s: s, nc: nc, peer: peer, allowed: s.allowed(peer), slots: make(chan struct{}, s.opts.MaxInFlight)}
	if !c.allowed {
		s.log.Warn("nfs: refusing a client outside --allow", "client", peer.String())
		s.m.refused.Inc()
	}
	defer c.wg.Wait()
	r := bufio.NewReaderSize(nc, 256<<10)
	for {
		bp := recordPool.Get().(*[]byte)
		rec, err := readRecord(r, *bp, maxRecord)
		if errors.Is(err, errTooBig) {
			s.m.malformed.Inc()
			s.log.Warn("nfs: dropped a request larger than the server takes", "client", peer.String(), "limit", maxRecord)
			c.replyTooBig(rec)
			recordPool.Put(bp)
			continue
		}
		if err != nil {
			recordPool.Put(bp)
			return
		}
		c.slots <- struct{}{}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.serve(rec)
			if cap(rec) <= 2*maxRecord {
				*bp = rec[:0]
			}
			recordPool.Put(bp)
			<-c.slots
		}()
	}
}

// replyTooBig answers an oversized call with GARBAGE_ARGS if its header
// can be read.
func (c *conn) replyTooBig(head []byte) {
	if len(head) < 8 || binary.BigEndian.Uint32(head[4:]) != msgCall {
		return
	}
	var e encoder
	replyHeader(&e, binary.BigEndian.Uint32(head), acceptGarbageArgs)
	c.write(finishRecord(&e))
}

func (c *conn) write(rec []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(time.Minute))
	if _, err := c.nc.Write(rec); err != nil {
		c.nc.Close() // the reader sees it and ends the connection
	}
}

var replyPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// serve answers one call. A call that panics (a bug) is answered
// SYSTEM_ERR and logged; the gateway goes on serving.
func (c *conn) serve(rec []byte) {
	var xid uint32
	if len(rec) >= 4 {
		xid = binary.BigEndian.Uint32(rec)
	}
	defer func() {
		if p := recover(); p != nil {
			c.s.log.Error("nfs: a call failed with a panic (a bug): answered SYSTEM_ERR", "client", c.peer.String(), "panic", p, "stack", string(debug.Stack()))
			var e encoder
			replyHeader(&e, xid, acceptSystemErr)
			c.write(finishRecord(&e))
		}
	}()
	call, rej, ok := parseCall(rec)
	if !ok {
		c.s.m.malformed.Inc()
		c.s.log.Warn("nfs: dropped a record that is not an RPC call", "client", c.peer.String())
		return
	}
	bp := replyPool.Get().(*[]byte)
	e := encoder{b: *bp}
	switch {
	case rej != nil:
		c.s.m.malformed.Inc()
		c.s.log.Warn("nfs: rejected a call", "client", c.peer.String(), "why", rej.why)
		rejectReply(&e, call.xid, rej)
	case !c.allowed:
		if !c.refused.Swap(true) {
			c.s.log.Warn("nfs: refused a call from a client outside --allow", "client", c.peer.String(), "program", call.prog, "procedure", call.proc)
		}
		if call.prog == progMount && call.vers == 3 && call.proc == 1 {
			replyHeader(&e, call.xid, acceptSuccess) // MNT: "access denied"
			e.u32(mntErrAcces)
		} else {
			rejectReply(&e, call.xid, &rejection{denied: true, stat: rejectAuthError, auth: authTooWeak})
		}
	case call.prog == progNFS && call.vers == 3 && nonIdempotent[call.proc]:
		k := c.s.drc.key(c.peer, call.xid, rec)
		reply, running := c.s.drc.begin(k, time.Now())
		switch {
		case running:
			c.s.m.duplicates.Inc()
			return // the first is still running: the client sends it again
		case reply != nil:
			c.s.m.duplicates.Inc()
			c.write(reply)
			return
		}
		c.s.dispatch(&call, &e, c)
		c.s.drc.finish(k, finishRecord(&e), time.Now())
	default:
		c.s.dispatch(&call, &e, c)
	}
	c.write(finishRecord(&e))
	if cap(e.b) <= 4*maxIO {
		*bp = e.b[:0]
		replyPool.Put(bp)
	}
}

// RPC programs served.
const (
	progPortmap = 100000
	progNFS     = 100003
	progMount   = 100005
)

// dispatch runs call and encodes its reply into e.
func (s *Server) dispatch(call *call, e *encoder, c *conn) {
	var procs map[uint32]proc
	switch {
	case call.prog == progNFS && call.vers == 3:
		procs = nfsProcs
	case call.prog == progMount && call.vers == 3:
		procs = mountProcs
	case call.prog == progPortmap && call.vers == 2:
		procs = portmapProcs
	case call.prog == progNFS || call.prog == progMount:
		rejectReply(e, call.xid, &rejection{stat: acceptProgMismatch})
		return
	default:
		rejectReply(e, call.xid, &rejection{stat: acceptProgUnavail})
		return
	}
	p, ok := procs[call.proc]
	if !ok {
		rejectReply(e, call.xid, &rejection{stat: acceptProcUnavail})
		return
	}
	start := time.Now()
	replyHeader(e, call.xid, acceptSuccess)
	r := &request{s: s, fs: s.fsys.Load().fs, call: call, c: s.caller(call.cred), peer: c.peer}
	st := p.run(r, e)
	if st == statusGarbage {
		s.m.malformed.Inc()
		s.log.Warn("nfs: garbage arguments", "client", c.peer.String(), "procedure", p.name, "err", call.args.err)
		e.b = e.b[:0]
		rejectReply(e, call.xid, &rejection{stat: acceptGarbageArgs})
	}
	s.m.done(p.name, st, time.Since(start))
}

// caller is who a credential names, root squashed unless NoRootSquash.
func (s *Server) caller(cr cred) filesys.Caller {
	if cr.flavor != flavorSys {
		return filesys.Caller{Uid: s.opts.AnonUID, Gid: s.opts.AnonGID}
	}
	c := filesys.Caller{Uid: cr.uid, Gid: cr.gid, Groups: cr.gids}
	if !s.opts.NoRootSquash {
		if c.Uid == 0 {
			c.Uid = s.opts.AnonUID
		}
		if c.Gid == 0 {
			c.Gid = s.opts.AnonGID
		}
		for i, g := range c.Groups {
			if g == 0 {
				c.Groups[i] = s.opts.AnonGID
			}
		}
	}
	return c
}

// proc is one procedure: run decodes its arguments from r.call.args,
// does it and encodes the result after the accepted header; it returns
// the NFS status (for metrics) or statusGarbage when the arguments did
// not decode (the reply is then GARBAGE_ARGS).
type proc struct {
	name string
	run  func(r *request, e *encoder) uint32
}

// statusGarbage is not an NFS status: the arguments did not decode.
const statusGarbage = 1 << 31

// request is one call being served.
type request struct {
	s    *Server
	fs   FileSystem // for the whole call, even if the server's is replaced meanwhile
	call *call
	c    filesys.Caller
	peer netip.Addr
}

func (r *request) ctx() context.Context { return r.s.ctx }
func (r *request) args() *decoder       { return &r.call.args }
