package dashboard

import (
	"time"

	"github.com/plumeria-fs/plumeria/coord"
	"github.com/plumeria-fs/plumeria/internal/iostat"
)

// Sample is the cluster over one sampling interval, ending at T. Rates
// and latencies are null when unknown: the first sample has no interval
// before it, and latency needs at least one request in the interval.
//
// Throughput and latency come from the bricks' IOStats counters (client
// reads and writes they served as primary, reported in heartbeats); a
// brick that stopped reporting counts zero until it reports again.
type Sample struct {
	T              int64    `json:"t"` // unix milliseconds
	ReadBytesPS    *float64 `json:"read_bytes_per_s"`
	WriteBytesPS   *float64 `json:"write_bytes_per_s"`
	ReadOpsPS      *float64 `json:"read_ops_per_s"`
	WriteOpsPS     *float64 `json:"write_ops_per_s"`
	ReadP50Ms      *float64 `json:"read_p50_ms"`
	ReadP99Ms      *float64 `json:"read_p99_ms"`
	WriteP50Ms     *float64 `json:"write_p50_ms"`
	WriteP99Ms     *float64 `json:"write_p99_ms"`
	DegradedChunks int64    `json:"degraded_chunks"`
	DegradedPGs    int      `json:"degraded_pgs"`
	SyncingPGs     int      `json:"syncing_pgs"`
	BricksUp       int      `json:"bricks_up"`
	BricksDown     int      `json:"bricks_down"`
}

// takeSample computes the sample of the interval from (prev, prevAt) to
// (cur, now). prev may be nil (no earlier status: rates unknown).
func takeSample(prev *coord.Status, prevAt time.Time, cur *coord.Status, now time.Time) Sample {
	s := Sample{T: now.UnixMilli()}
	for _, v := range cur.Volumes {
		s.DegradedChunks += v.DegradedChunks
		s.DegradedPGs += v.DegradedPGs
		s.SyncingPGs += v.SyncingPGs
	}
	for _, b := range cur.Bricks {
		if b.State == "down" {
			s.BricksDown++
		} else {
			s.BricksUp++
		}
	}
	dt := now.Sub(prevAt).Seconds()
	if prev == nil || dt <= 0 {
		return s
	}
	before := map[string]*iostat.Snapshot{}
	for _, b := range prev.Bricks {
		before[b.Name] = b.IO
	}
	var read, write iostat.Op
	for _, b := range cur.Bricks {
		p := before[b.Name]
		if b.IO == nil || p == nil {
			continue // first report: its totals are not this interval's
		}
		read = read.Add(b.IO.Read.Sub(p.Read))
		write = write.Add(b.IO.Write.Sub(p.Write))
	}
	s.ReadBytesPS, s.ReadOpsPS = rate(read.Bytes, dt), rate(read.Ops, dt)
	s.WriteBytesPS, s.WriteOpsPS = rate(write.Bytes, dt), rate(write.Ops, dt)
	s.ReadP50Ms, s.ReadP99Ms = quantileMs(read.Latency, 0.5), quantileMs(read.Latency, 0.99)
	s.WriteP50Ms, s.WriteP99Ms = quantileMs(write.Latency, 0.5), quantileMs(write.Latency, 0.99)
	return s
}

func rate(n uint64, seconds float64) *float64 {
	r := float64(n) / seconds
	return &r
}

// quantileMs is a latency quantile in milliseconds, nil for no requests.
func quantileMs(h []uint64, q float64) *float64 {
	if len(iostat.Trim(h)) == 0 {
		return nil
	}
	ms := float64(iostat.Quantile(h, q)) / float64(time.Millisecond)
	return &ms
}

// ring keeps the newest samples, at most cap(buf).
type ring struct {
	buf  []Sample
	next int // where the next sample goes once buf is full
}

func newRing(n int) *ring { return &ring{buf: make([]Sample, 0, max(n, 1))} }

func (r *ring) add(s Sample) {
	if len(r.buf) < cap(r.buf) {
		r.buf = append(r.buf, s)
		return
	}
	r.buf[r.next] = s
	r.next = (r.next + 1) % len(r.buf)
}

// samples returns a copy, oldest first.
func (r *ring) samples() []Sample {
	out := make([]Sample, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}

// latest returns the newest sample, or nil.
func (r *ring) latest() *Sample {
	if len(r.buf) == 0 {
		return nil
	}
	s := r.buf[(r.next+len(r.buf)-1)%len(r.buf)]
	return &s
}

// rebuild follows episodes of degraded data (see RebuildView).
type rebuild struct{ peak int64 }

func (r *rebuild) observe(s Sample) RebuildView {
	if s.DegradedChunks == 0 {
		r.peak = 0
	}
	r.peak = max(r.peak, s.DegradedChunks)
	v := RebuildView{Active: s.SyncingPGs > 0, DegradedChunks: s.DegradedChunks, PeakChunks: r.peak, Progress: 1}
	if r.peak > 0 {
		v.Progress = 1 - float64(s.DegradedChunks)/float64(r.peak)
	}
	return v
}
