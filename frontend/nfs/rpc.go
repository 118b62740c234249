package nfs

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// ONC RPC version 2 (RFC 5531) over TCP with record marking.
const (
	rpcVersion = 2

	msgCall  = 0
	msgReply = 1

	replyAccepted = 0
	replyDenied   = 1

	acceptSuccess      = 0
	acceptProgUnavail  = 1
	acceptProgMismatch = 2
	acceptProcUnavail  = 3
	acceptGarbageArgs  = 4
	acceptSystemErr    = 5

	rejectRPCMismatch = 0
	rejectAuthError   = 1

	authBadCred = 1
	authTooWeak = 5

	flavorNone = 0
	flavorSys  = 1

	maxAuthBytes   = 400 // RFC 5531: opaque_auth bodies
	maxMachineName = 255
	maxGids        = 16

	lastFragment = 1 << 31
)

// cred is a call's credential: AUTH_SYS ids, or none (AUTH_NONE and
// flavors this server does not check).
type cred struct {
	flavor   uint32
	uid, gid uint32
	gids     []uint32
}

// call is one decoded RPC call; args holds the procedure's arguments.
type call struct {
	xid, prog, vers, proc uint32
	cred                  cred
	args                  decoder
}

// errTooBig marks a record longer than the server takes.
var errTooBig = errors.New("nfs: request larger than the server takes")

// readRecord reads one record into buf (grown as needed, up to max
// bytes). A longer record is read to its end and dropped: it returns its
// first bytes (enough for the xid) and errTooBig, and the connection can
// go on. Any other error ends the connection.
func readRecord(r *bufio.Reader, buf []byte, max int) ([]byte, error) {
	rec := buf[:0]
	tooBig := false
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, err
		}
		mark := binary.BigEndian.Uint32(hdr[:])
		n := int(mark &^ lastFragment)
		switch {
		case tooBig:
			if _, err := r.Discard(n); err != nil {
				return nil, err
			}
		case len(rec)+n > max:
			tooBig = true
			keep := min(n, 64)
			rec = append(rec, make([]byte, keep)...)
			if _, err := io.ReadFull(r, rec[len(rec)-keep:]); err != nil {
				return nil, err
			}
			if _, err := r.Discard(n - keep); err != nil {
				return nil, err
			}
		default:
			start := len(rec)
			rec = slices.Grow(rec, n)[:start+n]
			if _, err := io.ReadFull(r, rec[start:]); err != nil {
				return nil, err
			}
		}
		if mark&lastFragment != 0 {
			break
		}
	}
	if tooBig {
		return rec, errTooBig
	}
	return rec, nil
}

// rejection is why a call gets no procedure reply: a denied or
// unaccepted reply (xid known) or nothing at all (not a call).
type rejection struct {
	denied bool   // MSG_DENIED, else MSG_ACCEPTED with stat
	stat   uint32 // accept_stat, or reject_stat when denied
	auth   uint32 // auth_stat when stat is rejectAuthError
	why    string
}

func (r *rejection) Error() string { return r.why }

// parseCall decodes a call's header. A record that is not a call at all
// returns ok false (no reply can be addressed: the caller drops it).
func parseCall(rec []byte) (c call, rej *rejection, ok bool) {
	d := decoder{b: rec}
	c.xid = d.u32()
	if mt := d.u32(); d.err != nil || mt != msgCall {
		return c, nil, false
	}
	rpcvers := d.u32()
	c.prog, c.vers, c.proc = d.u32(), d.u32(), d.u32()
	flavor := d.u32()
	body := d.opaque(maxAuthBytes)
	d.u32() // verifier flavor: AUTH_NONE or ignored
	d.opaque(maxAuthBytes)
	if d.err != nil {
		return c, &rejection{denied: true, stat: rejectAuthError, auth: authBadCred, why: "malformed call header: " + d.err.Error()}, true
	}
	if rpcvers != rpcVersion {
		return c, &rejection{denied: true, stat: rejectRPCMismatch, why: fmt.Sprintf("RPC version %d", rpcvers)}, true
	}
	c.cred.flavor = flavor
	if flavor == flavorSys {
		a := decoder{b: body}
		a.u32() // stamp
		a.opaque(maxMachineName)
		c.cred.uid, c.cred.gid = a.u32(), a.u32()
		n := a.u32()
		if n > maxGids {
			return c, &rejection{denied: true, stat: rejectAuthError, auth: authBadCred, why: fmt.Sprintf("AUTH_SYS with %d groups", n)}, true
		}
		for range n {
			c.cred.gids = append(c.cred.gids, a.u32())
		}
		if a.err != nil {
			return c, &rejection{denied: true, stat: rejectAuthError, auth: authBadCred, why: "malformed AUTH_SYS credential"}, true
		}
	}
	c.args = d
	return c, nil, true
}

// replyHeader starts a reply to xid in e (after the record mark, which
// finishRecord fills in) with an accepted status.
func replyHeader(e *encoder, xid, stat uint32) {
	e.b = append(e.b[:0], 0, 0, 0, 0) // record mark
	e.u32(xid)
	e.u32(msgReply)
	e.u32(replyAccepted)
	e.u32(flavorNone) // verifier
	e.u32(0)
	e.u32(stat)
}

// rejectReply encodes the reply for a rejected call.
func rejectReply(e *encoder, xid uint32, r *rejection) {
	if !r.denied {
		replyHeader(e, xid, r.stat)
		if r.stat == acceptProgMismatch {
			e.u32(3) // low and high version: only 3 of each program
			e.u32(3)
		}
		return
	}
	e.b = append(e.b[:0], 0, 0, 0, 0)
	e.u32(xid)
	e.u32(msgReply)
	e.u32(replyDenied)
	e.u32(r.stat)
	if r.stat == rejectRPCMismatch {
		e.u32(rpcVersion)
		e.u32(rpcVersion)
	} else {
		e.u32(r.auth)
	}
}

// finishRecord fills in the record mark of a reply built by replyHeader.
func finishRecord(e *encoder) []byte {
	putMark(e.b, len(e.b)-4)
	return e.b
}

// putMark writes at b's head the mark of a record of n bytes in one
// fragment.
func putMark(b []byte, n int) { binary.BigEndian.PutUint32(b, lastFragment|uint32(n)) }
