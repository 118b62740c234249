package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Pruning. A block's versions are entries (vol, block, gen), each a put, a
// ref (a put whose data lies in a stripe: it prunes as a put) or a
// tombstone. A reader at generation r (a snapshot's gen, or the live
// gen) sees the entry with the greatest gen <= r; a tombstone, or no entry
// at all, reads as zeros. Once a snapshot is deleted, versions only it
// saw are garbage; Survivors decides which versions of one block stay and
// Prune removes the others from the index, so the cleaner can reclaim
// their records.

// Survivors reports which versions of one block must stay (keep[i] for
// gens[i]), given its versions' gens (ascending, no repeats), which are
// tombstones (tomb[i]), the gens snapshots see (snaps, any order, repeats
// allowed) and the live gen. Removing every other version changes what no
// reader in snaps or at live reads, and removing them in ascending gen
// order never does either at any point in between (a crash may stop a
// prune anywhere).
//
//   - A version no reader sees is dropped: a newer version hides it from
//     every reader at or above that one, and none reads between them.
//     The newest version at or below live is always seen (by live).
//   - A tombstone reads as zeros, as no version does: one stays only right
//     after a put that stays (it hides that put from its readers).
//   - Versions above live (none exist at a primary) are not touched.
func Survivors(gens []uint64, tomb []bool, snaps []uint64, live uint64) []bool {
	if len(tomb) != len(gens) {
		panic(fmt.Sprintf("store: Survivors: %d gens, %d tombstone flags", len(gens), len(tomb)))
	}
	readers := append(slices.Clone(snaps), live)
	slices.Sort(readers)
	keep := make([]bool, len(gens))
	j := 0 // readers[:j] are below gens[i]
	for i, g := range gens {
		if i > 0 && gens[i-1] >= g {
			panic(fmt.Sprintf("store: Survivors: gens not ascending at %d: %v", i, gens))
		}
		if g > live {
			keep[i] = true
			continue
		}
		for j < len(readers) && readers[j] < g {
			j++
		}
		// The readers of version i are those in [g, next gen).
		keep[i] = i == len(gens)-1 || gens[i+1] > live || (j < len(readers) && readers[j] < gens[i+1])
	}
	afterPut := false // the last version kept at or below live is a put
	for i, g := range gens {
		if !keep[i] || g > live {
			continue
		}
		if tomb[i] {
			keep[i] = afterPut
		}
		afterPut = !tomb[i]
	}
	return keep
}

// PruneStats counts what a Prune removed.
type PruneStats struct {
	Blocks   int64 // blocks that lost at least one version
	Versions int64 // index entries removed
	Bytes    int64 // bytes of the records they pointed at, now garbage for the cleaner
}

func (p *PruneStats) add(q PruneStats) {
	p.Blocks += q.Blocks
	p.Versions += q.Versions
	p.Bytes += q.Bytes
}

// Prune removes the versions of vol's blocks in [blockLo, blockHi) that
// Survivors drops, given snaps and live. It walks the index (at most
// scanEntriesMax entries per lock hold, one block's versions at a time)
// and hands the removals, in ascending (block, gen) order, to remove in
// batches of at most BatchOpsMax OpRemove ops (Seq: the entry's); remove
// nil applies them here (ApplyReserved: freeing space may use the
// metadata reserve). The caller makes sure nothing else changes those
// blocks meanwhile (a brick holds their lock). It holds one block's
// versions at a time: at most one per generation the volume ever had.
// Removing a version that is
// already gone does nothing, so a prune stopped by an error or a crash is
// simply run again. Errors: remove's, ctx's, ErrClosed, I/O.
func (s *Store) Prune(ctx context.Context, vol, blockLo, blockHi uint64, snaps []uint64, live uint64, remove func(context.Context, []Op) error) (PruneStats, error) {
	return s.prune(ctx, vol, blockLo, blockHi, nil, snaps, live, Survivors, remove)
}

// prune is Prune with the rule that decides which versions of a block
// stay (Survivors, FileVersionSurvivors, retainedSurvivors), over the
// blocks in reports true (nil: all of them).
func (s *Store) prune(ctx context.Context, vol, blockLo, blockHi uint64, in func(block uint64) bool, snaps []uint64, live uint64,
	survivors func(gens []uint64, tomb []bool, snaps []uint64, live uint64) []bool, remove func(context.Context, []Op) error) (PruneStats, error) {
	if remove == nil {
		remove = s.ApplyReserved
	}
	var st, pending PruneStats
	var ops []Op
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		if err := remove(ctx, ops); err != nil {
			return err
		}
		st.add(pending)
		ops, pending = ops[:0], PruneStats{}
		return nil
	}
	var block []found // the versions of one block, ascending
	decide := func() error {
		if len(block) == 0 {
			return nil
		}
		gens, tomb := make([]uint64, len(block)), make([]bool, len(block))
		for i, b := range block {
			gens[i], tomb[i] = b.k.Gen, b.e.tomb
		}
		dropped := false
		for i, keep := range survivors(gens, tomb, snaps, live) {
			if keep {
				continue
			}
			if len(ops) == BatchOpsMax {
				if err := flush(); err != nil {
					return err
				}
			}
			ops = append(ops, Op{Kind: OpRemove, Key: block[i].k, Seq: block[i].e.seq})
			pending.Versions++
			pending.Bytes += int64(block[i].e.len)
			dropped = true
		}
		if dropped {
			pending.Blocks++
		}
		block = block[:0]
		return nil
	}
	var ferr error
	err := s.scanEntries(vol, blockLo, blockHi, func(k Key, e entry) bool {
		if ferr = ctx.Err(); ferr != nil {
			return false
		}
		if len(block) > 0 && block[0].k.Block != k.Block {
			if ferr = decide(); ferr != nil {
				return false
			}
		}
		if in != nil && !in(k.Block) {
			return true
		}
		block = append(block, found{k, e})
		return true
	})
	if err = errors.Join(err, ferr); err == nil {
		err = decide()
	}
	if err == nil {
		err = flush()
	}
	if err != nil {
		return st, fmt.Errorf("prune vol %d blocks [%d, %d): %w", vol, blockLo, blockHi, err)
	}
	return st, nil
}
