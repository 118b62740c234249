package store

import (
	"context"
	"fmt"
	"slices"
)

// File versions. On a volume created with file versions
// (clustermap/fileversions.go) a gen holds two halves: the volume's
// generation in its high 32 bits and the file version of the write in its
// low 32 bits, 0xFFFFFFFF for a write without one. Readers at a gen (the
// live volume, a snapshot) see every entry at or below it, as on any
// volume; a version reader also skips the entries of later file versions.
// The store knows no more of the encoding than that.

// versionUnversioned is the low half of the gen of a write without a file
// version (clustermap.Unversioned).
const versionUnversioned = 1<<32 - 1

// A Reader picks the entry of a block it reads: the one with the greatest
// Gen <= Gen whose low 32 bits are <= Version, or, when Version is 0, the
// one with the greatest Gen <= Gen (a reader of the live volume or of a
// snapshot). A tombstone, or no entry, reads as zeros.
type Reader struct {
	Gen     uint64
	Version uint32
}

func (r Reader) accepts(gen uint64) bool {
	return gen <= r.Gen && (r.Version == 0 || uint32(gen) <= r.Version)
}

func (r Reader) String() string {
	if r.Version == 0 {
		return fmt.Sprintf("gen <= %d", r.Gen)
	}
	return fmt.Sprintf("gen <= %d, file version <= %d", r.Gen, r.Version)
}

// FileVersionSurvivors is Survivors for a volume with file versions: it
// reports which versions of one block must stay (keep[i] for gens[i],
// ascending, no repeats; tomb[i] a tombstone), given the gens snapshots
// read at (snaps, any order, repeats allowed) and the live reader's gen.
// Besides the readers at snaps and live, every version reader combined
// with them reads: for each reader gen R in snaps and live and every file
// version f, the newest entry at or below R whose low half is <= f. A
// version reader at an f no entry has reads as the one at the greatest f
// below it that some entry has, so the readers for the file versions
// present (and Unversioned) stand for all. Removing every version not
// kept, in ascending gen order, changes what no such reader reads at any
// point in between (a crash may stop a prune anywhere).
//
//   - An entry e at or below R is read by some version reader at R iff
//     every later entry at or below R has a greater file version than e
//     (then the reader for e's own version reads it). So the last entry at
//     or below each R stays, as Survivors keeps it; so does the newest
//     entry of each file version (other than Unversioned) at or below
//     live: it is a closed file version's content.
//   - A tombstone reads as zeros, as no entry does. One stays unless every
//     entry its readers would read without it is a tombstone: of the kept
//     entries before it that have a smaller file version than every kept
//     entry between them and it, those with a file version at or above
//     its own, and the newest one below. Where all file versions are
//     equal (only unversioned writes) that is the last entry kept before
//     it, and this is Survivors' rule.
//   - Entries above live (none exist at a primary) are not touched.
//
// Retention of file versions (dropping the versions the file system no
// longer wants) is RetainedSurvivors (retain.go): the same readers, but
// below a bound only the version readers of the versions kept.
func FileVersionSurvivors(gens []uint64, tomb []bool, snaps []uint64, live uint64) []bool {
	if len(tomb) != len(gens) {
		panic(fmt.Sprintf("store: FileVersionSurvivors: %d gens, %d tombstone flags", len(gens), len(tomb)))
	}
	for i := 1; i < len(gens); i++ {
		if gens[i-1] >= gens[i] {
			panic(fmt.Sprintf("store: FileVersionSurvivors: gens not ascending at %d: %v", i, gens))
		}
	}
	readers := append(slices.Clone(snaps), live)
	slices.Sort(readers)
	readers = slices.Compact(readers)
	keep := make([]bool, len(gens))
	n := 0 // gens[:n] are at or below the reader
	for _, r := range readers {
		if r > live {
			break
		}
		for n < len(gens) && gens[n] <= r {
			n++
		}
		// From the newest down: an entry is read iff its file version is
		// below every later one's.
		least := uint64(1 << 32)
		for i := n - 1; i >= 0; i-- {
			if f := gens[i] & versionUnversioned; f < least {
				keep[i], least = true, f
			}
		}
	}
	newest := map[uint64]int{} // file version -> its newest entry at or below live
	for i, g := range gens {
		if g > live {
			keep[i] = true
			continue
		}
		if f := g & versionUnversioned; f != versionUnversioned {
			newest[f] = i
		}
	}
	for _, i := range newest {
		keep[i] = true
	}
	// stack: the kept entries a reader could fall back to from the next
	// entry (the newest kept one at or below its file version), oldest
	// first, their file versions strictly ascending.
	var stack []int
	for i, g := range gens {
		if !keep[i] || g > live {
			continue
		}
		f := g & versionUnversioned
		// The readers of i read at file versions >= f: without i they
		// would read the entries of stack with a version >= f, or the
		// newest one below f.
		j := len(stack)
		for j > 0 && gens[stack[j-1]]&versionUnversioned >= f {
			j--
		}
		if tomb[i] && !slices.ContainsFunc(stack[max(j-1, 0):], func(k int) bool { return !tomb[k] }) {
			keep[i] = false // every reader of it reads zeros without it
			continue
		}
		stack = append(stack[:j], i)
	}
	return keep
}

// PruneFileVersions is Prune for a volume with file versions: the
// versions of a block that stay are FileVersionSurvivors', so deleting a
// snapshot never drops a file version.
func (s *Store) PruneFileVersions(ctx context.Context, vol, blockLo, blockHi uint64, snaps []uint64, live uint64, remove func(context.Context, []Op) error) (PruneStats, error) {
	return s.prune(ctx, vol, blockLo, blockHi, nil, snaps, live, FileVersionSurvivors, remove)
}
