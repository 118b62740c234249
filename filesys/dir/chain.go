package dir

import (
	"fmt"
	"slices"
)

// walk calls fn on each block of bucket's chain in order, with the block's
// number, header and payload (valid only during fn), until fn returns
// false. It checks each block's place in the chain and returns ErrCorrupt
// for a block that does not belong there.
func (d *Dir) walk(b Blocks, bucket uint32, fn func(n uint32, hd blockHeader, p []byte) bool) error {
	n, prev, kind := bucket, uint32(0), uint8(kindBucket)
	for steps := uint32(0); ; steps++ {
		if steps > d.overflows {
			return fmt.Errorf("bucket %d: chain longer than %d overflow blocks: %w", bucket, d.overflows, ErrCorrupt)
		}
		p, err := b.Read(uint64(n))
		if err != nil {
			return fmt.Errorf("bucket %d: read block %d: %w", bucket, n, err)
		}
		hd, err := parseBlock(p)
		if err != nil {
			return fmt.Errorf("bucket %d: block %d: %w", bucket, n, err)
		}
		switch {
		case hd.kind != kind || hd.self != n || hd.owner != bucket || hd.prev != prev:
			return fmt.Errorf("bucket %d: block %d has kind %d self %d owner %d prev %d, want %d %d %d %d: %w",
				bucket, n, hd.kind, hd.self, hd.owner, hd.prev, kind, n, bucket, prev, ErrCorrupt)
		case kind == kindOverflow && hd.count == 0:
			return fmt.Errorf("bucket %d: overflow block %d is empty: %w", bucket, n, ErrCorrupt)
		case hd.next != 0 && hd.next-OverflowBase >= d.overflows:
			return fmt.Errorf("bucket %d: block %d: next %d is not in use: %w", bucket, n, hd.next, ErrCorrupt)
		}
		if !fn(n, hd, p) || hd.next == 0 {
			return nil
		}
		prev, n, kind = n, hd.next, kindOverflow
	}
}

// readChain returns the records of bucket's chain and its overflow blocks.
func (d *Dir) readChain(b Blocks, bucket uint32) (recs []rec, overflows []uint32, err error) {
	err = d.walk(b, bucket, func(n uint32, hd blockHeader, p []byte) bool {
		if n != bucket {
			overflows = append(overflows, n)
		}
		recs = appendRecs(recs, p, hd, 0)
		return true
	})
	return recs, overflows, err
}

// writeChain writes bucket's chain afresh: groups[0] into the bucket block,
// groups[i] into overflow block overflows[i-1].
func (d *Dir) writeChain(b Blocks, bucket uint32, groups [][]rec, overflows []uint32) error {
	if d.buf == nil {
		d.buf = make([]byte, BlockBytes)
	}
	prev := uint32(0)
	for i, g := range groups {
		hd := blockHeader{kind: kindBucket, self: bucket, owner: bucket, prev: prev}
		if i > 0 {
			hd.kind, hd.self = kindOverflow, overflows[i-1]
		}
		if i < len(groups)-1 {
			hd.next = overflows[i]
		}
		if err := b.Write(uint64(hd.self), encodeBlock(d.buf, hd, g)); err != nil {
			return fmt.Errorf("bucket %d: write block %d: %w", bucket, hd.self, err)
		}
		prev = hd.self
	}
	return nil
}

// takeOverflows returns need overflow blocks: the first ones of pool, then
// new ones. It returns ErrFull if the overflow region has too few left.
func (d *Dir) takeOverflows(pool []uint32, need int) ([]uint32, error) {
	if need <= len(pool) {
		return pool[:need:need], nil
	}
	extra := need - len(pool)
	if uint64(d.overflows)+uint64(extra) > OverflowsMax {
		return nil, fmt.Errorf("%d overflow blocks in use, %d more wanted: %w", d.overflows, extra, ErrFull)
	}
	out := slices.Clone(pool)
	for i := 0; i < extra; i++ {
		out = append(out, OverflowBase+d.overflows)
		d.overflows++
	}
	return out, nil
}

// freeOverflows frees the overflow blocks of free, which no chain links to
// any more, in decreasing order so that each one freed is either the last
// in use or has the last moved into its place.
func (d *Dir) freeOverflows(b Blocks, free []uint32) error {
	slices.Sort(free)
	for i := len(free) - 1; i >= 0; i-- {
		if err := d.freeOverflow(b, free[i]); err != nil {
			return err
		}
	}
	return nil
}

// freeOverflow frees overflow block n, which no chain links to any more: it
// moves the last overflow block into n and points its neighbours at n.
func (d *Dir) freeOverflow(b Blocks, n uint32) error {
	last := OverflowBase + d.overflows - 1
	d.overflows--
	if n == last {
		return nil
	}
	p, err := b.Read(uint64(last))
	if err != nil {
		return fmt.Errorf("read overflow block %d: %w", last, err)
	}
	hd, err := parseBlock(p)
	if err != nil {
		return fmt.Errorf("overflow block %d: %w", last, err)
	}
	if hd.kind != kindOverflow || hd.self != last || hd.count == 0 {
		return fmt.Errorf("last overflow block %d has kind %d self %d count %d: %w", last, hd.kind, hd.self, hd.count, ErrCorrupt)
	}
	buf := slices.Clone(p)
	hd.self = n
	putHeader(buf, hd)
	if err := b.Write(uint64(n), buf); err != nil {
		return fmt.Errorf("move overflow block %d to %d: %w", last, n, err)
	}
	if err := d.relink(b, hd.prev, func(h *blockHeader) bool { ok := h.next == last; h.next = n; return ok }); err != nil {
		return err
	}
	if hd.next == 0 {
		return nil
	}
	return d.relink(b, hd.next, func(h *blockHeader) bool { ok := h.prev == last; h.prev = n; return ok })
}

// relink rewrites block n's header with fix, which reports whether the
// header was as expected.
func (d *Dir) relink(b Blocks, n uint32, fix func(*blockHeader) bool) error {
	p, err := b.Read(uint64(n))
	if err != nil {
		return fmt.Errorf("read block %d: %w", n, err)
	}
	hd, err := parseBlock(p)
	if err != nil {
		return fmt.Errorf("block %d: %w", n, err)
	}
	if hd.self != n || !fix(&hd) {
		return fmt.Errorf("block %d: links do not match its neighbour's: %w", n, ErrCorrupt)
	}
	buf := slices.Clone(p)
	putHeader(buf, hd)
	if err := b.Write(uint64(n), buf); err != nil {
		return fmt.Errorf("relink block %d: %w", n, err)
	}
	return nil
}

// hashedInsert adds r to its bucket's chain: into the first block with
// room, else into a new overflow block at the end.
func (d *Dir) hashedInsert(b Blocks, r rec) error {
	bk := d.bucketOf(r.h)
	var room, last []byte // copies
	var roomHd, lastHd blockHeader
	exists := false
	err := d.walk(b, bk, func(_ uint32, hd blockHeader, p []byte) bool {
		if _, n := findRec(p, hd, r.h, r.name); n > 0 {
			exists = true
			return false
		}
		if room == nil && recordSpace-hd.used >= r.size() {
			room, roomHd = slices.Clone(p), hd
		}
		if room == nil {
			last, lastHd = append(last[:0], p...), hd
		}
		return true
	})
	switch {
	case err != nil:
		return err
	case exists:
		return fmt.Errorf("insert %q: %w", r.name, ErrExists)
	case room != nil:
		appendToBlock(room, &roomHd, r)
		if err := b.Write(uint64(roomHd.self), room); err != nil {
			return fmt.Errorf("bucket %d: write block %d: %w", bk, roomHd.self, err)
		}
	default:
		ov, err := d.takeOverflows(nil, 1)
		if err != nil {
			return fmt.Errorf("insert %q: %w", r.name, err)
		}
		lastHd.next = ov[0]
		putHeader(last, lastHd)
		if err := b.Write(uint64(lastHd.self), last); err != nil {
			return fmt.Errorf("bucket %d: write block %d: %w", bk, lastHd.self, err)
		}
		if d.buf == nil {
			d.buf = make([]byte, BlockBytes)
		}
		hd := blockHeader{kind: kindOverflow, self: ov[0], owner: bk, prev: lastHd.self}
		if err := b.Write(uint64(ov[0]), encodeBlock(d.buf, hd, []rec{r})); err != nil {
			return fmt.Errorf("bucket %d: write block %d: %w", bk, ov[0], err)
		}
	}
	d.count++
	d.bytes += uint64(r.size())
	return nil
}

// hashedRemove removes the record (h, name) from its bucket's chain and
// frees the overflow block it leaves empty.
func (d *Dir) hashedRemove(b Blocks, h uint64, name string) (rec, error) {
	bk := d.bucketOf(h)
	var buf []byte
	var hd blockHeader
	var off, size int
	err := d.walk(b, bk, func(_ uint32, bh blockHeader, p []byte) bool {
		if o, n := findRec(p, bh, h, name); n > 0 {
			buf, hd, off, size = slices.Clone(p), bh, o, n
			return false
		}
		return true
	})
	if err != nil {
		return rec{}, err
	}
	if buf == nil {
		return rec{}, fmt.Errorf("remove %q: %w", name, ErrNotFound)
	}
	r := recAt(buf, off)
	cutFromBlock(buf, &hd, off, size)
	d.count--
	d.bytes -= uint64(size)
	if hd.kind == kindBucket || hd.count > 0 {
		if err := b.Write(uint64(hd.self), buf); err != nil {
			return rec{}, fmt.Errorf("bucket %d: write block %d: %w", bk, hd.self, err)
		}
		return r, nil
	}
	return r, d.unlinkOverflow(b, hd)
}

// unlinkOverflow takes the empty overflow block hd out of its chain and
// frees it.
func (d *Dir) unlinkOverflow(b Blocks, hd blockHeader) error {
	if err := d.relink(b, hd.prev, func(h *blockHeader) bool { ok := h.next == hd.self; h.next = hd.next; return ok }); err != nil {
		return err
	}
	if hd.next != 0 {
		if err := d.relink(b, hd.next, func(h *blockHeader) bool { ok := h.prev == hd.self; h.prev = hd.prev; return ok }); err != nil {
			return err
		}
	}
	return d.freeOverflow(b, hd.self)
}

// maybeSplit splits the bucket at the split pointer if the average bucket
// is more than 3/4 full. It skips the split if the region is full.
func (d *Dir) maybeSplit(b Blocks) error {
	n := d.buckets()
	if n >= BucketsMax || d.bytes*4 <= 3*recordSpace*uint64(n) {
		return nil
	}
	s, level := d.split, d.level
	recs, pool, err := d.readChain(b, s)
	if err != nil {
		return err
	}
	var lo, hi []rec
	for _, r := range recs {
		if r.h>>level&1 == 0 {
			lo = append(lo, r)
		} else {
			hi = append(hi, r)
		}
	}
	glo, ghi := pack(lo), pack(hi)
	nlo := len(glo) - 1
	ovs, err := d.takeOverflows(pool, nlo+len(ghi)-1)
	if err != nil {
		return nil // no room to split: the chains stay longer
	}
	if err := d.writeChain(b, s, glo, ovs[:nlo]); err != nil {
		return err
	}
	if err := d.writeChain(b, s+1<<level, ghi, ovs[nlo:]); err != nil {
		return err
	}
	if len(ovs) < len(pool) {
		if err := d.freeOverflows(b, pool[len(ovs):]); err != nil {
			return err
		}
	}
	if d.split++; d.split == 1<<level {
		d.level, d.split = level+1, 0
	}
	return nil
}

// maybeShrink undoes one split if the average bucket is less than 3/8 full,
// or goes back inline if one bucket is left and its records fit in half of
// inlineMax.
func (d *Dir) maybeShrink(b Blocks) error {
	n := d.buckets()
	if n == 1 {
		if d.overflows == 0 && rootInlineHeaderBytes+d.bytes <= uint64(d.inlineMax/2) {
			return d.toInline(b)
		}
		return nil
	}
	if d.bytes*8 >= 3*recordSpace*uint64(n-1) {
		return nil
	}
	level, s := d.level, d.split
	if s == 0 {
		level--
		s = 1 << level
	}
	s--
	src := n - 1 // == s + 1<<level
	recs, pool, err := d.readChain(b, s)
	if err != nil {
		return err
	}
	recs2, pool2, err := d.readChain(b, src)
	if err != nil {
		return err
	}
	recs, pool = append(recs, recs2...), append(pool, pool2...)
	groups := pack(recs)
	ovs, err := d.takeOverflows(pool, len(groups)-1)
	if err != nil {
		return nil // no room to merge: stay as we are
	}
	if err := d.writeChain(b, s, groups, ovs); err != nil {
		return err
	}
	if len(ovs) < len(pool) {
		if err := d.freeOverflows(b, pool[len(ovs):]); err != nil {
			return err
		}
	}
	d.level, d.split = level, s
	return nil
}

// toHashed moves the inline records recs (one more than d.inline holds)
// into a one-bucket table.
func (d *Dir) toHashed(b Blocks, recs []rec) error {
	groups := pack(recs)
	d.hashed, d.level, d.split, d.overflows = true, 0, 0, 0
	ovs, err := d.takeOverflows(nil, len(groups)-1)
	if err != nil {
		return err
	}
	if err := d.writeChain(b, 0, groups, ovs); err != nil {
		return err
	}
	d.inline = nil
	d.count, d.bytes = uint64(len(recs)), 0
	for _, r := range recs {
		d.bytes += uint64(r.size())
	}
	return nil
}

// toInline moves the records of the only bucket into the root.
func (d *Dir) toInline(b Blocks) error {
	recs, _, err := d.readChain(b, 0)
	if err != nil {
		return err
	}
	sortRecs(recs)
	d.hashed, d.inline = false, recs
	return nil
}
