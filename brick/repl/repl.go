// Package repl holds the decisions of primary/backup replication as pure
// functions: sequence numbers, which copy of a block wins, and what a
// decommit turns into. It does no I/O and reads no clock; the brick server
// calls it and carries out the result.
//
// Sequence numbers: seq = epoch<<32 | counter, where epoch is the map
// epoch the primary acted under. Map epochs only grow and a PG has one
// primary per epoch, so a later primary's seqs exceed every earlier one's.
//
// Guarantee: replicas that receive the same ops (forwarded in order, or by
// backfill with a horizon) converge to the primary's blocks.
package repl

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
)

// CounterBits is the width of the per-epoch counter in a seq.
const CounterBits = 32

// NextSeq returns the seq to assign after last when acting under epoch.
// It fails if the counter of this epoch would overflow (the caller should
// wait for a new epoch).
func NextSeq(last, epoch uint64) (uint64, error) {
	base := epoch << CounterBits
	if epoch >= 1<<(64-CounterBits) {
		return 0, fmt.Errorf("repl: map epoch %d too large for a seq", epoch)
	}
	if last < base {
		return base + 1, nil
	}
	if last+1 >= (epoch+1)<<CounterBits {
		return 0, fmt.Errorf("repl: seq counter of epoch %d exhausted", epoch)
	}
	return last + 1, nil
}

// Existing describes what a replica holds for a key.
type Existing struct {
	Present bool
	Seq     uint64
}

// ShouldApply decides whether a replica replaces its copy of a key with an
// incoming op of seq. Forwarded writes pass horizon 0: newer seq wins.
// Backfill passes the primary's horizon: a held entry at or below it is
// replaced by the primary's authoritative copy (it may be a stale write
// that was never acknowledged); above it, newer seq wins.
func ShouldApply(e Existing, seq, horizon uint64) bool {
	if !e.Present {
		return true
	}
	if e.Seq == seq {
		return false // already there
	}
	if e.Seq <= horizon {
		return true
	}
	return seq > e.Seq
}

// ShouldRemoveInBackfill decides whether a backfill REMOVE (the primary does
// not hold the key) removes a held entry.
func ShouldRemoveInBackfill(e Existing, horizon uint64) bool {
	return e.Present && e.Seq <= horizon
}

// BlockRange returns the blocks [lo, hi) that [off, off+n) touches and
// whether the first and last are only partly covered.
func BlockRange(off, n, blockBytes uint64) (lo, hi uint64) {
	if n == 0 {
		return off / blockBytes, off / blockBytes
	}
	return off / blockBytes, (off+n-1)/blockBytes + 1
}

// Merge returns a whole block: base (nil = zeros) with p written at offset
// within the block.
func Merge(base []byte, blockBytes int, within int, p []byte) []byte {
	out := make([]byte, blockBytes)
	copy(out, base)
	copy(out[within:], p)
	return out
}

// VersionNewer decides a versioned block write (see WriteRequest.version_at):
// the new block applies only if its little-endian uint64 at off is above
// the stored block's (nil: never written, version 0).
func VersionNewer(stored, incoming []byte, off int) bool {
	return versionAt(incoming, off) > versionAt(stored, off)
}

// VersionFork reports a stored block and an incoming one with the same
// version but different bytes: two writers changed one version of the
// block, which versioned writers must never do.
func VersionFork(stored, incoming []byte, off int) bool {
	return stored != nil && versionAt(incoming, off) == versionAt(stored, off) && !bytes.Equal(stored, incoming)
}

func versionAt(b []byte, off int) uint64 {
	if len(b) < off+8 {
		return 0
	}
	return binary.LittleEndian.Uint64(b[off:])
}

// Outcome is what a primary makes of one change it applied locally and
// forwarded to the other members of a PG.
type Outcome struct {
	// Missed lists members that may lack the change while another member
	// has it (the primary itself included): each must be resynced.
	Missed []string
	// OK: the primary and every in-sync member applied it: acknowledge.
	OK bool
	// Retry: not OK, but a retry can succeed once Missed are resynced: an
	// in-sync backup failed (it leaves the in-sync set), or the primary
	// failed while an in-sync member took the change (that one leads).
	// Not when a syncing member failed: it stays a member, and would
	// refuse the retry again (say its disk is full).
	Retry bool
}

// Replies is what the members of a PG made of a change the primary
// forwarded (the primary's own apply included).
type Replies struct {
	Applied []string // applied it
	Refused []string // refused it before applying it (full, fenced, not a member): they lack it
	Unknown []string // no answer, or a failure that may come after the apply: they may have it
	Fenced  bool     // a member refused the writer as fenced
}

func (r Replies) failed() []string { return append(slices.Clone(r.Refused), r.Unknown...) }

// Decide returns the outcome of a replicated change: self is the primary,
// syncing the members still being backfilled (they receive every change;
// one that misses a change is marked again, so that its backfill pass
// starts over).
func Decide(self string, r Replies, syncing []string) Outcome {
	inSync := func(b string) bool { return !slices.Contains(syncing, b) }
	failed := r.failed()
	if slices.Contains(r.Applied, self) {
		out := Outcome{Missed: failed}
		out.OK = !r.Fenced && len(failed) == 0
		out.Retry = !out.OK && !r.Fenced && !slices.ContainsFunc(failed, func(b string) bool { return !inSync(b) })
		return out
	}
	others := slices.DeleteFunc(slices.Clone(r.Applied), func(b string) bool { return b == self })
	if slices.ContainsFunc(others, inSync) {
		// An in-sync member has what this primary lacks: it must lead.
		missed := append([]string{self}, slices.DeleteFunc(failed, func(b string) bool { return b == self })...)
		return Outcome{Missed: missed, Retry: !r.Fenced}
	}
	// No in-sync member is known to have it. The members that applied it
	// are backfilled again from here, and so are those whose answer is
	// unknown: it may be a lost answer of a member that applied the change
	// all the same (found by the simulator: a backup whose reply was lost
	// kept a change its primary, with a full disk, lacked). Members that
	// refused it lack it, as this primary does.
	missed := slices.Clone(others)
	for _, b := range r.Unknown {
		if b != self {
			missed = append(missed, b)
		}
	}
	return Outcome{Missed: missed}
}
