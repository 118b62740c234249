package main

import (
	"bytes"
	"context"
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
