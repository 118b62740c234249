// Package layout is the on-disk format of a Plumeria file system inside
// one sparse 2^64-byte volume: where everything lives (this file) and the
// encoders and decoders of each kind of block (one file each, with its
// diagram). It does no I/O. Decoders return ErrCorrupt, never panic.
//
// Address map (format version 1), byte offsets in the volume:
//
//	0                  superblock (one block)
//	1 MiB              log slot headers: slot i at SlotBase + i*4 KiB, 256 slots
//	2 MiB              orphan tables: slot i's 64 blocks at OrphanBase + i*256 KiB
//	                   (orphan.go; metadata: logged, versioned)
//	1 GiB              log regions: slot i at LogBase + i*32 MiB
//	16 GiB             resource group headers: group g at RGBase + g*4 KiB
//	1 TiB              inodes: inode n at InodeBase + n*4 KiB (one block each)
//	32 TiB             quota realms (format 3): realm r's blocks at
//	                   QuotaBase + r*2 MiB (quota.go; metadata)
//	2^62               directory blocks: directory n's hash table at
//	                   DirBase + n*2^38 (metadata: logged, versioned)
//	2^63               extents: file n's bytes at DataBase + n*2^39, 512 GiB
//	                   each (data: not logged)
//
// Everything is sparse: a region costs space only where it was written.
// Inode numbers run from 1 (the root) to InodesMax-1; inode 0 is never
// used. Resource group g owns inodes [g*InodesPerRG, (g+1)*InodesPerRG)
// and, with them, their extents and directory regions: allocating an inode
// allocates both, so the only allocation bitmaps are the inode bitmaps.
// Metadata blocks (inodes, groups, directory blocks) are never decommitted
// and never hold data, so their versions only grow: a log record that
// outlived its block's reuse can never overwrite newer metadata. Data
// extents are decommitted when a file shrinks or is deleted.
package layout

import "errors"

// ErrCorrupt reports bytes that do not decode; wrapped with what is wrong.
var ErrCorrupt = errors.New("layout: corrupt block")

// Geometry of format version 1, which format version 2 keeps. Part of the
// format: never edit; add a version instead.
//
// Format version 2 (file versions, issue H) adds, on the same geometry:
// the inode's fver field (layout/inode.go), the history block at
// HistoryOff of every file's extent (layout/history.go), and a largest
// file of FileBytesMax (the extent's last chunk holds the history). Its
// metadata blocks keep the block format (BlockFormat) of version 1; the
// superblock says 2. A version-1 volume is refused until `plumeria fsck
// --upgrade` rewrites its superblock (a version-1 inode has a zero fver,
// which is right: no version made yet).
//
// Format version 3 (directory quotas, issue K) adds, on the same
// geometry: the realms field of inode headers and FlagQuota
// (layout/inode.go), and the quota blocks at QuotaBase (layout/quota.go).
// A version-2 volume has no quota and zero realms, which is right for
// version 3: `plumeria fsck --upgrade` only rewrites the superblock. A
// build of version 2 refuses a version-3 volume (it would not keep the
// quota ledgers).
const (
	FormatVersion = 3
	BlockFormat   = 1 // the format byte of every metadata block header
	BlockBytes    = 4096

	SuperAddr = 0

	SlotsMax     = 256
	SlotBase     = 1 << 20
	LogBase      = 1 << 30
	LogBytes     = 32 << 20
	RGBase       = 16 << 30
	InodesPerRG  = 16384
	RGsMax       = InodesMax / InodesPerRG
	InodeBase    = 1 << 40
	InodesMax    = 1 << 24
	DirBase      = 1 << 62
	DirShift     = 38
	DirBlocksMax = 1 << (DirShift - 12) // blocks of one directory
	DataBase     = 1 << 63
	ExtentShift  = 39
	ExtentBytes  = 1 << ExtentShift

	// Format version 2.
	HistoryChunk = 1 << 20                    // the extent's last MiB: never file bytes
	FileBytesMax = ExtentBytes - HistoryChunk // the largest file
	HistoryOff   = ExtentBytes - BlockBytes   // a file's history block in its extent
	NameLogBase  = 1 << 61                    // each directory's name log (layout/namelog.go)
	NameLogShift = 36                         // 64 GiB of name log per inode number
)

// Compile-time checks of the relations between regions.
const (
	_ = uint64(LogBase - SlotBase - SlotsMax*BlockBytes)        // slot headers end before the logs
	_ = uint64(RGBase - LogBase - SlotsMax*LogBytes)            // logs end before the groups
	_ = uint64(InodeBase - RGBase - RGsMax*BlockBytes)          // groups end before the inodes
	_ = uint64(DataBase - InodeBase - InodesMax*BlockBytes)     // inodes end before the extents
	_ = uint64(NameLogBase - InodeBase - InodesMax*BlockBytes)  // inodes end before the name logs
	_ = uint64(DirBase - NameLogBase - InodesMax<<NameLogShift) // name logs end before the directories
	_ = uint64(1<<64 - 1 - (DataBase + (InodesMax-1)*ExtentBytes + ExtentBytes - 1))
)

// SlotAddr is the address of log slot i's header block.
func SlotAddr(i int) uint64 { return SlotBase + uint64(i)*BlockBytes }

// LogAddr is the first byte of log slot i's region (LogBytes long).
func LogAddr(i int) uint64 { return LogBase + uint64(i)*LogBytes }

// RGAddr is the address of resource group g's header block.
func RGAddr(g int) uint64 { return RGBase + uint64(g)*BlockBytes }

// RGOf is the resource group that owns inode ino.
func RGOf(ino uint64) int { return int(ino / InodesPerRG) }

// InodeAddr is the address of inode ino's block.
func InodeAddr(ino uint64) uint64 { return InodeBase + ino*BlockBytes }

// ExtentAddr is the first byte of inode ino's extent.
func ExtentAddr(ino uint64) uint64 { return DataBase + ino<<ExtentShift }

// DirBlockAddr is the address of block n of directory ino's hash table.
func DirBlockAddr(ino, n uint64) uint64 { return DirBase + ino<<DirShift + n*BlockBytes }

// NameLogAddr is the address of block n of inode ino's name log.
func NameLogAddr(ino, n uint64) uint64 { return NameLogBase + ino<<NameLogShift + n*BlockBytes }

// NameLogBlocksMax is the number of blocks of one name log.
const NameLogBlocksMax = 1 << (NameLogShift - 12)

// ValidIno reports whether ino can name an inode.
func ValidIno(ino uint64) bool { return ino >= 1 && ino < InodesMax }
