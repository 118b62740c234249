package store

import (
	"context"
	"fmt"
	"slices"
)

// Retention of file versions. The file system decides, per file, which of
// its closed versions to keep (a retention policy) and asks for the others
// to go: PruneRetained drops, from the blocks of a file's extent, the
// entries of file versions below a bound that neither the live volume, nor
// a snapshot, nor a kept file version reads.

// versionMax is the greatest file version a version reader may have
// (clustermap.FileVersionMax).
const versionMax = versionUnversioned - 1

// RetainedSurvivors reports which versions of one block of a volume with
// file versions must stay (keep[i] for gens[i], ascending, no repeats;
// tomb[i] a tombstone) when the file versions below below are retained
// only as listed in keep (any order, repeats allowed; each in [1, below)).
// The readers it keeps reading what they read, before, during (removing
// the others in ascending gen order; a crash may stop that anywhere) and
// after, are:
//
//   - the live reader and every snapshot's reader (snaps: their gens);
//   - for each k in keep, the version reader (live, k);
//   - every version reader (R, f) with f >= below, R live or a snapshot:
//     the entries of file versions >= below (unversioned ones included)
//     are left as they are, and so is what their readers read, also where
//     that is an older entry (a block not written at their version).
//
// Every other entry at or below live goes: a put that none of them reads,
// and a tombstone whose readers would read zeros without it anyway (to
// decide that, it assumes a reader of every file version at or above the
// tombstone's reads it, as FileVersionSurvivors does; a tombstone holds no
// data, so keeping one that is not needed costs an index entry).
// Entries above live (none exist at a primary) are not touched. Version
// readers (R, f) at f < below not in keep, and at snapshots, may read
// something else afterwards: those versions are no longer retained.
func RetainedSurvivors(gens []uint64, tomb []bool, snaps []uint64, live uint64, keep []uint32, below uint32) []bool {
	keep = slices.Clone(keep)
	slices.Sort(keep)
	return retainedSurvivors(gens, tomb, snaps, live, slices.Compact(keep), below)
}

// retainedSurvivors is RetainedSurvivors with keep sorted and without
// repeats (so that pruning a range sorts it once, not once per block).
func retainedSurvivors(gens []uint64, tomb []bool, snaps []uint64, live uint64, keep []uint32, below uint32) []bool {
	if len(tomb) != len(gens) {
		panic(fmt.Sprintf("store: RetainedSurvivors: %d gens, %d tombstone flags", len(gens), len(tomb)))
	}
	for i := 1; i < len(gens); i++ {
		if gens[i-1] >= gens[i] {
			panic(fmt.Sprintf("store: RetainedSurvivors: gens not ascending at %d: %v", i, gens))
		}
	}
	stay := make([]bool, len(gens))
	for i, g := range gens {
		stay[i] = g > live || uint32(g) >= below
	}
	readers := append(slices.Clone(snaps), live)
	slices.Sort(readers)
	n := 0 // gens[:n] are at or below the reader
	for _, r := range slices.Compact(readers) {
		if r > live {
			break
		}
		for n < len(gens) && gens[n] <= r {
			n++
		}
		if n == 0 {
			continue
		}
		stay[n-1] = true // the reader at r itself
		// From the newest down: entry i is what the version readers at r
		// with a file version in [its own, the least of the later ones')
		// read.
		upper := uint64(1 << 32)
		for i := n - 1; i >= 0; i-- {
			f := gens[i] & versionUnversioned
			if f >= upper {
				continue
			}
			if retainedReader(f, upper, r == live, keep, below) {
				stay[i] = true
			}
			upper = f
		}
	}
	dropUnneededTombstones(gens, tomb, stay, live, below)
	return stay
}

// retainedReader reports whether a retained version reader has a file
// version in [lo, upper): one at or above below, or, at the live reader
// gen, one in keep.
func retainedReader(lo, upper uint64, atLive bool, keep []uint32, below uint32) bool {
	lo, hi := max(lo, 1), min(upper-1, versionMax) // [lo, hi]
	if lo > hi {
		return false
	}
	if max(lo, uint64(below)) <= hi {
		return true
	}
	if !atLive {
		return false
	}
	i, _ := slices.BinarySearch(keep, uint32(lo))
	return i < len(keep) && uint64(keep[i]) <= hi
}

// dropUnneededTombstones clears stay[i] of each tombstone at or below
// live, of a file version below below, whose readers all read zeros
// without it, given the entries that stay before it (decided first:
// removal goes in ascending order). Its readers read at file versions at
// or above its own (or read everything): without it each reads the newest
// entry before it that stays with a file version at most its own.
func dropUnneededTombstones(gens []uint64, tomb, stay []bool, live uint64, below uint32) {
	// stack: the staying entries a reader could fall back to from the
	// next entry (the newest staying one at or below its file version),
	// oldest first, their file versions strictly ascending.
	var stack []int
	for i, g := range gens {
		if !stay[i] || g > live {
			continue
		}
		f := g & versionUnversioned
		j := len(stack)
		for j > 0 && gens[stack[j-1]]&versionUnversioned >= f {
			j--
		}
		if tomb[i] && uint32(g) < below && !slices.ContainsFunc(stack[max(j-1, 0):], func(k int) bool { return !tomb[k] }) {
			stay[i] = false
			continue
		}
		stack = append(stack[:j], i)
	}
}

// PruneRetained removes, from vol's blocks in [blockLo, blockHi) for
// which in reports true (nil: all), the versions RetainedSurvivors drops
// given snaps, live, keep and below, as Prune does (same order, batches,
// locking duty of the caller, and a stopped prune is simply run again:
// what was removed is gone and the rest is decided the same). It visits
// only the entries the index holds, so a sparse range costs its entries,
// not its length.
func (s *Store) PruneRetained(ctx context.Context, vol, blockLo, blockHi uint64, in func(block uint64) bool, snaps []uint64, live uint64,
	keep []uint32, below uint32, remove func(context.Context, []Op) error) (PruneStats, error) {
	keep = slices.Clone(keep)
	slices.Sort(keep)
	keep = slices.Compact(keep)
	survivors := func(gens []uint64, tomb []bool, snaps []uint64, live uint64) []bool {
		return retainedSurvivors(gens, tomb, snaps, live, keep, below)
	}
	return s.prune(ctx, vol, blockLo, blockHi, in, snaps, live, survivors, remove)
}
