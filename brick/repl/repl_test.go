package repl

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"
)

func TestNextSeqMonotonicAcrossEpochs(t *testing.T) {
	s, err := NextSeq(0, 5)
	if err != nil || s != 5<<32+1 {
		t.Fatalf("first seq of epoch 5 = %d, %v", s, err)
	}
	s2, _ := NextSeq(s, 5)
	if s2 != s+1 {
		t.Fatalf("next = %d want %d", s2, s+1)
	}
	s3, _ := NextSeq(s2, 7)
	if s3 <= s2 || s3>>32 != 7 {
		t.Fatalf("new epoch seq %d not above %d", s3, s2)
	}
	// A primary that already went past the epoch base keeps counting.
	s4, _ := NextSeq(s3+10, 7)
	if s4 != s3+11 {
		t.Fatalf("got %d", s4)
	}
	if _, err := NextSeq(8<<32-1, 7); err == nil {
		t.Fatal("counter overflow not reported")
	}
}

func TestShouldApply(t *testing.T) {
	cases := []struct {
		name         string
		e            Existing
		seq, horizon uint64
		want         bool
	}{
		{"absent", Existing{}, 3, 0, true},
		{"same seq", Existing{true, 9}, 9, 0, false},
		{"newer forwarded", Existing{true, 9}, 10, 0, true},
		{"older forwarded", Existing{true, 9}, 8, 0, false},
		{"backfill replaces stale above own seq", Existing{true, 9}, 5, 20, true},
		{"backfill keeps write forwarded after inventory", Existing{true, 30}, 5, 20, false},
		{"backfill newer than forwarded", Existing{true, 30}, 31, 20, true},
	}
	for _, c := range cases {
		if got := ShouldApply(c.e, c.seq, c.horizon); got != c.want {
			t.Errorf("%s: got %v want %v", c.name, got, c.want)
		}
	}
	if ShouldRemoveInBackfill(Existing{true, 30}, 20) || !ShouldRemoveInBackfill(Existing{true, 3}, 20) || ShouldRemoveInBackfill(Existing{}, 20) {
		t.Error("ShouldRemoveInBackfill")
	}
}

func TestBlockRangeAndMerge(t *testing.T) {
	lo, hi := BlockRange(4095, 2, 4096)
	if lo != 0 || hi != 2 {
		t.Fatalf("got [%d,%d)", lo, hi)
	}
	lo, hi = BlockRange(8192, 4096, 4096)
	if lo != 2 || hi != 3 {
		t.Fatalf("got [%d,%d)", lo, hi)
	}
	b := Merge([]byte{1, 2, 3, 4}, 4, 1, []byte{9, 9})
	if !bytes.Equal(b, []byte{1, 9, 9, 4}) {
		t.Fatalf("merge %v", b)
	}
	if z := Merge(nil, 4, 3, []byte{7}); !bytes.Equal(z, []byte{0, 0, 0, 7}) {
		t.Fatalf("merge on zeros %v", z)
	}
}

func TestVersionNewer(t *testing.T) {
	blk := func(v uint64, fill byte) []byte {
		b := bytes.Repeat([]byte{fill}, 64)
		binary.LittleEndian.PutUint64(b[8:], v)
		return b
	}
	cases := []struct {
		stored, in  []byte
		newer, fork bool
	}{
		{nil, blk(1, 1), true, false},
		{nil, blk(0, 1), false, false},
		{blk(5, 1), blk(6, 2), true, false},
		{blk(5, 1), blk(4, 2), false, false},
		{blk(5, 1), blk(5, 1), false, false},
		{blk(5, 1), blk(5, 2), false, true},
	}
	for i, c := range cases {
		if got := VersionNewer(c.stored, c.in, 8); got != c.newer {
			t.Errorf("case %d: VersionNewer = %v", i, got)
		}
		if got := VersionFork(c.stored, c.in, 8); got != c.fork {
			t.Errorf("case %d: VersionFork = %v", i, got)
		}
	}
}

func TestDecide(t *testing.T) {
	cases := []struct {
		name    string
		r       Replies
		syncing []string
		want    Outcome
	}{
		{"all applied", Replies{Applied: []string{"p", "a", "b"}}, nil, Outcome{OK: true}},
		{"in-sync backup failed", Replies{Applied: []string{"p", "a"}, Unknown: []string{"b"}}, nil, Outcome{Missed: []string{"b"}, Retry: true}},
		{"in-sync backup full", Replies{Applied: []string{"p", "a"}, Refused: []string{"b"}}, nil, Outcome{Missed: []string{"b"}, Retry: true}},
		{"syncing backup failed", Replies{Applied: []string{"p", "a"}, Unknown: []string{"b"}}, []string{"b"}, Outcome{Missed: []string{"b"}}},
		{"fenced at a backup", Replies{Applied: []string{"p", "a"}, Refused: []string{"b"}, Fenced: true}, nil, Outcome{Missed: []string{"b"}}},
		{"primary failed, in-sync took it", Replies{Applied: []string{"a"}, Refused: []string{"p"}, Unknown: []string{"b"}}, nil, Outcome{Missed: []string{"p", "b"}, Retry: true}},
		{"primary failed, syncing took it", Replies{Applied: []string{"b"}, Refused: []string{"p"}, Unknown: []string{"a"}}, []string{"b"}, Outcome{Missed: []string{"b", "a"}}},
		{"primary failed, an answer lost", Replies{Refused: []string{"p", "b"}, Unknown: []string{"a"}}, nil, Outcome{Missed: []string{"a"}}},
		{"everybody full", Replies{Refused: []string{"p", "a", "b"}}, nil, Outcome{}},
	}
	for _, c := range cases {
		got := Decide("p", c.r, c.syncing)
		if !slices.Equal(got.Missed, c.want.Missed) || got.OK != c.want.OK || got.Retry != c.want.Retry {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
