package dashboard

import (
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/coord"
	"github.com/plumeria-fs/plumeria/internal/iostat"
)

func TestRing(t *testing.T) {
	r := newRing(3)
	if r.latest() != nil || len(r.samples()) != 0 {
		t.Fatalf("empty ring has samples")
	}
	for i := int64(1); i <= 5; i++ {
		r.add(Sample{T: i})
		got := r.samples()
		want := max(1, i-2) // the oldest kept
		if len(got) != int(min(i, 3)) || got[0].T != want || got[len(got)-1].T != i {
			t.Fatalf("after %d adds: %+v, want %d..%d", i, got, want, i)
		}
		if l := r.latest(); l == nil || l.T != i {
			t.Fatalf("latest after %d adds: %+v", i, l)
		}
	}
}

// ioOf counts n writes of size bytes taking lat, and m reads likewise.
func ioOf(writes, reads int, size int, lat time.Duration) *iostat.Snapshot {
	var c iostat.Counters
	for range writes {
		c.Write(size, lat)
	}
	for range reads {
		c.Read(size, lat)
	}
	s := c.Snapshot()
	return &s
}

func TestTakeSample(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	prev := &coord.Status{Bricks: []coord.BrickStatus{
		{Name: "b1", State: "up", IO: ioOf(10, 0, 4096, time.Millisecond)},
		{Name: "b2", State: "up", IO: ioOf(0, 5, 4096, time.Millisecond)},
		{Name: "b3", State: "up"}, // no report yet
	}}
	first := takeSample(nil, time.Time{}, prev, t0)
	if first.WriteBytesPS != nil || first.ReadP99Ms != nil || first.BricksUp != 3 {
		t.Fatalf("first sample has rates or wrong counts: %+v", first)
	}
	cur := &coord.Status{
		Bricks: []coord.BrickStatus{
			{Name: "b1", State: "up", IO: ioOf(30, 0, 4096, time.Millisecond)}, // +20 writes
			{Name: "b2", State: "down", IO: ioOf(0, 5, 4096, time.Millisecond)},
			{Name: "b3", State: "up", IO: ioOf(1000, 0, 4096, time.Second)}, // first report: not this interval's
			{Name: "b4", State: "up", IO: ioOf(1000, 0, 4096, time.Second)}, // new brick: likewise
		},
		Volumes: []coord.VolumeStatus{{DegradedChunks: 7, DegradedPGs: 2, SyncingPGs: 1}, {DegradedChunks: 1, DegradedPGs: 1}},
	}
	s := takeSample(prev, t0, cur, t0.Add(2*time.Second))
	if *s.WriteOpsPS != 10 || *s.WriteBytesPS != 10*4096 || *s.ReadOpsPS != 0 || *s.ReadBytesPS != 0 {
		t.Errorf("rates: write %v ops/s %v B/s, read %v ops/s %v B/s; want 10, 40960, 0, 0",
			*s.WriteOpsPS, *s.WriteBytesPS, *s.ReadOpsPS, *s.ReadBytesPS)
	}
	if s.WriteP50Ms == nil || *s.WriteP50Ms < 0.75 || *s.WriteP50Ms > 1.25 {
		t.Errorf("write p50 %v, want about 1 ms", s.WriteP50Ms)
	}
	if s.ReadP50Ms != nil {
		t.Errorf("read p50 %v with no reads in the interval, want null", *s.ReadP50Ms)
	}
	if s.DegradedChunks != 8 || s.DegradedPGs != 3 || s.SyncingPGs != 1 || s.BricksUp != 3 || s.BricksDown != 1 {
		t.Errorf("counts %+v", s)
	}
	// b1 restarted: its counters start over; what the new process counted is the interval's.
	restarted := &coord.Status{Bricks: []coord.BrickStatus{{Name: "b1", State: "up", IO: ioOf(4, 0, 100, time.Millisecond)}}}
	s = takeSample(cur, t0.Add(2*time.Second), restarted, t0.Add(4*time.Second))
	if *s.WriteOpsPS != 2 || *s.WriteBytesPS != 200 {
		t.Errorf("after a restart: %v ops/s %v B/s, want 2 and 200", *s.WriteOpsPS, *s.WriteBytesPS)
	}
}

func TestRebuildProgress(t *testing.T) {
	var r rebuild
	steps := []struct {
		degraded int64
		syncing  int
		peak     int64
		progress float64
		active   bool
	}{
		{0, 0, 0, 1, false},
		{100, 0, 100, 0, false}, // a brick died
		{100, 4, 100, 0, true},  // backfill started
		{40, 2, 100, 0.6, true},
		{0, 0, 0, 1, false}, // done: the next episode starts afresh
		{10, 1, 10, 0, true},
	}
	for i, st := range steps {
		v := r.observe(Sample{DegradedChunks: st.degraded, SyncingPGs: st.syncing})
		if v.PeakChunks != st.peak || v.Progress != st.progress || v.Active != st.active || v.DegradedChunks != st.degraded {
			t.Errorf("step %d: %+v, want peak %d progress %v active %v", i, v, st.peak, st.progress, st.active)
		}
	}
}
