package dir

import "fmt"

// Check verifies every invariant of d and the blocks it uses, for fsck: the
// root's parameters; each block's header, place in its chain and tail of
// zeros; each entry's name and hash, and that it is in its bucket; that no
// name appears twice; that each overflow block in use is in exactly one
// chain and none is empty; and that the entry and byte counts match the
// root. It returns the first problem found, wrapping ErrCorrupt, or the
// error of a failed Read.
func Check(d *Dir, b Blocks) error {
	if !d.hashed {
		return d.checkInline()
	}
	if err := d.checkParams(); err != nil {
		return err
	}
	seen := make([]bool, d.overflows)
	var count, bytes uint64
	for bk := uint32(0); bk < d.buckets(); bk++ {
		names := map[string]bool{}
		var bad error
		err := d.walk(b, bk, func(n uint32, hd blockHeader, p []byte) bool {
			if n >= OverflowBase {
				if seen[n-OverflowBase] {
					bad = fmt.Errorf("bucket %d: overflow block %d is in two chains: %w", bk, n, ErrCorrupt)
					return false
				}
				seen[n-OverflowBase] = true
			}
			if bad = checkTail(p, hd); bad != nil {
				return false
			}
			for off := blockHeaderBytes; off < blockHeaderBytes+hd.used; off += recSizeAt(p, off) {
				r := recAt(p, off)
				if bad = d.checkRec(bk, n, r, names); bad != nil {
					return false
				}
				count++
				bytes += uint64(r.size())
			}
			return true
		})
		if err == nil {
			err = bad
		}
		if err != nil {
			return err
		}
	}
	for i, ok := range seen {
		if !ok {
			return fmt.Errorf("overflow block %d is in use but in no chain: %w", OverflowBase+i, ErrCorrupt)
		}
	}
	if count != d.count || bytes != d.bytes {
		return fmt.Errorf("blocks hold %d entries of %d bytes, root says %d of %d: %w", count, bytes, d.count, d.bytes, ErrCorrupt)
	}
	return nil
}

// checkRec checks one record of block n in bucket bk's chain; names holds
// the names seen earlier in the chain.
func (d *Dir) checkRec(bk, n uint32, r rec, names map[string]bool) error {
	switch h := d.hash(r.name); {
	case h != r.h:
		return fmt.Errorf("block %d: %q has hash %#x, not %#x: %w", n, r.name, r.h, h, ErrCorrupt)
	case d.bucketOf(h) != bk:
		return fmt.Errorf("block %d: %q belongs in bucket %d, not %d: %w", n, r.name, d.bucketOf(h), bk, ErrCorrupt)
	case names[r.name]:
		return fmt.Errorf("block %d: %q appears twice: %w", n, r.name, ErrCorrupt)
	}
	names[r.name] = true
	return nil
}
