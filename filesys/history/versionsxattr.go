package history

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/plumeria-fs/plumeria/filesys"
)

// VersionsXattr is the extended attribute through which a mount tells a
// regular file's versions (filesys.Versions) to `plumeria versions`:
// reading it on a live file, or on one under .plumeria/at/T (a file
// deleted or renamed since), returns one line per version, oldest first:
//
//	VERSION CLOSED_NS SIZE MODE_OCTAL UID GID MTIME_NS NODE
//
// (NODE quoted as Go does). VERSION counts the file's versions from 1 (the
// numbers the file system keeps go on from an earlier file of the same
// inode number). It is never listed and cannot be set. A file
// with more versions than 64 KiB of lines holds shows its newest, after a
// first line "# older N" counting those left out.
const VersionsXattr = "user.plumeria.versions"

// xattrMax is the largest extended attribute value Linux passes.
const xattrMax = 64 << 10

// FileVersion is one line of VersionsXattr.
type FileVersion struct {
	Version    uint32
	Closed     time.Time
	Size       uint64
	Mode       uint32
	Uid, Gid   uint32
	Mtime      time.Time
	Node       string
	OlderShown bool // not a version: the count of older versions left out is in Version
}

// encodeVersions renders vs as VersionsXattr's value.
func encodeVersions(vs []filesys.Version) []byte {
	lines := make([]string, len(vs))
	for i, v := range vs {
		lines[i] = fmt.Sprintf("%d %d %d %o %d %d %d %s\n", i+1, v.Closed.UnixNano(), v.Attr.Size, v.Attr.Mode,
			v.Attr.Uid, v.Attr.Gid, v.Attr.Mtime.UnixNano(), strconv.Quote(v.Node))
	}
	n, first := 0, len(lines)
	for first > 0 && n+len(lines[first-1]) <= xattrMax-64 {
		first--
		n += len(lines[first])
	}
	var b bytes.Buffer
	if first > 0 {
		fmt.Fprintf(&b, "# older %d\n", first)
	}
	for _, l := range lines[first:] {
		b.WriteString(l)
	}
	return b.Bytes()
}

// ParseVersions reads VersionsXattr's value.
func ParseVersions(b []byte) ([]FileVersion, error) {
	var out []FileVersion
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# older "); ok && n == 1 {
			k, err := strconv.ParseUint(rest, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("versions line %d: %q", n, line)
			}
			out = append(out, FileVersion{Version: uint32(k), OlderShown: true})
			continue
		}
		f := strings.SplitN(line, " ", 8)
		if len(f) != 8 {
			return nil, fmt.Errorf("versions line %d: %q: %d fields", n, line, len(f))
		}
		var nums [7]uint64
		for i := range nums {
			base, bits := 10, 64
			switch i {
			case 0, 4, 5:
				bits = 32
			case 3:
				base, bits = 8, 32
			}
			var err error
			if nums[i], err = strconv.ParseUint(f[i], base, bits); err != nil {
				return nil, fmt.Errorf("versions line %d: field %d: %v", n, i+1, err)
			}
		}
		node, err := strconv.Unquote(f[7])
		if err != nil {
			return nil, fmt.Errorf("versions line %d: node %s: %v", n, f[7], err)
		}
		out = append(out, FileVersion{Version: uint32(nums[0]), Closed: time.Unix(0, int64(nums[1])), Size: nums[2],
			Mode: uint32(nums[3]), Uid: uint32(nums[4]), Gid: uint32(nums[5]), Mtime: time.Unix(0, int64(nums[6])), Node: node})
	}
	return out, sc.Err()
}

// versionsXattr returns VersionsXattr of ino in fs (the live file system
// or a view).
func (h *FS) versionsXattr(ctx context.Context, fs tree, ino uint64) ([]byte, error) {
	if !h.live.KeepsVersions() {
		return nil, filesys.ErrNoAttr
	}
	var vs []filesys.Version
	var err error
	switch t := fs.(type) {
	case *filesys.FS:
		if t != h.live {
			return nil, filesys.ErrNoAttr // a snapshot: its files' versions are the live ones'
		}
		vs, err = h.live.Versions(ctx, ino)
	case *timeView:
		vi, gerr := t.get(ino)
		if gerr != nil {
			return nil, gerr
		}
		vs, err = h.live.VersionsOf(ctx, vi.ino, vi.gen)
	default:
		return nil, filesys.ErrNoAttr
	}
	if errors.Is(err, filesys.ErrInvalid) {
		return nil, filesys.ErrNoAttr // not a regular file
	}
	if err != nil {
		return nil, err
	}
	return encodeVersions(vs), nil
}
