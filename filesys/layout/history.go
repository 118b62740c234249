package layout

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"unicode/utf8"
)

// History record: the block at HistoryOff of a file's extent, written at
// file version F when the file's version F is made (a close of a modified
// file). The bricks keep a block's entry of every file version
// (clustermap.Volume.FileVersions), so this one block holds the file's
// whole history: version F's record is the block as of version F, and its
// data is the extent as of version F (or the inline bytes below). The
// record is written before the log record that raises the inode's fver to
// F, so a record whose F is above the inode's fver is a version that was
// never made (a crash between the two): readers ignore it.
// Little-endian, format version 2:
//
//	 0         4        5        6           7      8        16        24       28       32      36      40
//	| magic u32 | fmt u8 | flags u8 | nodeLen u8 | zero | ino u64 | igen u64 | fver u32 | mode u32 | uid u32 | gid u32 |
//	 40         48                    60                   72                   84             86     88          92
//	| size u64 | closed s i64 ns u32 | mtime s i64 ns u32 | ctime s i64 ns u32 | inlineLen u16 | zero | crc32c u32 | zero |
//	 96                 160
//	| node (64 bytes)    | inline bytes ... (up to InlineBytes)
//
// crc32c is over the whole block with its own field zero. flags bit 0:
// the file's bytes were inline (the inline bytes are its contents).
const (
	historyMagic   = 0x48564c50 // "PLVH"
	historyFormat  = 1
	historyNodeOff = 96
	historyDataOff = 160
	HistoryNodeMax = historyDataOff - historyNodeOff

	historyInline = 1 << 0
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// FileVersion is a decoded history record: the state of file Ino (generation
// Gen) when its version FVer was made.
type FileVersion struct {
	Ino, Gen             uint64
	FVer                 uint32
	Mode, Uid, Gid       uint32
	Size                 uint64
	Closed, Mtime, Ctime Time
	Node                 string // the node that made it
	Inline               bool   // the contents are Data, not the extent
	Data                 []byte
}

// EncodeHistory returns v as a history block.
func EncodeHistory(v *FileVersion) ([]byte, error) {
	switch {
	case len(v.Node) > HistoryNodeMax:
		return nil, fmt.Errorf("layout: history of inode %d: node name of %d bytes (at most %d)", v.Ino, len(v.Node), HistoryNodeMax)
	case len(v.Data) > InlineBytes || !v.Inline && len(v.Data) > 0:
		return nil, fmt.Errorf("layout: history of inode %d: %d inline bytes (inline %v, at most %d)", v.Ino, len(v.Data), v.Inline, InlineBytes)
	case v.Inline && uint64(len(v.Data)) != v.Size:
		return nil, fmt.Errorf("layout: history of inode %d: inline file of size %d with %d bytes", v.Ino, v.Size, len(v.Data))
	}
	b := make([]byte, BlockBytes)
	le := binary.LittleEndian
	le.PutUint32(b[0:], historyMagic)
	b[4] = historyFormat
	if v.Inline {
		b[5] = historyInline
	}
	b[6] = byte(len(v.Node))
	le.PutUint64(b[8:], v.Ino)
	le.PutUint64(b[16:], v.Gen)
	le.PutUint32(b[24:], v.FVer)
	le.PutUint32(b[28:], v.Mode)
	le.PutUint32(b[32:], v.Uid)
	le.PutUint32(b[36:], v.Gid)
	le.PutUint64(b[40:], v.Size)
	putTime(b[48:], v.Closed)
	putTime(b[60:], v.Mtime)
	putTime(b[72:], v.Ctime)
	le.PutUint16(b[84:], uint16(len(v.Data)))
	copy(b[historyNodeOff:], v.Node)
	copy(b[historyDataOff:], v.Data)
	le.PutUint32(b[88:], crc32.Checksum(b, castagnoli))
	return b, nil
}

// ErrNoHistory reports a history block that was never written.
var ErrNoHistory = fmt.Errorf("layout: no history record")

// DecodeHistory reads a history block of inode ino. A block of zeros is
// ErrNoHistory; anything else that is not a valid record of ino is
// ErrCorrupt.
func DecodeHistory(b []byte, ino uint64) (*FileVersion, error) {
	if len(b) != BlockBytes {
		return nil, fmt.Errorf("%w: history block of %d bytes", ErrCorrupt, len(b))
	}
	le := binary.LittleEndian
	if m := le.Uint32(b); m != historyMagic {
		if m == 0 && allZero(b) {
			return nil, ErrNoHistory
		}
		return nil, fmt.Errorf("%w: history block of inode %d: bad magic %#x", ErrCorrupt, ino, m)
	}
	sum := le.Uint32(b[88:])
	c := crc32.Update(0, castagnoli, b[:88])
	c = crc32.Update(c, castagnoli, []byte{0, 0, 0, 0})
	c = crc32.Update(c, castagnoli, b[92:])
	if c != sum {
		return nil, fmt.Errorf("%w: history block of inode %d: checksum %#x, stored %#x", ErrCorrupt, ino, c, sum)
	}
	v := &FileVersion{
		Ino: le.Uint64(b[8:]), Gen: le.Uint64(b[16:]), FVer: le.Uint32(b[24:]),
		Mode: le.Uint32(b[28:]), Uid: le.Uint32(b[32:]), Gid: le.Uint32(b[36:]), Size: le.Uint64(b[40:]),
		Closed: getTime(b[48:]), Mtime: getTime(b[60:]), Ctime: getTime(b[72:]),
		Inline: b[5]&historyInline != 0,
	}
	nNode, nData := int(b[6]), int(le.Uint16(b[84:]))
	switch {
	case b[4] != historyFormat:
		return nil, fmt.Errorf("%w: history block of inode %d: record format %d, this build reads %d", ErrCorrupt, ino, b[4], historyFormat)
	case v.Ino != ino:
		return nil, fmt.Errorf("%w: history record of inode %d where inode %d's belongs", ErrCorrupt, v.Ino, ino)
	case b[5]&^historyInline != 0 || nNode > HistoryNodeMax || nData > InlineBytes || !v.Inline && nData > 0 ||
		v.Inline && uint64(nData) != v.Size || v.Size > FileBytesMax || v.FVer == 0:
		return nil, fmt.Errorf("%w: history record of inode %d: bad fields (flags %#x, node %d bytes, data %d, size %d, version %d)", ErrCorrupt, ino, b[5], nNode, nData, v.Size, v.FVer)
	case b[7] != 0 || b[86] != 0 || b[87] != 0 || !allZero(b[92:historyNodeOff]) ||
		!allZero(b[historyNodeOff+nNode:historyDataOff]) || !allZero(b[historyDataOff+nData:]):
		return nil, fmt.Errorf("%w: history record of inode %d: bytes outside its fields", ErrCorrupt, ino)
	case !utf8.Valid(b[historyNodeOff : historyNodeOff+nNode]):
		return nil, fmt.Errorf("%w: history record of inode %d: node name not UTF-8", ErrCorrupt, ino)
	}
	v.Node = string(b[historyNodeOff : historyNodeOff+nNode])
	if v.Inline {
		v.Data = append([]byte{}, b[historyDataOff:historyDataOff+nData]...)
	}
	return v, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
