package store

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/plumeria-fs/plumeria/internal/testseed"
)

// TestIndexModel applies random batches (puts, tombstones and removes of
// keys that repeat within a batch and across batches, on neighbouring
// blocks and generations) and checks the index against a model after
// every batch: each key's entry, the entry count and Metas. Then it
// rebuilds the index from the segments alone (replay) and checks that the
// same index and accounting come back. The index batch reads its own
// changes over one lookup of the DB per run (indexBatch): a change it did
// not see, or saw twice, shows up as a wrong entry or count.
func TestIndexModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 1))
	dir := t.TempDir()
	opts := Options{SegmentBytes: SegmentBytesMin}
	// The empty index, to replay every segment over at the end.
	if err := openT(t, dir, opts).Close(); err != nil {
		t.Fatal(err)
	}
	checkpoint := t.TempDir()
	if err := os.CopyFS(checkpoint, os.DirFS(filepath.Join(dir, "index"))); err != nil {
		t.Fatal(err)
	}
	s := openT(t, dir, opts)
	type want struct {
		seq  uint64
		tomb bool
	}
	model := map[Key]want{}
	var seq uint64
	keyOf := func() Key {
		return Key{Vol: uint64(rng.IntN(2)), Block: uint64(rng.IntN(300)), Gen: uint64(rng.IntN(2))}
	}
	check := func(s *Store, when string) {
		t.Helper()
		var keys []Key
		for v := range uint64(2) {
			for b := range uint64(300) {
				for g := range uint64(2) {
					keys = append(keys, Key{Vol: v, Block: b, Gen: g})
				}
			}
		}
		metas, err := s.Metas(keys)
		if err != nil {
			t.Fatalf("%s: Metas: %v", when, err)
		}
		for i, k := range keys {
			w, ok := model[k]
			_, e, err := s.Get(k)
			switch {
			case !ok && !errors.Is(err, ErrNotFound):
				t.Fatalf("%s: Get %v = %+v, %v; want not found", when, k, e, err)
			case ok && (err != nil || e.Seq != w.seq || e.Tombstone != w.tomb):
				t.Fatalf("%s: Get %v = %+v, %v; want seq %d tombstone %v", when, k, e, err, w.seq, w.tomb)
			}
			if m := metas[i]; m.Present != ok || ok && (m.Seq != w.seq || m.Tombstone != w.tomb) {
				t.Fatalf("%s: Metas %v = %+v; want present %v %+v", when, k, m, ok, w)
			}
		}
		if st := s.Stats(); st.Entries != int64(len(model)) {
			t.Fatalf("%s: %d entries, the model has %d", when, st.Entries, len(model))
		}
	}
	for batch := range 60 {
		var ops []Op
		// A run of neighbouring blocks, as a chunk write is, then
		// scattered changes, some to keys the run just wrote.
		base := uint64(rng.IntN(280))
		for i := range uint64(rng.IntN(20)) {
			seq++
			ops = append(ops, putOp(Key{Vol: 1, Block: base + i}, seq))
		}
		for range rng.IntN(30) {
			seq++
			k := keyOf()
			if len(ops) > 0 && rng.IntN(4) == 0 {
				k = ops[rng.IntN(len(ops))].Key
			}
			switch rng.IntN(4) {
			case 0:
				ops = append(ops, Op{Kind: OpTombstone, Key: k, Seq: seq})
			case 1:
				ops = append(ops, Op{Kind: OpRemove, Key: k, Seq: seq})
			default:
				ops = append(ops, putOp(k, seq))
			}
		}
		mustApply(t, s, ops...)
		for _, op := range ops {
			switch op.Kind {
			case OpRemove:
				delete(model, op.Key)
			default:
				model[op.Key] = want{seq: op.Seq, tomb: op.Kind == OpTombstone}
			}
		}
		if batch%10 == 0 {
			check(s, "live")
		}
	}
	check(s, "live")
	live := s.Stats()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Replay every segment over the empty index.
	s = openT(t, crashDir(t, checkpoint, dir), opts)
	check(s, "replayed")
	if got := s.Stats(); got.LiveBytes != live.LiveBytes || got.Entries != live.Entries {
		t.Fatalf("replayed stats %+v, live %+v", got, live)
	}
	if err := s.Apply(context.Background(), []Op{putOp(Key{Vol: 1, Block: 1}, seq+1)}); err != nil {
		t.Fatal(err)
	}
}
