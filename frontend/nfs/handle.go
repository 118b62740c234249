package nfs

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
)

// A file handle (nfs_fh3, at most 64 bytes) is 44 bytes:
//
//	 0         1       4            12        20        28         44
//	| version | 0 0 0 | export u64 | ino u64 | gen u64 | mac 16 B |
//
// export is the file system's id (the first 8 bytes of its UUID), so a
// handle from another cluster or volume is stale; mac is HMAC-SHA256 of
// the first 28 bytes under the file system's handle key (a secret every
// member reads in the superblock), cut to 16 bytes, so a client cannot
// forge one. Nothing in it is per process or per path: a handle survives
// a gateway restart, a failover to another gateway and a rename; it
// dies with its inode (generation), as NFS wants. Version 1.
const (
	handleVersion = 1
	handleBytes   = 44
	handleMACOff  = 28
)

var (
	errBadHandle = errors.New("nfs: malformed file handle")              // NFS3ERR_BADHANDLE
	errForged    = errors.New("nfs: file handle fails its MAC")          // NFS3ERR_BADHANDLE
	errOtherFS   = errors.New("nfs: file handle of another file system") // NFS3ERR_STALE
)

// handles makes and checks the file handles of one exported file system.
type handles struct {
	export uint64
	key    []byte
}

func newHandles(uuid [16]byte, key [32]byte) *handles {
	return &handles{export: binary.BigEndian.Uint64(uuid[:8]), key: key[:]}
}

func (h *handles) mac(b []byte) []byte {
	m := hmac.New(sha256.New, h.key)
	m.Write(b[:handleMACOff])
	return m.Sum(nil)[:handleBytes-handleMACOff]
}

// make returns the handle of inode ino, generation gen.
func (h *handles) make(ino, gen uint64) []byte {
	b := make([]byte, handleBytes)
	b[0] = handleVersion
	binary.BigEndian.PutUint64(b[4:], h.export)
	binary.BigEndian.PutUint64(b[12:], ino)
	binary.BigEndian.PutUint64(b[20:], gen)
	copy(b[handleMACOff:], h.mac(b))
	return b
}

// parse checks b and returns the inode and generation it names.
func (h *handles) parse(b []byte) (ino, gen uint64, err error) {
	if len(b) != handleBytes || b[0] != handleVersion || b[1]|b[2]|b[3] != 0 {
		return 0, 0, errBadHandle
	}
	if !hmac.Equal(h.mac(b), b[handleMACOff:]) {
		if binary.BigEndian.Uint64(b[4:]) != h.export {
			return 0, 0, errOtherFS
		}
		return 0, 0, errForged
	}
	ino, gen = binary.BigEndian.Uint64(b[12:]), binary.BigEndian.Uint64(b[20:])
	if ino == 0 {
		return 0, 0, errBadHandle
	}
	return ino, gen, nil
}
