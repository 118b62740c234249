package nfs

import (
	"bufio"
	"bytes"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys"
)

// rawClient speaks ONC RPC to the gateway byte by byte, for what a
// client library does not expose (stable modes, verifiers, guards,
// malformed input).
type rawClient struct {
	t   testing.TB
	c   net.Conn
	r   *bufio.Reader
	xid uint32
	uid uint32
	gid uint32
}

func dialRaw(t testing.TB, addr string) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(time.Minute))
	return &rawClient{t: t, c: c, r: bufio.NewReader(c)}
}

// callBytes encodes a call of proc with AUTH_SYS uid/gid.
func (rc *rawClient) callBytes(prog, proc uint32, args func(e *encoder)) []byte {
	rc.xid++
	var e encoder
	e.u32(0) // record mark
	e.u32(rc.xid)
	e.u32(msgCall)
	e.u32(rpcVersion)
	e.u32(prog)
	vers := uint32(3)
	if prog == progPortmap {
		vers = 2
	}
	e.u32(vers)
	e.u32(proc)
	var a encoder
	a.u32(1)
	a.str("raw")
	a.u32(rc.uid)
	a.u32(rc.gid)
	a.u32(1)
	a.u32(rc.gid)
	e.u32(flavorSys)
	e.opaque(a.b)
	e.u32(flavorNone)
	e.u32(0)
	if args != nil {
		args(&e)
	}
	return finishRecord(&e)
}

// reply reads one reply record.
func (rc *rawClient) reply() []byte {
	rc.t.Helper()
	rec, err := readRecord(rc.r, nil, 8<<20)
	if err != nil {
		rc.t.Fatalf("read reply: %v", err)
	}
	return rec
}

// accepted reads a reply and returns its decoder at the accept stat
// (the reply is expected accepted; the stat is for the caller to read).
func (rc *rawClient) accepted() *decoder {
	rc.t.Helper()
	d := &decoder{b: rc.reply()}
	d.u32() // xid
	d.u32() // REPLY
	if st := d.u32(); st != replyAccepted {
		rc.t.Fatalf("reply denied (%d)", st)
	}
	d.u32() // verifier
	d.opaque(400)
	return d
}

// call sends a call and returns the decoder of its results, after
// checking that it was accepted.
func (rc *rawClient) call(prog, proc uint32, args func(e *encoder)) *decoder {
	rc.t.Helper()
	if _, err := rc.c.Write(rc.callBytes(prog, proc, args)); err != nil {
		rc.t.Fatal(err)
	}
	d := &decoder{b: rc.reply()}
	xid, mt, rs := d.u32(), d.u32(), d.u32()
	d.u32()
	d.opaque(400)
	if st := d.u32(); xid != rc.xid || mt != msgReply || rs != replyAccepted || st != acceptSuccess {
		rc.t.Fatalf("call %d.%d: xid %d/%d reply %d stat %d", prog, proc, xid, rc.xid, rs, st)
	}
	return d
}

// root mounts the export and returns its handle.
func (rc *rawClient) root(path string) []byte {
	rc.t.Helper()
	d := rc.call(progMount, 1, func(e *encoder) { e.str(path) })
	if st := d.u32(); st != mntOK {
		rc.t.Fatalf("mount %s: status %d", path, st)
	}
	return bytes.Clone(d.opaque(fhMax))
}

// skipFattr skips a post_op_attr.
func skipPostOp(d *decoder) (filesys.Attr, bool) {
	if !d.boolean() {
		return filesys.Attr{}, false
	}
	var a filesys.Attr
	d.u32()
	a.Mode = d.u32()
	a.Nlink, a.Uid, a.Gid = d.u32(), d.u32(), d.u32()
	a.Size = d.u64()
	d.u64()
	d.u32()
	d.u32()
	d.u64()
	a.Ino = d.u64()
	a.Atime, a.Mtime, a.Ctime = d.time(), d.time(), d.time()
	return a, true
}

func skipWcc(d *decoder) (filesys.Attr, bool) {
	if d.boolean() {
		d.u64()
		d.time()
		d.time()
	}
	return skipPostOp(d)
}

// create makes name in dir (how: UNCHECKED, GUARDED with mode 0644, or
// EXCLUSIVE with verf) and returns status and handle.
func (rc *rawClient) create(dir []byte, name string, how uint32, verf uint64) (uint32, []byte) {
	d := rc.call(progNFS, 8, func(e *encoder) {
		e.opaque(dir)
		e.str(name)
		e.u32(how)
		if how == createExclusive {
			e.u64(verf)
			return
		}
		e.boolean(true)
		e.u32(0o644)
		e.boolean(false)
		e.boolean(false)
		e.boolean(false)
		e.u32(dontChange)
		e.u32(dontChange)
	})
	st := d.u32()
	if st != nfsOK {
		return st, nil
	}
	if !d.boolean() {
		rc.t.Fatal("create: no handle")
	}
	return st, bytes.Clone(d.opaque(fhMax))
}

// write writes p at off with stable and returns status, committed and verifier.
func (rc *rawClient) write(fh []byte, off uint64, p []byte, stable uint32) (uint32, uint32, uint64) {
	d := rc.call(progNFS, 7, func(e *encoder) {
		e.opaque(fh)
		e.u64(off)
		e.u32(uint32(len(p)))
		e.u32(stable)
		e.opaque(p)
	})
	st := d.u32()
	skipWcc(d)
	if st != nfsOK {
		return st, 0, 0
	}
	d.u32()
	return st, d.u32(), d.u64()
}

func (rc *rawClient) commit(fh []byte) (uint32, uint64) {
	d := rc.call(progNFS, 21, func(e *encoder) { e.opaque(fh); e.u64(0); e.u32(0) })
	st := d.u32()
	skipWcc(d)
	if st != nfsOK {
		return st, 0
	}
	return st, d.u64()
}

func (rc *rawClient) getattr(fh []byte) (uint32, filesys.Attr) {
	d := rc.call(progNFS, 1, func(e *encoder) { e.opaque(fh) })
	st := d.u32()
	if st != nfsOK {
		return st, filesys.Attr{}
	}
	d.b = append([]byte{0, 0, 0, 1}, d.b...) // as a post_op_attr
	a, _ := skipPostOp(d)
	return st, a
}

func (rc *rawClient) read(fh []byte, off uint64, n uint32) (uint32, []byte, bool) {
	d := rc.call(progNFS, 6, func(e *encoder) { e.opaque(fh); e.u64(off); e.u32(n) })
	st := d.u32()
	skipPostOp(d)
	if st != nfsOK {
		return st, nil, false
	}
	d.u32()
	eof := d.boolean()
	return st, bytes.Clone(d.opaque(maxIO)), eof
}

func TestStableWritesAndVerifier(t *testing.T) {
	fsys := testFS(t)
	s, addr := serve(t, fsys, Options{NoRootSquash: true})
	rc := dialRaw(t, addr)
	root := rc.root("/fs")
	st, fh := rc.create(root, "f", createGuarded, 0)
	if st != nfsOK {
		t.Fatalf("create: %d", st)
	}
	if st, _ := rc.create(root, "f", createGuarded, 0); st != nfsErrExist {
		t.Fatalf("guarded create of an existing name: %d, want NFS3ERR_EXIST", st)
	}
	for _, stable := range []uint32{unstable, dataSync, fileSync} {
		st, committed, verf := rc.write(fh, uint64(stable)*4, []byte("abcd"), stable)
		if st != nfsOK || committed != stable || verf != s.Verifier() {
			t.Fatalf("write stable=%d: status %d committed %d verifier %x (server's %x)", stable, st, committed, verf, s.Verifier())
		}
	}
	st, verf := rc.commit(fh)
	if st != nfsOK || verf != s.Verifier() {
		t.Fatalf("commit: %d %x", st, verf)
	}
	st, data, eof := rc.read(fh, 0, 100)
	if st != nfsOK || string(data) != "abcdabcdabcd" || !eof {
		t.Fatalf("read: %d %q eof %v", st, data, eof)
	}
	old := s.Verifier()
	s.dataLost(errTest)
	if _, verf := rc.commit(fh); verf == old {
		t.Fatal("the verifier did not change after a loss")
	}
}

var errTest = bytes.ErrTooLarge

func TestExclusiveCreate(t *testing.T) {
	fsys := testFS(t)
	_, addr := serve(t, fsys, Options{NoRootSquash: true})
	rc := dialRaw(t, addr)
	root := rc.root("/fs")
	st, fh := rc.create(root, "x", createExclusive, 0x0102030405060708)
	if st != nfsOK {
		t.Fatalf("exclusive create: %d", st)
	}
	// A resend (same verifier) finds its own file; another verifier does not.
	st, fh2 := rc.create(root, "x", createExclusive, 0x0102030405060708)
	if st != nfsOK || !bytes.Equal(fh, fh2) {
		t.Fatalf("resent exclusive create: %d", st)
	}
	if st, _ := rc.create(root, "x", createExclusive, 0x0102030405060709); st != nfsErrExist {
		t.Fatalf("exclusive create with another verifier: %d, want NFS3ERR_EXIST", st)
	}
	// UNCHECKED keeps the existing file.
	if st, fh3 := rc.create(root, "x", createUnchecked, 0); st != nfsOK || !bytes.Equal(fh, fh3) {
		t.Fatalf("unchecked create of an existing file: %d", st)
	}
}

func TestHandles(t *testing.T) {
	fsys := testFS(t)
	s, addr := serve(t, fsys, Options{NoRootSquash: true})
	rc := dialRaw(t, addr)
	root := rc.root("/fs")
	_, fh := rc.create(root, "f", createGuarded, 0)

	forged := bytes.Clone(fh)
	forged[15]++ // another inode, same MAC
	if st, _ := rc.getattr(forged); st != nfsErrBadHandle {
		t.Fatalf("forged handle: %d, want NFS3ERR_BADHANDLE", st)
	}
	if st, _ := rc.getattr(fh[:20]); st != nfsErrBadHandle {
		t.Fatalf("short handle: %d, want NFS3ERR_BADHANDLE", st)
	}
	other := testFS(t) // another file system: another export id and key
	uuid, key, _ := other.Identity()
	if st, _ := rc.getattr(newHandles(uuid, key).make(2, 1)); st != nfsErrStale {
		t.Fatalf("handle of another file system: %d, want NFS3ERR_STALE", st)
	}

	// A handle survives a rename and a new server (same file system).
	rc.call(progNFS, 14, func(e *encoder) { e.opaque(root); e.str("f"); e.opaque(root); e.str("g") })
	s.Close()
	_, addr2 := serve(t, fsys, Options{NoRootSquash: true})
	rc2 := dialRaw(t, addr2)
	if st, _ := rc2.getattr(fh); st != nfsOK {
		t.Fatalf("handle after rename and restart: %d", st)
	}
	// It dies with its file.
	rc2.call(progNFS, 12, func(e *encoder) { e.opaque(root); e.str("g") })
	if st, _ := rc2.getattr(fh); st != nfsErrStale {
		t.Fatalf("handle of a removed file: %d, want NFS3ERR_STALE", st)
	}
}

func TestAllowAndSquash(t *testing.T) {
	fsys := testFS(t)
	_, addr := serve(t, fsys, Options{Allow: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}})
	rc := dialRaw(t, addr)
	if _, err := rc.c.Write(rc.callBytes(progMount, 1, func(e *encoder) { e.str("/fs") })); err != nil {
		t.Fatal(err)
	}
	d := rc.accepted()
	if d.u32() != acceptSuccess || d.u32() != mntErrAcces {
		t.Fatal("a client outside --allow mounted")
	}
	if _, err := rc.c.Write(rc.callBytes(progNFS, 0, nil)); err != nil {
		t.Fatal(err)
	}
	d = &decoder{b: rc.reply()}
	d.u32()
	d.u32()
	if d.u32() != replyDenied || d.u32() != rejectAuthError || d.u32() != authTooWeak {
		t.Fatal("a client outside --allow was served")
	}

	// Root squash: uid 0 is nobody, who may not create in the root.
	_, addr = serve(t, fsys, Options{})
	rc = dialRaw(t, addr)
	root := rc.root("/fs")
	if st, _ := rc.create(root, "f", createGuarded, 0); st != nfsErrAcces {
		t.Fatalf("squashed root created a file in a 0755 root directory: %d", st)
	}
	ro, roAddr := serve(t, fsys, Options{NoRootSquash: true, ReadOnly: true})
	_ = ro
	rc = dialRaw(t, roAddr)
	if st, _ := rc.create(rc.root("/fs"), "f", createGuarded, 0); st != nfsErrROFS {
		t.Fatalf("read-only export: %d, want NFS3ERR_ROFS", st)
	}
}

// TestParallel sends many calls before reading any reply: they are served
// at once and each reply carries its call's xid.
func TestParallel(t *testing.T) {
	fsys := testFS(t)
	_, addr := serve(t, fsys, Options{NoRootSquash: true})
	rc := dialRaw(t, addr)
	root := rc.root("/fs")
	const n = 64
	var buf []byte
	first := rc.xid + 1
	for i := range n {
		buf = append(buf, rc.callBytes(progNFS, 9, func(e *encoder) { // MKDIR
			e.opaque(root)
			e.str("d" + string(rune('A'+i%26)) + string(rune('a'+i/26)))
			for range 4 {
				e.boolean(false)
			}
			e.u32(dontChange)
			e.u32(dontChange)
		})...)
	}
	if _, err := rc.c.Write(buf); err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]bool{}
	inOrder := true
	for i := range n {
		d := decoder{b: rc.reply()}
		xid := d.u32()
		if xid != first+uint32(i) {
			inOrder = false
		}
		d.u32()
		d.u32()
		d.u32()
		d.opaque(400)
		if d.u32() != acceptSuccess || d.u32() != nfsOK {
			t.Fatalf("mkdir xid %d failed", xid)
		}
		seen[xid] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct replies to %d calls", len(seen), n)
	}
	t.Logf("replies in call order: %v", inOrder)
}

// TestMalformed sends garbage, a header with bad credentials and a record
// larger than the server takes on one connection, while another keeps
// being served.
func TestMalformed(t *testing.T) {
	fsys := testFS(t)
	_, addr := serve(t, fsys, Options{NoRootSquash: true})
	good := dialRaw(t, addr)
	root := good.root("/fs")
	bad := dialRaw(t, addr)

	// Arguments that do not decode: GARBAGE_ARGS, and the connection goes on.
	rec := bad.callBytes(progNFS, 3, func(e *encoder) { e.u32(1 << 30) }) // LOOKUP, handle length 2^30
	bad.c.Write(rec)
	d := bad.accepted()
	if st := d.u32(); st != acceptGarbageArgs {
		t.Fatalf("garbage arguments: accept stat %d", st)
	}
	// A record larger than the server takes is dropped with GARBAGE_ARGS.
	big := bad.callBytes(progNFS, 7, func(e *encoder) { e.b = append(e.b, make([]byte, maxRecord+10)...) })
	var wg sync.WaitGroup
	wg.Go(func() { bad.c.Write(big) })
	d = bad.accepted()
	wg.Wait()
	if st := d.u32(); st != acceptGarbageArgs {
		t.Fatalf("oversized call: accept stat %d", st)
	}
	// Not a call at all: dropped; then bytes that end the connection.
	var e encoder
	e.u32(0)
	e.u32(7)
	e.u32(msgReply)
	bad.c.Write(finishRecord(&e))
	bad.c.Write([]byte{0, 0, 0})
	bad.c.Close()
	if st, _ := good.getattr(root); st != nfsOK {
		t.Fatalf("the other connection: %d", st)
	}
	// Unknown program and procedure.
	good.c.Write(good.callBytes(12345, 0, nil))
	d = good.accepted()
	if st := d.u32(); st != acceptProgUnavail {
		t.Fatalf("unknown program: %d", st)
	}
	good.c.Write(good.callBytes(progNFS, 99, nil))
	d = good.accepted()
	if st := d.u32(); st != acceptProcUnavail {
		t.Fatalf("unknown procedure: %d", st)
	}
}

func TestReaddirCookies(t *testing.T) {
	fsys := testFS(t)
	_, addr := serve(t, fsys, Options{NoRootSquash: true})
	rc := dialRaw(t, addr)
	root := rc.root("/fs")
	const n = 300
	for i := range n {
		if st, _ := rc.create(root, "file-with-a-long-name-"+string(rune('a'+i%26))+string(rune('a'+i/26)), createGuarded, 0); st != nfsOK {
			t.Fatal(st)
		}
	}
	// Small replies: the listing goes on cookie by cookie.
	names := map[string]bool{}
	var cookie uint64
	var verf []byte = make([]byte, 8)
	for round := 0; ; round++ {
		if round > 200 {
			t.Fatal("listing does not end")
		}
		d := rc.call(progNFS, 17, func(e *encoder) {
			e.opaque(root)
			e.u64(cookie)
			e.fixed(verf)
			e.u32(1024)
			e.u32(2048)
		})
		if st := d.u32(); st != nfsOK {
			t.Fatalf("readdirplus: %d", st)
		}
		skipPostOp(d)
		verf = bytes.Clone(d.fixed(8))
		for d.boolean() {
			d.u64()
			name := d.str(maxName)
			cookie = d.u64()
			if _, ok := skipPostOp(d); !ok && name != "." && name != ".." {
				t.Fatalf("%s: no attributes", name)
			}
			if d.boolean() {
				d.opaque(fhMax)
			}
			if names[name] {
				t.Fatalf("%s listed twice", name)
			}
			names[name] = true
		}
		if d.boolean() {
			break
		}
		if d.err != nil {
			t.Fatal(d.err)
		}
	}
	if len(names) != n+2 {
		t.Fatalf("listed %d names, want %d", len(names), n+2)
	}
	// A wrong verifier with a cookie is NFS3ERR_BAD_COOKIE.
	d := rc.call(progNFS, 16, func(e *encoder) { e.opaque(root); e.u64(cookie); e.u64(0xdead); e.u32(4096) })
	if st := d.u32(); st != nfsErrBadCookie {
		t.Fatalf("bad cookie verifier: %d", st)
	}
	// Too small for one entry.
	d = rc.call(progNFS, 16, func(e *encoder) { e.opaque(root); e.u64(0); e.u64(0); e.u32(100) })
	if st := d.u32(); st != nfsErrTooSmall {
		t.Fatalf("tiny readdir: %d", st)
	}
}

// TestDuplicateRequest resends a REMOVE with the same xid on a new
// connection: it gets the first reply (NFS3_OK), not NFS3ERR_NOENT.
func TestDuplicateRequest(t *testing.T) {
	fsys := testFS(t)
	_, addr := serve(t, fsys, Options{NoRootSquash: true})
	rc := dialRaw(t, addr)
	root := rc.root("/fs")
	rc.create(root, "f", createGuarded, 0)
	rec := rc.callBytes(progNFS, 12, func(e *encoder) { e.opaque(root); e.str("f") })
	for i := range 2 {
		c := dialRaw(t, addr)
		c.c.Write(rec)
		d := c.accepted()
		d.u32()
		if st := d.u32(); st != nfsOK {
			t.Fatalf("remove sent %d times: %d", i+1, st)
		}
	}
	// Another xid is another call.
	d := rc.call(progNFS, 12, func(e *encoder) { e.opaque(root); e.str("f") })
	if st := d.u32(); st != nfsErrNoEnt {
		t.Fatalf("a new remove of a removed name: %d", st)
	}
}

// TestSymlinkLong makes a symlink with the longest target (PATH_MAX - 1)
// and reads it back.
func TestSymlinkLong(t *testing.T) {
	fsys := testFS(t)
	_, addr := serve(t, fsys, Options{NoRootSquash: true})
	rc := dialRaw(t, addr)
	root := rc.root("/fs")
	target := string(bytes.Repeat([]byte("t/"), filesys.SymlinkBytesMax/2)) + "x"
	d := rc.call(progNFS, 10, func(e *encoder) {
		e.opaque(root)
		e.str("l")
		for range 4 {
			e.boolean(false)
		}
		e.u32(dontChange)
		e.u32(dontChange)
		e.str(target)
	})
	if st := d.u32(); st != nfsOK {
		t.Fatalf("symlink with a %d-byte target: %d", len(target), st)
	}
	d.boolean()
	fh := bytes.Clone(d.opaque(fhMax))
	d = rc.call(progNFS, 5, func(e *encoder) { e.opaque(fh) })
	if st := d.u32(); st != nfsOK {
		t.Fatalf("readlink: %d", st)
	}
	skipPostOp(d)
	if got := d.str(maxPath); got != target {
		t.Fatalf("readlink: %d bytes, want %d", len(got), len(target))
	}
}

// TestSuspendResume: while the file system is remounted every call is
// NFS3ERR_JUKEBOX, the verifier changes once, and handles work after.
func TestSuspendResume(t *testing.T) {
	fsys := testFS(t)
	s, addr := serve(t, fsys, Options{NoRootSquash: true})
	rc := dialRaw(t, addr)
	root := rc.root("/fs")
	_, fh := rc.create(root, "f", createGuarded, 0)
	_, _, verf := rc.write(fh, 0, []byte("x"), unstable)
	s.Suspend(errTest)
	if st, _ := rc.getattr(fh); st != nfsErrJukebox {
		t.Fatalf("getattr while suspended: %d, want NFS3ERR_JUKEBOX", st)
	}
	if st, _ := rc.commit(fh); st != nfsErrJukebox {
		t.Fatalf("commit while suspended: %d", st)
	}
	if st, _ := rc.create(root, "g", createGuarded, 0); st != nfsErrJukebox {
		t.Fatalf("create while suspended: %d", st)
	}
	s.Resume(fsys)
	st, v2 := rc.commit(fh)
	if st != nfsOK || v2 == verf || v2 != verf+1 {
		t.Fatalf("commit after resume: %d, verifier %x (before %x: want one change)", st, v2, verf)
	}
}
