package check

import (
	"fmt"
)

// DurableFile is one file of the fsync durability workload: one writer
// appends to it and fsyncs now and then, until the writer's node crashes,
// is fenced, or the run ends.
type DurableFile struct {
	Path      string
	Node      string // the writer's node
	Attempted []byte // every byte a write was issued for, in order
	Written   int    // bytes whose writes returned OK (a prefix of Attempted)
	Synced    int    // bytes an fsync that returned OK covered
	// Crashed: the writer's node was killed, paused past its lease or lost
	// its lease while the file was written, so bytes not synced may be lost.
	Crashed bool
}

// Durable checks what another node read of f after recovery (got, or
// missing when the file is not there). It returns nil when it is allowed:
//   - every fsync'd byte is there (§9.1);
//   - nothing but the bytes the writer wrote, in order (ordered data, §4);
//   - when the writer did not crash, every acknowledged byte (§9.2).
func Durable(f DurableFile, got []byte, missing bool) *Anomaly {
	mk := func(kind, format string, args ...any) *Anomaly {
		return &Anomaly{Kind: kind, Key: f.Path, Detail: fmt.Sprintf("%s (writer %s, %d bytes attempted, %d acknowledged, %d fsync'd, crashed %v)",
			fmt.Sprintf(format, args...), f.Node, len(f.Attempted), f.Written, f.Synced, f.Crashed)}
	}
	if missing {
		if f.Synced > 0 || (!f.Crashed && f.Written > 0) {
			return mk("fsync'd file lost", "the file is missing")
		}
		return nil
	}
	if len(got) > len(f.Attempted) {
		return mk("bytes never written", "the file has %d bytes, more than were ever written", len(got))
	}
	for i := range got {
		if got[i] != f.Attempted[i] {
			end := min(len(got), i+16)
			return mk("bytes never written", "byte %d is %q…, the writer wrote %q…", i, got[i:end], f.Attempted[i:min(len(f.Attempted), end)])
		}
	}
	if len(got) < f.Synced {
		return mk("fsync'd bytes lost", "only %d bytes are there", len(got))
	}
	if !f.Crashed && len(got) < f.Written {
		return mk("acknowledged write not visible", "only %d bytes are there, the writer did not crash", len(got))
	}
	return nil
}
