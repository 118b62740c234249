package nfs

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	nfsc "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/rpc"

	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/filesys/fstest"
)

// testFS is a file system on a memory device, alone (no other node).
func testFS(t testing.TB) *filesys.FS {
	t.Helper()
	dev := fstest.NewMemDevice()
	if _, err := filesys.Format(context.Background(), dev, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	fs, err := filesys.Open(context.Background(), filesys.Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "gw", Session: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close(context.Background()) })
	return fs
}

// serve starts a gateway of fsys on loopback and returns its address.
func serve(t testing.TB, fsys *filesys.FS, opts Options) (*Server, string) {
	t.Helper()
	uuid, key, _ := fsys.Identity()
	if opts.Export == "" {
		opts.Export = "fs"
	}
	if opts.Allow == nil {
		opts.Allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}
	s, err := New(fsys, uuid, key, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return s, ln.Addr().String()
}

// mountTarget mounts the export with go-nfs-client as uid/gid.
func mountTarget(t *testing.T, addr, path string, uid, gid uint32) *nfsc.Target {
	t.Helper()
	host, port := splitAddr(t, addr)
	cl, err := nfsc.DialServiceAtPort(host, port)
	if err != nil {
		t.Fatal(err)
	}
	m := &nfsc.Mount{Client: cl}
	tg, err := m.Mount(path, rpc.AuthUnix{Machinename: "test", Uid: uid, Gid: gid, GidLen: 1, Gids: gid}.Auth())
	if err != nil {
		t.Fatalf("mount %s: %v", path, err)
	}
	t.Cleanup(tg.Close)
	return tg
}

func splitAddr(t testing.TB, addr string) (string, int) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return ap.Addr().String(), int(ap.Port())
}

func TestLibraryClient(t *testing.T) {
	fsys := testFS(t)
	_, addr := serve(t, fsys, Options{NoRootSquash: true})
	tg := mountTarget(t, addr, "/fs", 0, 0)
	if _, err := tg.Mkdir("dir", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := tg.OpenFile("dir/a", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("plumeria "), 300000) // 2.7 MB: several WRITEs
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tg.Rename("dir/a", "dir/b"); err != nil {
		t.Fatal(err)
	}
	rf, err := tg.Open("dir/b")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rf)
	rf.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes (want %d): %v", len(got), len(data), err)
	}
	if err := tg.Symlink("b", "dir/l"); err != nil {
		t.Fatal(err)
	}
	ents, err := tg.ReadDirPlus("dir")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]int64{}
	for _, e := range ents {
		names[e.Name()] = e.Size()
	}
	if names["b"] != int64(len(data)) || len(names) != 2 { // the client drops . and ..
		t.Fatalf("listing %v", names)
	}
	if err := tg.Remove("dir/b"); err != nil {
		t.Fatal(err)
	}
	if err := tg.Remove("dir/l"); err != nil {
		t.Fatal(err)
	}
	if err := tg.RmDir("dir"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tg.Lookup("dir"); err == nil {
		t.Fatal("dir is still there")
	}
}
