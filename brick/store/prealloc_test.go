package store

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// TestPreallocatedHead: the head segment's file has its whole size from
// the start, sealed segments end with their last record, and a reopen
// takes the zeros after the head's records for free space, not damage.
func TestPreallocatedHead(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	opts := Options{SegmentBytes: SegmentBytesMin, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	s := openT(t, dir, opts)
	fileSize := func(id uint64) int64 {
		t.Helper()
		fi, err := os.Stat(filepath.Join(dir, segName(id)))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	mustApply(t, s, crashBatch(0)...)
	head, end := headPos(s)
	if got := fileSize(head); got != opts.SegmentBytes {
		t.Fatalf("head segment file is %d bytes after a %d-byte batch; want it preallocated to %d", got, end, opts.SegmentBytes)
	}
	var id uint64 = 1
	for ; ; id++ {
		mustApply(t, s, crashBatch(id)...)
		if h, _ := headPos(s); h != head {
			break
		}
	}
	sealed := head
	head, _ = headPos(s)
	s.mu.RLock()
	sealedSize := s.mu.segs[sealed].size.Load()
	s.mu.RUnlock()
	if got := fileSize(sealed); got != sealedSize {
		t.Fatalf("sealed segment %d file is %d bytes, its records %d", sealed, got, sealedSize)
	}
	if got := fileSize(head); got != opts.SegmentBytes {
		t.Fatalf("new head %d file is %d bytes, want %d", head, got, opts.SegmentBytes)
	}
	s.Close()

	r := openT(t, dir, opts)
	for i := range id + 1 {
		if !batchVisible(t, r, i) {
			t.Fatalf("batch %d lost across a reopen", i)
		}
	}
	if logs.Len() > 0 {
		t.Fatalf("reopen logged warnings or errors:\n%s", logs.String())
	}
	mustApply(t, r, crashBatch(id+1)...)
	if !batchVisible(t, r, id+1) {
		t.Fatal("batch after reopen not visible")
	}
}

// TestCrashZeroedTail: a crash leaves the head's preallocated file with
// its last writes not on disk, i.e. zeros from some point on (a torn
// batch, then the never written tail). Batches ending before that point
// are visible, the others not, and the store appends after what it kept.
func TestCrashZeroedTail(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 1 << 20}
	s := openT(t, dir, opts)
	var ends []int64
	index := filepath.Join(t.TempDir(), "index")
	for id := range uint64(12) {
		mustApply(t, s, crashBatch(id)...)
		seg, end := headPos(s)
		if seg != 1 {
			t.Fatalf("batch %d in segment %d; the test wants one segment", id, seg)
		}
		ends = append(ends, end)
		if id == 0 {
			checkpointIndex(t, s, index) // the index a crash left: replay from batch 1 on
		}
	}
	for _, cut := range []int64{ends[11] - 60, ends[6] + 100, ends[3], ends[0]} {
		crash := crashDir(t, index, dir)
		path := filepath.Join(crash, segName(1))
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(b)) != opts.SegmentBytes {
			t.Fatalf("head file %d bytes, want preallocated %d", len(b), opts.SegmentBytes)
		}
		clear(b[cut:])
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := Open(crash, opts)
		if err != nil {
			t.Fatalf("zeros from %d: Open: %v", cut, err)
		}
		for id, end := range ends {
			if got, want := batchVisible(t, c, uint64(id)), end <= cut; got != want {
				t.Fatalf("zeros from %d: batch %d (ends %d) visible %v, want %v", cut, id, end, got, want)
			}
		}
		mustApply(t, c, crashBatch(1000)...)
		if !batchVisible(t, c, 1000) {
			t.Fatal("batch after recovery not visible")
		}
		c.Close()
		c = openT(t, crash, opts)
		if !batchVisible(t, c, 1000) {
			t.Fatal("batch after recovery lost at the next reopen")
		}
		c.Close()
	}
}

// TestDiskRoom: when the file system under the store has less free space
// than the index keeps (indexRoomBytes) and the metadata balloon's size,
// batches fail with ErrNoSpace before anything is written, the store stays
// usable, and takes batches again once space is back. A segment created
// on a nearly full disk is not preallocated.
func TestDiskRoom(t *testing.T) {
	var free atomic.Int64
	free.Store(1 << 40)
	dir := t.TempDir()
	opts := Options{SegmentBytes: 1 << 20, freeBytes: func() (int64, error) { return free.Load(), nil }}
	s := openT(t, dir, opts)
	mustApply(t, s, crashBatch(0)...)
	kept := indexRoomBytes + s.Stats().BalloonTarget
	free.Store(kept - 1)
	err := s.Apply(context.Background(), crashBatch(1))
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Apply with %d bytes free: %v, want ErrNoSpace", free.Load(), err)
	}
	if batchVisible(t, s, 1) {
		t.Fatal("a refused batch is visible")
	}
	free.Store(kept + 1)
	mustApply(t, s, crashBatch(2)...)
	if !batchVisible(t, s, 0) || !batchVisible(t, s, 2) {
		t.Fatal("batches before and after the refusal not visible")
	}
	// Nearly full: the next segment grows by appends.
	free.Store(opts.SegmentBytes + kept + 1<<20)
	head, _ := headPos(s)
	for id := uint64(3); ; id++ {
		mustApply(t, s, crashBatch(id)...)
		if h, _ := headPos(s); h != head {
			head = h
			break
		}
	}
	fi, err := os.Stat(filepath.Join(dir, segName(head)))
	if err != nil {
		t.Fatal(err)
	}
	if _, end := headPos(s); fi.Size() != end {
		t.Fatalf("segment %d made on a nearly full disk is %d bytes for %d of records: preallocated", head, fi.Size(), end)
	}
}

// TestBalloon: the store keeps a preallocated balloon file. With the disk
// full, plain batches fail, and metadata batches (ApplyReserved) take the
// space they lack from the balloon until it is empty; with room again the
// balloon grows back. Reopened, the store finds its balloon.
func TestBalloon(t *testing.T) {
	var free atomic.Int64
	free.Store(1 << 40)
	dir := t.TempDir()
	opts := Options{SegmentBytes: 1 << 20, CapacityBytes: 4 << 30, freeBytes: func() (int64, error) { return free.Load(), nil }}
	s := openT(t, dir, opts)
	balloon := func() int64 {
		t.Helper()
		fi, err := os.Stat(filepath.Join(dir, balloonName))
		if err != nil {
			t.Fatal(err)
		}
		if st := s.Stats(); st.BalloonBytes != fi.Size() {
			t.Fatalf("Stats says the balloon holds %d bytes, its file %d", st.BalloonBytes, fi.Size())
		}
		return fi.Size()
	}
	target := s.Stats().BalloonTarget
	if target != balloonBytesMax || balloon() != target {
		t.Fatalf("balloon of %d bytes, target %d; want %d", balloon(), target, balloonBytesMax)
	}
	free.Store(0)
	if err := s.Apply(context.Background(), crashBatch(1)); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Apply on a full disk: %v, want ErrNoSpace", err)
	}
	if balloon() != target {
		t.Fatal("a plain batch took space from the balloon")
	}
	reserved := 0
	for id := uint64(2); ; id++ {
		err := s.ApplyReserved(context.Background(), crashBatch(id))
		if errors.Is(err, ErrNoSpace) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !batchVisible(t, s, id) {
			t.Fatalf("metadata batch %d not visible", id)
		}
		reserved++
		if reserved > 10 {
			t.Fatalf("%d metadata batches on a full disk: the balloon never ran out (%d bytes)", reserved, balloon())
		}
	}
	// Each group sees 0 bytes free and takes the index's room from the
	// balloon: two of them empty it.
	if reserved != int(target/indexRoomBytes)-1 && reserved != int(target/indexRoomBytes) {
		t.Fatalf("%d metadata batches went through on a full disk, want about %d", reserved, target/indexRoomBytes)
	}
	if b := balloon(); b >= indexRoomBytes {
		t.Fatalf("balloon still holds %d bytes after metadata batches were refused", b)
	}
	free.Store(1 << 40)
	mustApply(t, s, crashBatch(100)...)
	if b := balloon(); b != target {
		t.Fatalf("balloon of %d bytes with room again, want %d", b, target)
	}
	s.Close()
	s = openT(t, dir, opts)
	if b := balloon(); b != target {
		t.Fatalf("reopened: balloon of %d bytes, want %d", b, target)
	}
}
