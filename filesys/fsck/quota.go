package fsck

import (
	"fmt"
	"slices"

	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// checkQuotas recounts every quota realm (layout/quota.go) from the
// inodes the walk reached (each counts in every realm it lists) and
// compares the sum of its ledgers. With Repair a wrong realm is
// rewritten: its usage in one ledger, every allowance taken back (no node
// is mounted); an inode that lists a realm that is no quota directory
// leaves it.
func (c *checker) checkQuotas() error {
	type usage struct{ bytes, inodes int64 }
	counts := map[uint64]*usage{}
	for ino, x := range c.inodes {
		if x.reached && x.quota && x.isDir() {
			counts[ino] = &usage{}
		}
	}
	inos := make([]uint64, 0, len(c.inodes))
	for ino, x := range c.inodes {
		if x.bad == "" && x.mode != 0 && x.realms[0] != 0 && x.reached {
			inos = append(inos, ino) // not reached: an orphan, in no realm once unlinked
		}
	}
	slices.Sort(inos)
	for _, ino := range inos {
		x := c.inodes[ino]
		var keep [layout.RealmsMax]uint64
		n := 0
		for _, r := range x.realms {
			if r == 0 {
				break
			}
			if u := counts[r]; u != nil {
				u.bytes += x.charged
				u.inodes++
				keep[n] = r
				n++
			}
		}
		if keep == x.realms {
			continue
		}
		p := c.problem("inode %d: counted in quota realms %v, of which only %v are quota directories", ino, x.realms, keep[:n])
		if c.opts.Repair {
			in, v, err := c.readInode(ino)
			if err != nil {
				return fmt.Errorf("inode %d: %w", ino, err)
			}
			in.Realms = keep
			if err := c.writeInode(ino, v+1, in); err != nil {
				return err
			}
			x.realms = keep
			c.repaired(p, "realms kept: those of quota directories")
		}
	}
	roots := make([]uint64, 0, len(counts))
	for r := range counts {
		roots = append(roots, r)
	}
	slices.Sort(roots)
	for _, r := range roots {
		if err := c.checkRealm(r, counts[r].bytes, counts[r].inodes); err != nil {
			return err
		}
	}
	return nil
}

// checkRealm compares realm r's ledgers with its recount.
func (c *checker) checkRealm(r uint64, bytes, inodes int64) error {
	buf := make([]byte, (layout.QuotaSlots+1)*layout.BlockBytes)
	if err := c.dev.ReadAt(c.ctx, buf, layout.QuotaAddr(r, 0)); err != nil {
		return fmt.Errorf("read quota realm %d: %w", r, err)
	}
	block := func(k int) []byte { return buf[k*layout.BlockBytes : (k+1)*layout.BlockBytes] }
	head, err := layout.DecodeQuotaHead(block(0), r)
	if err != nil {
		p := c.problem("quota realm %d: head: %v", r, err)
		if !c.opts.Repair {
			return nil
		}
		head = &layout.QuotaHead{} // limits lost: the usage is still counted
		defer c.repaired(p, "head rewritten without limits")
	}
	var sumB, sumI, allowB, allowI int64
	bad := ""
	for _, s := range head.SlotList() {
		l, err := layout.DecodeQuotaLedger(block(1+s), r, 1+s)
		if err != nil {
			bad = fmt.Sprintf("ledger of slot %d: %v", s, err)
			continue
		}
		sumB += l.UsedBytes
		sumI += l.UsedInodes
		allowB += l.AllowBytes
		allowI += l.AllowInodes
	}
	switch {
	case bad != "":
	case head.LimitBytes > 0 && allowB != head.GrantedBytes, head.LimitInodes > 0 && allowI != head.GrantedInodes:
		bad = fmt.Sprintf("head says %d bytes and %d inodes granted, the ledgers %d and %d", head.GrantedBytes, head.GrantedInodes, allowB, allowI)
	case sumB == bytes && sumI == inodes && err == nil:
		return nil
	}
	what := bad
	if what == "" {
		what = fmt.Sprintf("ledgers say %d bytes and %d inodes", sumB, sumI)
	}
	p := c.problem("quota of directory %d: %s, a recount %d bytes and %d inodes", r, what, bytes, inodes)
	if !c.opts.Repair {
		return nil
	}
	slots := head.SlotList()
	if len(slots) == 0 {
		head.AddSlot(0)
		slots = []int{0}
	}
	head.GrantedBytes, head.GrantedInodes = bytes, inodes // all allowance taken back
	write := func(k int, enc func(b []byte, v uint64)) error {
		b := block(k)
		v := layout.Version(b) + 1
		out := make([]byte, layout.BlockBytes)
		enc(out, v)
		if err := c.dev.WriteData(c.ctx, out, layout.QuotaAddr(r, k)); err != nil {
			return fmt.Errorf("write quota block %d of realm %d: %w", k, r, err)
		}
		return nil
	}
	if err := write(0, func(b []byte, v uint64) { layout.EncodeQuotaHead(b, r, v, head) }); err != nil {
		return err
	}
	for i, s := range slots {
		l := &layout.QuotaLedger{}
		if i == 0 {
			l = &layout.QuotaLedger{UsedBytes: bytes, UsedInodes: inodes, AllowBytes: bytes, AllowInodes: inodes}
		}
		if err := write(1+s, func(b []byte, v uint64) { layout.EncodeQuotaLedger(b, r, 1+s, v, l) }); err != nil {
			return err
		}
	}
	c.repaired(p, fmt.Sprintf("usage set to %d bytes and %d inodes", bytes, inodes))
	return nil
}
