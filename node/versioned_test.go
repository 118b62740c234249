package node

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"

	"github.com/plumeria-fs/plumeria/volume"
)

// TestVersionedWrites: a versioned write (volume.Versioned) leaves a block
// whose stored version is not below its own, so a late write of an older
// state changes nothing; newer versions apply; partial blocks are refused.
func TestVersionedWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	tc := newTestCluster(t, 3)
	tc.createVolume("v", 3)
	ctx := context.Background()
	v := tc.openVolume("v")
	blocks := func(version uint64, fill byte) []byte {
		p := bytes.Repeat([]byte{fill}, 2*4096)
		binary.LittleEndian.PutUint64(p[8:], version)
		binary.LittleEndian.PutUint64(p[4096+8:], version)
		return p
	}
	vctx := volume.Versioned(ctx, 8)
	const off = 1 << 30
	read := func() []byte {
		got := make([]byte, 2*4096)
		if err := v.ReadAt(ctx, got, off); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, step := range []struct {
		version uint64
		fill    byte
		want    []byte
	}{
		{5, 'a', blocks(5, 'a')},
		{3, 'b', blocks(5, 'a')}, // late: an older version
		{5, 'a', blocks(5, 'a')}, // repeated
		{6, 'c', blocks(6, 'c')},
	} {
		if err := v.WriteAt(vctx, blocks(step.version, step.fill), off); err != nil {
			t.Fatalf("versioned write of version %d: %v", step.version, err)
		}
		if got := read(); !bytes.Equal(got, step.want) {
			t.Fatalf("after writing version %d: block holds version %d %q…", step.version, binary.LittleEndian.Uint64(got[8:]), got[:1])
		}
	}
	if err := v.WriteAt(vctx, []byte("partial"), off+100); err == nil {
		t.Fatal("a versioned write of part of a block was taken")
	}
	// Unversioned writes are unaffected.
	if err := v.WriteAt(ctx, blocks(1, 'd'), off); err != nil || !bytes.Equal(read(), blocks(1, 'd')) {
		t.Fatalf("unversioned write: %v", err)
	}
}
