package nfs

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// rawCall is a call as a test server reads it.
type rawCall struct {
	xid, proc uint32
	uid, gid  uint32
	args      []byte
}

// readRawCall reads one call and checks its RPC header.
func readRawCall(t *testing.T, r *bufio.Reader) (rawCall, error) {
	rec, err := readRecord(r, nil, 1<<20)
	if err != nil {
		return rawCall{}, err
	}
	call, rej, ok := parseCall(rec)
	if !ok || rej != nil || call.prog != progNFS || call.vers != 3 || call.cred.flavor != flavorSys || len(call.cred.gids) != 0 {
		t.Errorf("call header: %+v %v %v", call, rej, ok)
	}
	return rawCall{xid: call.xid, proc: call.proc, uid: call.cred.uid, gid: call.cred.gid, args: call.args.b}, nil
}

// writeRawReply sends an accepted, successful reply to xid with body, in
// two fragments.
func writeRawReply(w io.Writer, xid uint32, body []byte) error {
	var e encoder
	replyHeader(&e, xid, acceptSuccess)
	rec := append(e.b[4:], body...)
	half := len(rec) / 2
	var b encoder
	b.u32(uint32(half))
	b.b = append(b.b, rec[:half]...)
	b.u32(lastFragment | uint32(len(rec)-half))
	b.b = append(b.b, rec[half:]...)
	_, err := w.Write(b.b)
	return err
}

// TestClientPipelined: calls from three goroutines are all sent before
// any reply; replies in the reverse order reach their own callers; a
// reply to no call, then a dropped connection, fail the calls waiting and
// every later call, without a hang.
func TestClientPipelined(t *testing.T) {
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
			body := append(binary.BigEndian.AppendUint32(nil, calls[i].proc), calls[i].args...)
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
	c, err := Dial(ln.Addr().String(), 7, 8, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	for i := range uint32(3) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := []byte(strings.Repeat("ab", int(i)+1))
			body, err := c.Call(progNFS, 10+i, args[:1], args[1:])
			if err != nil || binary.BigEndian.Uint32(body) != 10+i || !bytes.Equal(body[4:], args) {
				t.Errorf("call %d: %x %v", i, body, err)
			}
		}()
	}
	wg.Wait()
	if _, err := c.Call(progNFS, 1); err == nil || !strings.Contains(err.Error(), "no call awaits") {
		t.Errorf("a reply to another xid: %v", err)
	}
	<-served
	if _, err := c.Call(progNFS, 1); err == nil {
		t.Error("a call after the connection failed succeeded")
	}
}

// TestParseReply: refusals are errors naming the xid; a short reply is
// an error, not a panic.
func TestParseReply(t *testing.T) {
	u32s := func(v ...uint32) []byte {
		var e encoder
		for _, x := range v {
			e.u32(x)
		}
		return e.b
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
		xid, body, err := parseReply(c.rec)
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

// TestClientGateway: the client's procedures against the gateway,
// several WRITEs in flight on its one connection.
func TestClientGateway(t *testing.T) {
	fsys := testFS(t)
	s, addr := serve(t, fsys, Options{NoRootSquash: true})
	c, err := Dial(addr, 0, 0, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	root, err := c.Mount("/fs")
	if err != nil {
		t.Fatal(err)
	}
	fh, err := c.CreateGuarded(root, "f")
	if err != nil {
		t.Fatal(err)
	}
	var se *StatusError
	if _, err := c.CreateGuarded(root, "f"); !errors.As(err, &se) || se.Status != nfsErrExist {
		t.Fatalf("second guarded create: %v, want NFS3ERR_EXIST", err)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			if v, err := c.WriteUnstable(fh, uint64(i)*1<<18, data[i<<18:(i+1)<<18]); err != nil || v != s.Verifier() {
				t.Errorf("write %d: %x %v", i, v, err)
			}
		})
	}
	wg.Wait()
	if v, err := c.Commit(fh); err != nil || v != s.Verifier() {
		t.Fatalf("commit: %x %v", v, err)
	}
	got, err := c.Read(fh, 0, len(data))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %d bytes, %v", len(got), err)
	}
	if _, err := c.Mount("/nope"); !errors.As(err, &se) || se.Status != mntErrNoEnt {
		t.Fatalf("mount of another path: %v", err)
	}
}
