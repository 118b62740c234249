package redo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
)

// Record is one Append as Recover finds it.
type Record struct {
	LSN     LSN
	Updates []Update
}

// Block is the updates of one metadata block, in log order.
type Block struct {
	Addr    uint64
	Updates []Update
}

// readChunkBytes bounds one ReadAt of Open and Recover.
const readChunkBytes = 1 << 20

// Recover returns the records of the log region not yet released, in LSN
// order, each whole: a prefix of what was appended that holds every record
// whose Wait returned nil. A batch torn by a crash is dropped entirely (it
// was never acknowledged). It does not modify the region. Errors: ErrOptions,
// ErrCorrupt (a break in the log that no crash leaves), or the device's.
func Recover(ctx context.Context, dev Device, opts Options) ([]Record, error) {
	if err := opts.check(); err != nil {
		return nil, fmt.Errorf("redo: recover: %w", err)
	}
	region, err := readRegion(ctx, dev, opts)
	if err != nil {
		return nil, err
	}
	s := scanRegion(region, true)
	return s.records, s.err
}

func readRegion(ctx context.Context, dev Device, opts Options) ([]byte, error) {
	region := make([]byte, opts.Size)
	for off := uint64(0); off < opts.Size; off += readChunkBytes {
		p := region[off:min(off+readChunkBytes, opts.Size)]
		if err := dev.ReadAt(ctx, p, opts.Base+off); err != nil {
			return nil, fmt.Errorf("redo: read log region [%d,+%d) at %d: %w", opts.Base, opts.Size, opts.Base+off, err)
		}
	}
	return region, nil
}

// scanResult is what a region holds, as far as Open and Recover care.
type scanResult struct {
	end     uint64 // Open writes here: past every batch header in the region
	nextLSN LSN    // above every LSN a batch header in the region names
	tailPos uint64 // tail recorded by the newest valid batch
	records []Record
	err     error // of the walk from tail to end, if asked for
}

// scanRegion finds the end of the log: the valid batch with the highest
// position. It checks the header of every sector and decodes whole batches,
// newest header first, until one is valid; a budget of twice the region's
// bytes bounds that work on a corrupt region. With walk, it then decodes
// the chain of batches from the newest batch's tail to it.
func scanRegion(region []byte, walk bool) scanResult {
	size := uint64(len(region))
	res := scanResult{nextLSN: 1}
	var cands []header
	for off := uint64(0); off < size; off += sectorBytes {
		h, err := decodeHeader(region[off:off+sectorBytes], size, off)
		if err != nil {
			continue
		}
		cands = append(cands, h)
		res.nextLSN = max(res.nextLSN, h.next())
		// Beyond a torn batch too: no header ever names a position ahead
		// of the log, so no old batch can pass for its end.
		res.end = max(res.end, h.end())
	}
	slices.SortFunc(cands, func(a, b header) int { return cmp.Compare(b.pos, a.pos) })
	budget := 2 * size
	for _, h := range cands {
		if h.bytes() > budget {
			break
		}
		budget -= h.bytes()
		if _, err := decodeBatch(region, h); err != nil {
			continue
		}
		res.tailPos = h.tailPos
		if walk {
			res.records, res.err = walkChain(region, h)
		}
		return res
	}
	// No valid batch: an empty log, or only a first batch torn by a crash.
	res.tailPos = res.end
	return res
}

// walkChain decodes the batches from newest.tailPos to newest and returns
// their records from newest.tailLSN on. Every batch on the way must be
// valid and follow the one before it: the writer never overwrites them.
func walkChain(region []byte, newest header) ([]Record, error) {
	size := uint64(len(region))
	var recs []Record
	var next LSN
	for p, i := newest.tailPos, 0; ; i++ {
		batch, h, err := batchAt(region, p)
		switch {
		case err != nil:
		case i > 0 && h.firstLSN != next:
			err = fmt.Errorf("first LSN %d, want %d", h.firstLSN, next)
		case i == 0 && newest.tailLSN < h.firstLSN:
			err = fmt.Errorf("tail LSN %d before the tail batch's first LSN %d", newest.tailLSN, h.firstLSN)
		case h.pos != newest.pos && h.end() > newest.pos:
			err = fmt.Errorf("batch ends at %d, past the newest batch at %d", h.end(), newest.pos)
		}
		if err != nil {
			return nil, fmt.Errorf("redo: recover: log from tail position %d to end %d broken at position %d (offset %d): %v: %w",
				newest.tailPos, newest.pos, p, p%size, err, ErrCorrupt)
		}
		for _, r := range batch {
			if r.LSN >= newest.tailLSN {
				recs = append(recs, r)
			}
		}
		if h.pos == newest.pos {
			return recs, nil
		}
		p, next = h.end(), h.next()
	}
}

// batchAt decodes the batch that must start at log position p.
func batchAt(region []byte, p uint64) ([]Record, header, error) {
	size := uint64(len(region))
	off := p % size
	h, err := decodeHeader(region[off:off+sectorBytes], size, off)
	if errors.Is(err, errNoHeader) {
		return nil, h, errors.New("no batch header")
	}
	if err != nil {
		return nil, h, err
	}
	if h.pos != p {
		return nil, h, fmt.Errorf("batch has position %d", h.pos)
	}
	recs, err := decodeBatch(region, h)
	return recs, h, err
}

// Plan coalesces recovered records per block, sorted by Addr, for replay
// (Calaveras §6): the caller reads each block once, applies in order every
// update whose Version is above the version the block had on disk, and
// writes the block once. An update that covers a whole block drops the
// earlier updates of that block it makes moot (those with a version not
// above its own).
func Plan(recs []Record) []Block {
	index := make(map[uint64]int)
	var blocks []Block
	for _, r := range recs {
		for _, u := range r.Updates {
			i, ok := index[u.Addr]
			if !ok {
				i = len(blocks)
				index[u.Addr] = i
				blocks = append(blocks, Block{Addr: u.Addr})
			}
			b := &blocks[i]
			if u.Off == 0 && len(u.Data) == metaBlockBytes {
				b.Updates = slices.DeleteFunc(b.Updates, func(e Update) bool { return e.Version <= u.Version })
			}
			b.Updates = append(b.Updates, u)
		}
	}
	slices.SortFunc(blocks, func(a, b Block) int { return cmp.Compare(a.Addr, b.Addr) })
	return blocks
}
