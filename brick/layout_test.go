package brick_test

import (
	"context"
	"maps"
	"testing"
	"time"
)

// TestLayoutRaces: the layout scan holds no block lock, so a ref it found
// may be a put of the same data by the time it reads the ref (the chunk
// was moved home) or gone (collected). Each is counted as what the key
// holds then; neither is an error (the CI of session 22 failed with
// "bad ref" on a policy show during a move home).
func TestLayoutRaces(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	tc := newTestCluster(t, 6, time.Hour)
	v := createVolume(t, tc.cl, "ec", false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	writeCoded(t, ctx, tc, v, "ec", data)
	vol := clusterMap(t, tc.cl).Volume("ec")
	primary := tc.brick(vol.PGs[vol.PGOf(0)].Primary())
	_, scanned, err := primary.Store().Latest(vol.ID, 0, ^uint64(0))
	if err != nil || !scanned.Ref {
		t.Fatalf("block 0 at the primary: ref %v, err %v", scanned.Ref, err)
	}
	ecProfile := vol.SGs[0].Profile
	if got, err := primary.CountEntry(vol.ID, scanned); err != nil || !maps.Equal(got, map[uint16]int64{ecProfile: 1}) {
		t.Fatalf("a coded block: %v, %v; want one block of profile %d", got, err, ecProfile)
	}

	// Moved home after the scan: the key now holds a put.
	if _, err := v.Relayout(ctx, 0, uint64(len(data)), 0, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := primary.CountEntry(vol.ID, scanned); err != nil || !maps.Equal(got, map[uint16]int64{0: 1}) {
		t.Fatalf("a ref scanned, then moved home: %v, %v; want one home block", got, err)
	}
	if got, err := v.Layout(ctx, 0, uint64(len(data))); err != nil || !maps.Equal(got, map[uint16]int64{0: int64(len(data) / 4096)}) {
		t.Fatalf("layout after the move home: %v, %v", got, err)
	}

	// Collected after the scan: nothing to count.
	gone := scanned
	gone.Gen = scanned.Gen + 1<<40 // a version that is not there
	if got, err := primary.CountEntry(vol.ID, gone); err != nil || len(got) != 0 {
		t.Fatalf("a ref scanned, then collected: %v, %v; want nothing", got, err)
	}
}
