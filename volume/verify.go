package volume

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// ReplicaDiff is one block on which the in-sync members of a PG disagree:
// the seq each member holds (0: absent), and which of them hold a ref
// there (erasure coding: the block's data lies in a stripe) rather than
// a put or a tombstone.
type ReplicaDiff struct {
	PG    uint32
	Block uint64
	Gen   uint64
	Seqs  map[string]uint64
	Refs  map[string]bool
}

func (d ReplicaDiff) String() string {
	names := make([]string, 0, len(d.Seqs))
	for b := range d.Seqs {
		names = append(names, b)
	}
	sort.Strings(names)
	var parts []string
	for _, b := range names {
		s := d.Seqs[b]
		switch {
		case s == 0:
			parts = append(parts, b+"=absent")
		case d.Refs[b]:
			parts = append(parts, fmt.Sprintf("%s=seq %d.%d ref", b, s>>32, s&0xffffffff))
		default:
			parts = append(parts, fmt.Sprintf("%s=seq %d.%d", b, s>>32, s&0xffffffff))
		}
	}
	return fmt.Sprintf("pg %d block %d (byte %#x) gen %d: %s", d.PG, d.Block, d.Block*4096, d.Gen, strings.Join(parts, " "))
}

// VerifyReplicas compares, PG by PG, the blocks (their seqs, and whether
// each is a ref) that the
// in-sync members of each PG hold; members still syncing are skipped. With
// no writes under way they must agree exactly: a difference means a
// replica missed or kept a write the others did not. progress (may be nil)
// is called after each PG.
func (v *Volume) VerifyReplicas(ctx context.Context, progress func(done, total int)) ([]ReplicaDiff, error) {
	if err := v.refresh(ctx, 0); err != nil {
		return nil, err
	}
	m := v.Map()
	vol := m.Volume(v.name)
	if vol == nil {
		return nil, fmt.Errorf("verify volume %s: %w", v.name, ErrNoVolume)
	}
	var diffs []ReplicaDiff
	for pg := range vol.PGs {
		members := vol.PGs[pg].InSync()
		if len(members) > 1 {
			d, err := v.comparePG(ctx, m, vol, uint32(pg), members)
			if err != nil {
				return diffs, err
			}
			diffs = append(diffs, d...)
		}
		if progress != nil {
			progress(pg+1, len(vol.PGs))
		}
	}
	return diffs, nil
}

type blockKey struct{ block, gen uint64 }

// held is what a member's inventory says of a key: its seq and whether
// the entry is a ref. Members agree on a key when both are equal (a ref
// and the put it replaced never share a seq; ref checks that too).
type held struct {
	seq uint64
	ref bool
}

func (v *Volume) comparePG(ctx context.Context, m *clustermap.Map, vol *clustermap.Volume, pg uint32, members []string) ([]ReplicaDiff, error) {
	inv := map[string]map[blockKey]held{}
	for _, b := range members {
		cl, err := v.brick(m, b)
		if err != nil {
			return nil, err
		}
		got, err := inventoryOf(ctx, cl, &pb.InventoryRequest{MapEpoch: m.Epoch, Vol: vol.ID, Pg: pg})
		if err != nil {
			return nil, fmt.Errorf("inventory of volume %s pg %d on brick %s: %w", vol.Name, pg, b, err)
		}
		inv[b] = got
	}
	return diffInventories(pg, members, inv), nil
}

// diffInventories lists the blocks whose seq, or kind (ref or not), is
// not the same on every member (absent counts as seq 0), by block and
// generation.
func diffInventories(pg uint32, members []string, inv map[string]map[blockKey]held) []ReplicaDiff {
	keys := map[blockKey]bool{}
	for _, got := range inv {
		for k := range got {
			keys[k] = true
		}
	}
	var diffs []ReplicaDiff
	for k := range keys {
		seqs, refs := map[string]uint64{}, map[string]bool{}
		same := true
		for _, b := range members {
			h := inv[b][k]
			seqs[b], refs[b] = h.seq, h.ref
			if h != inv[members[0]][k] {
				same = false
			}
		}
		if !same {
			diffs = append(diffs, ReplicaDiff{PG: pg, Block: k.block, Gen: k.gen, Seqs: seqs, Refs: refs})
		}
	}
	slices.SortFunc(diffs, func(a, b ReplicaDiff) int {
		if a.Block != b.Block {
			return cmp.Compare(a.Block, b.Block)
		}
		return cmp.Compare(a.Gen, b.Gen)
	})
	return diffs
}

func inventoryOf(ctx context.Context, cl pb.BrickClient, r *pb.InventoryRequest) (map[blockKey]held, error) {
	out := map[blockKey]held{}
	err := pb.ReadInventory(ctx, cl, r, func(e *pb.InventoryEntry) { out[blockKey{e.Block, e.Gen}] = held{e.Seq, e.Ref} })
	return out, err
}
