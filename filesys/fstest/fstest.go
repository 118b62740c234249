// Package fstest holds test doubles for the file system: a sparse
// in-memory volume and a lock stand-in for a node alone. Tests only.
package fstest

import (
	"context"
	"fmt"
	"sync"

	"github.com/plumeria-fs/plumeria/lock"
)

// MemDevice is a sparse in-memory volume (filesys.Device).
type MemDevice struct {
	mu     sync.Mutex
	blocks map[uint64][]byte // by 4 KiB block number: the newest bytes
	writes int
	// hist, on a device that keeps file versions (NewMemVersionDevice),
	// holds every block's entries by file version, ascending, as the
	// bricks keep them (clustermap.Volume.FileVersions): untagged writes
	// are version untagged; data nil is a decommit.
	hist map[uint64][]memEntry
}

type memEntry struct {
	fver uint32
	data []byte
}

// untagged is the version of untagged writes: above every file version.
const untagged = 1<<32 - 1

// NewMemVersionDevice returns an empty volume that keeps file versions
// (filesys.VersionDevice).
func NewMemVersionDevice() *MemDevice {
	return &MemDevice{blocks: map[uint64][]byte{}, hist: map[uint64][]memEntry{}}
}

// KeepsVersions reports whether the device keeps file versions.
func (d *MemDevice) KeepsVersions() bool { return d.hist != nil }

// WriteDataVersion writes p at off as file version fver.
func (d *MemDevice) WriteDataVersion(ctx context.Context, p []byte, off uint64, fver uint32) error {
	return d.writeVersion(p, off, fver)
}

// DecommitVersion zeroes [off, off+n) as of file version fver.
func (d *MemDevice) DecommitVersion(ctx context.Context, off, n uint64, fver uint32) error {
	return d.decommit(off, n, fver)
}

// ReadAtVersion reads p at off as of file version fver: per block, the
// newest entry at or below it.
func (d *MemDevice) ReadAtVersion(ctx context.Context, p []byte, off uint64, fver uint32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := 0; i < len(p); {
		a := off + uint64(i)
		blk, o := a/4096, int(a%4096)
		n := min(len(p)-i, 4096-o)
		clear(p[i : i+n])
		es := d.hist[blk]
		for j := len(es) - 1; j >= 0; j-- {
			if es[j].fver <= fver {
				if es[j].data != nil {
					copy(p[i:i+n], es[j].data[o:])
				}
				break
			}
		}
		i += n
	}
	return nil
}

// BlockVersions lists the file versions at which the block at off holds
// bytes.
func (d *MemDevice) BlockVersions(ctx context.Context, off uint64) ([]uint32, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []uint32
	for _, e := range d.hist[off/4096] {
		if e.data != nil && e.fver != untagged {
			out = append(out, e.fver)
		}
	}
	return out, nil
}

// PruneVersions drops, in [off, off+n), every block entry of a version
// below below that neither the newest entry (the live volume) nor a
// version in keep (its newest entry at or below) reads.
func (d *MemDevice) PruneVersions(ctx context.Context, off, n uint64, keep []uint32, below uint32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writes++
	for blk, es := range d.hist {
		if blk*4096 < off || blk*4096 >= off+n || len(es) == 0 {
			continue
		}
		read := map[int]bool{len(es) - 1: true}
		for _, k := range keep {
			for j := len(es) - 1; j >= 0; j-- {
				if es[j].fver <= k {
					read[j] = true
					break
				}
			}
		}
		var out []memEntry
		for j, e := range es {
			if read[j] || e.fver >= below {
				out = append(out, e)
			}
		}
		d.hist[blk] = out
	}
	return nil
}

// record adds blk's entry at fver (the caller holds d.mu): it replaces an
// entry of the same version; a lower version than the newest is refused,
// as the file system never writes one.
func (d *MemDevice) record(blk uint64, fver uint32, data []byte) {
	if d.hist == nil {
		return
	}
	es := d.hist[blk]
	if n := len(es); n > 0 && es[n-1].fver >= fver {
		if es[n-1].fver > fver {
			panic(fmt.Sprintf("fstest: block %d written at version %d after version %d", blk, fver, es[n-1].fver))
		}
		es[n-1].data = data
		return
	}
	d.hist[blk] = append(es, memEntry{fver, data})
}

// NewMemDevice returns an empty volume: every byte reads as zero.
func NewMemDevice() *MemDevice { return &MemDevice{blocks: map[uint64][]byte{}} }

// ReadAt reads p at off; never-written bytes are zeros.
func (d *MemDevice) ReadAt(ctx context.Context, p []byte, off uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := 0; i < len(p); {
		a := off + uint64(i)
		blk, o := a/4096, int(a%4096)
		n := min(len(p)-i, 4096-o)
		if b := d.blocks[blk]; b != nil {
			copy(p[i:i+n], b[o:])
		} else {
			clear(p[i : i+n])
		}
		i += n
	}
	return nil
}

// WriteData writes p at off. Tests also use it to change blocks behind
// the file system's back.
func (d *MemDevice) WriteData(ctx context.Context, p []byte, off uint64) error {
	return d.write(p, off)
}

// WriteMeta writes p at off: there is no reserve here.
func (d *MemDevice) WriteMeta(ctx context.Context, p []byte, off uint64) error {
	return d.write(p, off)
}

// WriteMetaBlocks writes p at off. It does not keep blocks of a newer
// version as a brick does: writes in memory never arrive late.
func (d *MemDevice) WriteMetaBlocks(ctx context.Context, p []byte, off uint64) error {
	return d.write(p, off)
}

// write is what every kind of write does here. (No WriteAt: a test double
// wrapping MemDevice must intercept the kinds it cares about by name.)
func (d *MemDevice) write(p []byte, off uint64) error {
	return d.writeVersion(p, off, untagged)
}

func (d *MemDevice) writeVersion(p []byte, off uint64, fver uint32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writes++
	for i := 0; i < len(p); {
		a := off + uint64(i)
		blk, o := a/4096, int(a%4096)
		n := min(len(p)-i, 4096-o)
		b := d.blocks[blk]
		if b == nil {
			b = make([]byte, 4096)
			d.blocks[blk] = b
		}
		copy(b[o:], p[i:i+n])
		d.record(blk, fver, append([]byte(nil), b...))
		i += n
	}
	return nil
}

// Decommit zeroes [off, off+n). It visits only the blocks that exist, so
// decommitting a whole 512 GiB extent is cheap.
func (d *MemDevice) Decommit(ctx context.Context, off, n uint64) error {
	return d.decommit(off, n, untagged)
}

func (d *MemDevice) decommit(off, n uint64, fver uint32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writes++
	end := off + n
	for blk, b := range d.blocks {
		lo, hi := blk*4096, blk*4096+4096
		if hi <= off || lo >= end {
			continue
		}
		clear(b[max(lo, off)-lo : min(hi, end)-lo])
		if lo >= off && hi <= end {
			d.record(blk, fver, nil)
		} else {
			d.record(blk, fver, append([]byte(nil), b...))
		}
	}
	return nil
}

// Writes counts writes (of every kind) and Decommit calls.
func (d *MemDevice) Writes() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.writes
}

// SoloLocker grants every lock at once: one node alone (filesys.Locker).
type SoloLocker struct{}

// Acquire grants at once unless ctx ended.
func (SoloLocker) Acquire(ctx context.Context, table string, l uint64, mode lock.Mode) error {
	return ctx.Err()
}

// Unpin does nothing.
func (SoloLocker) Unpin(table string, l uint64, mode lock.Mode) {}

// Blocks counts the 4 KiB blocks ever written.
func (d *MemDevice) Blocks() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.blocks)
}

// Clone returns a copy of the volume as it is now: what a crash at this
// instant leaves (every write here is durable when it returns).
func (d *MemDevice) Clone() *MemDevice {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := NewMemDevice()
	for blk, b := range d.blocks {
		c.blocks[blk] = append([]byte(nil), b...)
	}
	if d.hist != nil {
		c.hist = map[uint64][]memEntry{}
		for blk, es := range d.hist {
			c.hist[blk] = append([]memEntry(nil), es...)
		}
	}
	return c
}
