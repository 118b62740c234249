package store

import (
	"context"
	"fmt"
)

// Space held by the past. A volume's blocks keep, besides the entry the
// live volume reads, older entries that snapshots and file versions read
// (prune.go, retain.go). VolumeBytes sums, for one volume, the bytes of
// the records of each kind, so an operator can see what history costs and
// watch it fall when a snapshot is deleted or file versions are pruned.

// VolumeBytes is what one volume's index entries hold in this store: the
// bytes of their records, headers included, as Stats.LiveBytes counts
// them. Tombstones count in neither. A ref counts as a put does, with the
// bytes of its record here (headerBytes+RefBytes, 65), not of a block:
// the block's data lies in a stripe's shards, counted where they are
// stored.
type VolumeBytes struct {
	// LiveBytes: puts (and refs) the live reader reads (per block the entry with the
	// greatest gen <= the live reader gen, if a put), and puts above the
	// live reader gen (written under a newer map than the caller's: the
	// live reader reads them once that map is served).
	LiveBytes int64
	// HistoryBytes: every other put or ref, kept for a snapshot's reader or a
	// file version's (or garbage a prune has yet to remove).
	HistoryBytes int64
	// Entries counts the index entries visited, tombstones included.
	Entries int64
}

// VolumeBytes walks vol's index entries, as Scan does (at most
// scanEntriesMax per hold of the store's lock, no data read), and sums
// them into live and history bytes for a live reader at gen live. It is
// a moment-by-moment view: a block changed during the walk counts as it
// was when its entries were read. Errors: ctx's, ErrClosed, I/O.
func (s *Store) VolumeBytes(ctx context.Context, vol, live uint64) (VolumeBytes, error) {
	var c historyCounter
	c.live = live
	var ferr error
	err := s.scanEntries(vol, 0, ^uint64(0), func(k Key, e entry) bool {
		if c.entries%scanEntriesMax == 0 {
			if ferr = ctx.Err(); ferr != nil {
				return false
			}
		}
		c.add(k, e)
		return true
	})
	if err == nil {
		err = ferr
	}
	if err != nil {
		return VolumeBytes{}, fmt.Errorf("count bytes of vol %d: %w", vol, err)
	}
	return c.done(), nil
}

// historyCounter sums one volume's entries, fed in index order (block,
// then gen, ascending). Per block it holds back the newest put at or
// below live seen so far: a later one at or below live makes it history.
type historyCounter struct {
	live    uint64
	sum     VolumeBytes
	entries int64
	block   uint64
	cand    int64 // bytes of the held-back entry (0: none, or a tombstone)
}

func (c *historyCounter) add(k Key, e entry) {
	if c.entries > 0 && k.Block != c.block {
		c.sum.LiveBytes += c.cand
		c.cand = 0
	}
	c.entries++
	c.block = k.Block
	n := int64(e.len)
	if e.tomb {
		n = 0
	}
	if k.Gen > c.live {
		c.sum.LiveBytes += n
		return
	}
	c.sum.HistoryBytes += c.cand // hidden from the live reader by k
	c.cand = n
}

func (c *historyCounter) done() VolumeBytes {
	st := c.sum
	st.LiveBytes += c.cand
	st.Entries = c.entries
	return st
}
