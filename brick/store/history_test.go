package store

import (
	"context"
	"errors"
	"testing"
)

// applyVersions stores the versions of one block spelt as versions does
// ("1 2t 5": a put at gen 1, a tombstone at 2, a put at 5).
func applyVersions(t *testing.T, s *Store, vol, block uint64, spec string) {
	t.Helper()
	gens, tomb := versions(spec)
	for i, g := range gens {
		op := putOp(Key{Vol: vol, Block: block, Gen: g}, uint64(i+1))
		if tomb[i] {
			op = Op{Kind: OpTombstone, Key: op.Key, Seq: op.Seq}
		}
		mustApply(t, s, op)
	}
}

func checkVolumeBytes(t *testing.T, what string, s *Store, vol, live uint64, wantLive, wantHistory, wantEntries int64) {
	t.Helper()
	got, err := s.VolumeBytes(context.Background(), vol, live)
	if err != nil {
		t.Fatalf("%s: VolumeBytes: %v", what, err)
	}
	want := VolumeBytes{LiveBytes: wantLive * putRecordBytes, HistoryBytes: wantHistory * putRecordBytes, Entries: wantEntries}
	if got != want {
		t.Errorf("%s: vol %d live gen %d: got %+v, want %+v (%d live puts, %d history puts)", what, vol, live, got, want, wantLive, wantHistory)
	}
}

// TestVolumeBytes: per block, the put the live reader reads (and puts
// above its gen) is live, every other put is history, tombstones count in
// neither; a prune after a snapshot is gone moves history to nothing and
// leaves live alone; other volumes do not mix in.
func TestVolumeBytes(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	const vol, live = 1, 3
	for block, spec := range []string{
		"1 2 3",  // 3 live; 1 (a snapshot at 1 reads it) and 2 history
		"1 2t",   // live reads zeros: 1 history, the tombstone nothing
		"1 2t 3", // 3 live, 1 history
		"1t",     // nothing
		"2 5",    // 2 live, and 5 above live gen: live too
		"3",      // live
	} {
		applyVersions(t, s, vol, uint64(block), spec)
	}
	applyVersions(t, s, 2, 0, "1 2 3")
	checkVolumeBytes(t, "written", s, vol, live, 5, 4, 12)
	checkVolumeBytes(t, "other volume", s, 2, live, 1, 2, 3)
	checkVolumeBytes(t, "no such volume", s, 9, live, 0, 0, 0)
	// An older live gen (a brick's map before the last snapshot): 3 and 5
	// are above it, 2 is what it reads of blocks 0 and 4.
	checkVolumeBytes(t, "live gen 2", s, vol, 2, 6, 3, 12)

	ctx := context.Background()
	// Snapshot at 2 deleted, the one at 1 kept: block 0 loses 2, block 2
	// its tombstone (nobody reads it), block 3 its lone tombstone.
	if _, err := s.Prune(ctx, vol, 0, 1<<20, []uint64{1}, live, nil); err != nil {
		t.Fatal(err)
	}
	checkVolumeBytes(t, "snapshot 2 deleted", s, vol, live, 5, 3, 9)
	if _, err := s.Prune(ctx, vol, 0, 1<<20, nil, live, nil); err != nil {
		t.Fatal(err)
	}
	checkVolumeBytes(t, "every snapshot deleted", s, vol, live, 5, 0, 5)
	checkVolumeBytes(t, "other volume after", s, 2, live, 1, 2, 3)
}

// TestVolumeBytesFileVersions: on a volume with file versions the live
// reader reads the newest entry of its generation, whatever its file
// version; closed file versions below it are history.
func TestVolumeBytesFileVersions(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	const vol = 3
	g := func(gen uint64, f uint32) uint64 { return gen<<32 | uint64(f) }
	live := g(1, versionUnversioned)
	ops := []Op{
		putOp(Key{vol, 0, g(1, 1)}, 1), putOp(Key{vol, 0, g(1, 2)}, 2), putOp(Key{vol, 0, g(1, versionUnversioned)}, 3),
		putOp(Key{vol, 1, g(1, 1)}, 4), {Kind: OpTombstone, Key: Key{vol, 1, g(1, 2)}, Seq: 5},
		putOp(Key{vol, 2, g(1, 7)}, 6), putOp(Key{vol, 2, g(2, 1)}, 7), // the second above live
	}
	mustApply(t, s, ops...)
	// Live: block 0's unversioned put, block 2's both; history: block 0's
	// versions 1 and 2, block 1's version 1 (hidden by the tombstone).
	checkVolumeBytes(t, "file versions", s, vol, live, 3, 3, 7)
}

// TestVolumeBytesManyEntries: a walk over more entries than one lock hold
// reads (a block's versions split across holds) counts each once, and a
// cancelled context stops it with ctx's error.
func TestVolumeBytesManyEntries(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	const blocks = scanEntriesMax/2 + 101
	var ops []Op
	for b := uint64(0); b < blocks; b++ {
		ops = append(ops, putOp(Key{1, b, 1}, 1), putOp(Key{1, b, 2}, 2))
		if len(ops) >= BatchOpsMax-1 {
			mustApply(t, s, ops...)
			ops = ops[:0]
		}
	}
	mustApply(t, s, ops...)
	checkVolumeBytes(t, "many", s, 1, 2, blocks, blocks, 2*blocks)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.VolumeBytes(ctx, 1, 2); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err %v, want context.Canceled", err)
	}
}
