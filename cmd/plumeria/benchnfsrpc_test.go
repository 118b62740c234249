package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/filesys/fstest"
	"github.com/plumeria-fs/plumeria/frontend/nfs"
)

// rawCall is a call as a test server reads it.
type rawCall struct {
	xid, proc uint32
	uid, gid  uint32
	args      []byte
}

// readRawCall reads one call and checks its RPC header.
func readRawCall(t *testing.T, r io.Reader) (rawCall, error) {
	rec, err := readRPCRecord(r, 1<<20)
	if err != nil {
		return rawCall{}, err
	}
	d := xdrDecoder{b: rec}
	var c rawCall
	c.xid = d.u32()
	typ, vers, prog, pvers := d.u32(), d.u32(), d.u32(), d.u32()
	c.proc = d.u32()
	flavor := d.u32()
	cred := xdrDecoder{b: d.opaque()}
	verfFlavor, verf := d.u32(), d.opaque()
	cred.u32() // stamp
	machine := string(cred.opaque())
	c.uid, c.gid = cred.u32(), cred.u32()
	if typ != rpcCall || vers != 2 || prog != nfsProgram || pvers != 3 || flavor != rpcAuthSys ||
		machine != "plumeria-bench" || cred.u32() != 0 || verfFlavor != 0 || len(verf) != 0 || d.err != nil || cred.err != nil {
		t.Errorf("call header %d %d %d %d flavor %d machine %q verifier %d %x: %v %v", typ, vers, prog, pvers, flavor, machine, verfFlavor, verf, d.err, cred.err)
	}
	c.args = d.b
	return c, nil
}

// writeRawReply sends an accepted, successful reply to xid with body, in
// two fragments.
func writeRawReply(w io.Writer, xid uint32, body []byte) error {
	var rec []byte
	for _, v := range []uint32{xid, rpcReply, rpcAccepted, 0, 0, 0} {
		rec = xdrU32(rec, v)
	}
	rec = append(rec, body...)
	half := len(rec) / 2
	var b []byte
	b = xdrU32(b, uint32(half))
	b = append(b, rec[:half]...)
	b = xdrU32(b, rpcLastFrag|uint32(len(rec)-half))
	b = append(b, rec[half:]...)
	_, err := w.Write(b)
	return err
}

// TestRPCClientPipelined: calls from three goroutines are all sent before
// any reply; replies in the reverse order reach their own callers; a
// reply to no call, then a dropped connection, fail the calls waiting and
// every later call, without a hang.
func TestRPCClientPipelined(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan struct{})
	go func() {
		defer close(served)
		nc, err := ln.Accept()
		if err != nil {
			t.Error(err)
			return
		}
		defer nc.Close()
		r := bufio.NewReader(nc)
		var calls []rawCall
		for range 3 {
			c, err := readRawCall(t, r)
			if err != nil {
				t.Error(err)
				return
			}
			if c.uid != 7 || c.gid != 8 {
				t.Errorf("uid %d gid %d", c.uid, c.gid)
			}
			calls = append(calls, c)
		}
		for i := len(calls) - 1; i >= 0; i-- {
			body := append(xdrU32(nil, calls[i].proc), calls[i].args...)
			if err := writeRawReply(nc, calls[i].xid, body); err != nil {
				t.Error(err)
			}
		}
		c, err := readRawCall(t, r) // answered with another xid
		if err == nil {
			err = writeRawReply(nc, c.xid+1000, nil)
		}
		if err != nil {
			t.Error(err)
		}
	}()
	c, err := dialRPC(ln.Addr().String(), 7, 8, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	var wg sync.WaitGroup
	for i := range uint32(3) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := []byte(strings.Repeat("ab", int(i)+1))
			body, err := c.call(10+i, args[:1], args[1:])
			if err != nil || binary.BigEndian.Uint32(body) != 10+i || !bytes.Equal(body[4:], args) {
				t.Errorf("call %d: %x %v", i, body, err)
			}
		}()
	}
	wg.Wait()
	if _, err := c.call(1); err == nil || !strings.Contains(err.Error(), "no call awaits") {
		t.Errorf("a reply to another xid: %v", err)
	}
	<-served
	if _, err := c.call(1); err == nil {
		t.Error("a call after the connection failed succeeded")
	}
}

// TestParseRPCReply: refusals are errors naming the xid; a short reply
// is an error, not a panic.
func TestParseRPCReply(t *testing.T) {
	u32s := func(v ...uint32) []byte {
		var b []byte
		for _, x := range v {
			b = xdrU32(b, x)
		}
		return b
	}
	for name, c := range map[string]struct {
		rec  []byte
		want string
	}{
		"ok":          {u32s(9, 1, 0, 0, 0, 0, 42), ""},
		"proc unavil": {u32s(9, 1, 0, 0, 0, 3), "accept_stat 3"},
		"denied":      {u32s(9, 1, 1, 1, 5), "denied"},
		"a call":      {u32s(9, 0), "not a reply"},
		"short":       {u32s(9, 1, 0, 0, 4), "xid 9"},
	} {
		xid, body, err := parseRPCReply(c.rec)
		switch {
		case xid != 9:
			t.Errorf("%s: xid %d", name, xid)
		case c.want == "" && (err != nil || binary.BigEndian.Uint32(body) != 42):
			t.Errorf("%s: %x %v", name, body, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
		}
	}
}

// countingFS counts the WRITEs the gateway serves at once: the first
// ones wait until want are under way (or a second has passed).
type countingFS struct {
	*filesys.FS
	want int
	mu   sync.Mutex
	now  int
	most int
	full chan struct{}
}

func (f *countingFS) Write(ctx context.Context, ino, gen uint64, p []byte, off uint64, appendMode bool) (int, error) {
	f.mu.Lock()
	f.now++
	if f.now > f.most {
		f.most = f.now
		if f.most == f.want {
			close(f.full)
		}
	}
	f.mu.Unlock()
	select {
	case <-f.full:
	case <-time.After(time.Second):
	}
	defer func() { f.mu.Lock(); f.now--; f.mu.Unlock() }()
	return f.FS.Write(ctx, ino, gen, p, off, appendMode)
}

// serveGateway starts the real gateway of fsys on loopback, exporting
// "fs" to 127.0.0.0/8 without root squash, as frontend/nfs's tests do.
func serveGateway(t *testing.T, fsys nfs.FileSystem, id *filesys.FS) string {
	t.Helper()
	uuid, key, _ := id.Identity()
	s, err := nfs.New(fsys, uuid, key, nfs.Options{Export: "fs", NoRootSquash: true,
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return ln.Addr().String()
}

// memFS is a file system on a memory device, alone.
func memFS(t *testing.T) *filesys.FS {
	t.Helper()
	ctx := context.Background()
	dev := fstest.NewMemDevice()
	if _, err := filesys.Format(ctx, dev, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	fsys, err := filesys.Open(ctx, filesys.Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "gw", Session: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fsys.Close(ctx) })
	return fsys
}

// TestNFSSeqGateway: against the real gateway, the sequential phase has
// --qd WRITEs under way at once on its one connection, and the file it
// leaves holds the pattern, as go-nfs-client reads it.
func TestNFSSeqGateway(t *testing.T) {
	fsys := memFS(t)
	counting := &countingFS{FS: fsys, want: 4, full: make(chan struct{})}
	addr := serveGateway(t, counting, fsys)
	cfg := benchNFSConfig{gateway: addr, export: "fs", seqBytes: 5<<20 + 4097, qd: 4, log: io.Discard}
	write, read, err := nfsSeq(context.Background(), cfg, "top", 42)
	if err != nil || write <= 0 || read <= 0 {
		t.Fatalf("%v MiB/s, %v MiB/s: %v", write, read, err)
	}
	if counting.most != cfg.qd {
		t.Errorf("at most %d WRITEs under way at once, want %d", counting.most, cfg.qd)
	}
	c, err := dialNFS(addr, "fs")
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	f, err := c.target.Open("top/" + benchSeqFileName)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(f)
	if err != nil || int64(len(got)) != cfg.seqBytes {
		t.Fatalf("read %d bytes: %v", len(got), err)
	}
	want := make([]byte, benchNFSChunkBytes)
	for off := int64(0); off < cfg.seqBytes; off += benchNFSChunkBytes {
		p := got[off:min(off+benchNFSChunkBytes, cfg.seqBytes)]
		if err := checkPattern(p, want[:len(p)], 42, off); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBenchNFSGateway: the whole bench against the real gateway and a
// plain directory prints every line, and removes what it made.
func TestBenchNFSGateway(t *testing.T) {
	fsys := memFS(t)
	addr := serveGateway(t, fsys, fsys)
	dir := t.TempDir()
	cfg := benchNFSConfig{gateway: addr, export: "fs", dir: dir, clients: []int{2}, files: 3, runs: 1,
		seqBytes: 3<<20 + 1, qd: 3, log: io.Discard}
	c, err := dialNFS(addr, "fs")
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if _, err := c.target.Mkdir("keep", 0o755); err != nil { // not the bench's
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runBenchNFS(context.Background(), &out, cfg); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		names = append(names, strings.Fields(l)[0])
	}
	want := "nfs_create_c2 nfs_create_c2_latency nfs_create_c2_latency_p99 fuse_create_fsync_c2 fuse_create_fsync_c2_latency " +
		"fuse_create_fsync_c2_latency_p99 nfs_create_c2_ratio nfs_seq_write nfs_seq_read fuse_seq_write_fsync fuse_seq_read " +
		"nfs_seq_write_ratio nfs_seq_read_ratio"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("lines\n%s\nwant\n%s", got, want)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left in DIR: %v", left)
	}
	entries, err := c.target.ReadDirPlus(".")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		if e.Name() != "." && e.Name() != ".." {
			left = append(left, e.Name())
		}
	}
	if len(left) != 1 || left[0] != "keep" {
		t.Errorf("in the export after the bench: %v, want [keep]", left)
	}
}
