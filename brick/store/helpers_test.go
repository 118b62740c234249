package store

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/plumeria-fs/plumeria/internal/limits"
)

// openT opens a store in dir and closes it when the test ends.
func openT(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// blockData returns the deterministic contents of (k, seq).
func blockData(k Key, seq uint64) []byte {
	h := fnv.New64a()
	binary.Write(h, binary.LittleEndian, [4]uint64{k.Vol, k.Block, k.Gen, seq})
	x := h.Sum64()
	b := make([]byte, limits.BlockBytes)
	for i := 0; i < len(b); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(b[i:], x)
	}
	return b
}

func putOp(k Key, seq uint64) Op {
	return Op{Kind: OpPut, Key: k, Seq: seq, Data: blockData(k, seq)}
}

func mustApply(t testing.TB, s *Store, ops ...Op) {
	t.Helper()
	if err := s.Apply(context.Background(), ops); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

// checkPut asserts that k holds the put of seq.
func checkPut(t testing.TB, s *Store, k Key, seq uint64) {
	t.Helper()
	data, e, err := s.Get(k)
	if err != nil {
		t.Fatalf("Get %v: %v", k, err)
	}
	if e.Key != k || e.Seq != seq || e.Tombstone || string(data) != string(blockData(k, seq)) {
		t.Fatalf("Get %v: entry %+v, data ok %v; want seq %d", k, e, string(data) == string(blockData(k, seq)), seq)
	}
}

func checkNotFound(t testing.TB, s *Store, k Key) {
	t.Helper()
	if _, e, err := s.Get(k); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get %v: entry %+v err %v, want ErrNotFound", k, e, err)
	}
}

// location returns where the index says k's record lies.
func location(t testing.TB, s *Store, k Key) entry {
	t.Helper()
	e, ok, err := s.lookup(k)
	if err != nil || !ok {
		t.Fatalf("lookup %v: ok %v err %v", k, ok, err)
	}
	return e
}

// flipByte xors one byte of segment file seg at off.
func flipByte(t testing.TB, dir string, seg uint64, off int64) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, segName(seg)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := []byte{0}
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// checkpointIndex copies the live index to dst: the index a crash could
// leave behind, older than the segments.
func checkpointIndex(t testing.TB, s *Store, dst string) {
	t.Helper()
	if err := s.db.Checkpoint(dst, pebble.WithFlushedWAL()); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
}

// copySegments copies the segment files of src (as they are right now) to dst.
func copySegments(t testing.TB, src, dst string) {
	t.Helper()
	ids, err := listSegments(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		copyFile(t, filepath.Join(src, segName(id)), filepath.Join(dst, segName(id)))
	}
}

func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// headPos returns the end of the log: head segment and its size. Only
// meaningful while no Apply is in flight.
func headPos(s *Store) (uint64, int64) {
	id := s.headID.Load()
	s.mu.RLock()
	defer s.mu.RUnlock()
	return id, s.mu.segs[id].size.Load()
}
