// Package iostat counts the reads and writes a server answers: operations,
// bytes and a latency histogram per kind. Bricks keep one Counters and send
// its Snapshot in every heartbeat; the coordinator's dashboard subtracts two
// snapshots to get rates and latency quantiles over an interval.
//
// It does not decide what is measured (the caller times its handlers) and
// keeps no history. Guarantee: a snapshot's counters never decrease while
// the process runs, so Sub of two snapshots of one process is exact.
package iostat

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Latency histogram: log-linear buckets of microseconds, four per power of
// two, so a quantile read from it is off by at most a quarter of its value.
// Bucket i < 4 holds exactly i µs; bucket i ≥ 4 starts at BucketLow(i) =
// (4 + i%4) << (i/4 - 1). The last bucket also holds everything above.
// Part of the heartbeat wire format (proto IOStats): never change the
// bucket bounds; add a new field with new buckets instead.
const BucketsN = 96 // BucketLow(95) = 7<<22 µs ≈ 29 s

// Bucket returns the histogram bucket of a latency.
func Bucket(d time.Duration) int {
	us := uint64(max(d.Microseconds(), 0))
	if us < 4 {
		return int(us)
	}
	e := bits.Len64(us) - 1 // us in [2^e, 2^(e+1)), e ≥ 2
	sub := int(us>>(e-2)) & 3
	return min(4*(e-1)+sub, BucketsN-1)
}

// BucketLow is the lowest latency, in microseconds, of bucket i.
func BucketLow(i int) uint64 {
	if i < 4 {
		return uint64(i)
	}
	return uint64(4+i%4) << (i/4 - 1)
}

// Op is what was counted for one kind of request.
type Op struct {
	Ops     uint64   `json:"ops"`
	Bytes   uint64   `json:"bytes"`
	Latency []uint64 `json:"latency_us_buckets,omitempty"` // see BucketLow; trailing zeros left off
}

// Snapshot is a point-in-time copy of Counters.
type Snapshot struct {
	Read  Op `json:"read"`
	Write Op `json:"write"`
}

// Counters are safe for concurrent use. The zero value is ready.
type Counters struct {
	read, write counter
}

type counter struct {
	ops, bytes atomic.Uint64
	latency    [BucketsN]atomic.Uint64
}

func (c *counter) add(bytes int, d time.Duration) {
	c.ops.Add(1)
	c.bytes.Add(uint64(max(bytes, 0)))
	c.latency[Bucket(d)].Add(1)
}

func (c *counter) load() Op {
	o := Op{Ops: c.ops.Load(), Bytes: c.bytes.Load()}
	n := 0
	var h [BucketsN]uint64
	for i := range h {
		if h[i] = c.latency[i].Load(); h[i] != 0 {
			n = i + 1
		}
	}
	if n > 0 {
		o.Latency = append([]uint64(nil), h[:n]...)
	}
	return o
}

// Read counts one read of bytes that took d.
func (c *Counters) Read(bytes int, d time.Duration) { c.read.add(bytes, d) }

// Write counts one write of bytes that took d.
func (c *Counters) Write(bytes int, d time.Duration) { c.write.add(bytes, d) }

// Snapshot copies the counters. Fields are read one by one, so a request
// counted meanwhile may show in Ops but not yet in its bucket.
func (c *Counters) Snapshot() Snapshot {
	return Snapshot{Read: c.read.load(), Write: c.write.load()}
}

// Sub returns what was counted between prev and o (its histogram trimmed
// like Trim's, so no requests means no histogram). If any counter went
// down, the process restarted in between and o itself is returned (what
// the new process counted).
func (o Op) Sub(prev Op) Op {
	if o.Ops < prev.Ops || o.Bytes < prev.Bytes || len(o.Latency) < len(prev.Latency) {
		return o
	}
	d := Op{Ops: o.Ops - prev.Ops, Bytes: o.Bytes - prev.Bytes}
	if len(o.Latency) > 0 {
		d.Latency = make([]uint64, len(o.Latency))
	}
	for i, v := range o.Latency {
		var p uint64
		if i < len(prev.Latency) {
			p = prev.Latency[i]
		}
		if v < p {
			return o
		}
		d.Latency[i] = v - p
	}
	d.Latency = Trim(d.Latency)
	return d
}

// Add returns the sum of o and x (bytes, operations and histograms).
func (o Op) Add(x Op) Op {
	s := Op{Ops: o.Ops + x.Ops, Bytes: o.Bytes + x.Bytes}
	if n := max(len(o.Latency), len(x.Latency)); n > 0 {
		s.Latency = make([]uint64, n)
		for i := range s.Latency {
			if i < len(o.Latency) {
				s.Latency[i] += o.Latency[i]
			}
			if i < len(x.Latency) {
				s.Latency[i] += x.Latency[i]
			}
		}
	}
	return s
}

// Quantile returns the latency below which a fraction q (0 < q ≤ 1) of
// the histogram's requests fall, interpolating linearly inside the bucket
// it lands in. It returns 0 for an empty histogram.
func Quantile(h []uint64, q float64) time.Duration {
	var total uint64
	for _, v := range h {
		total += v
	}
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var below float64
	for i, v := range h {
		if v == 0 {
			continue
		}
		if below+float64(v) >= rank || i == len(h)-1 {
			lo, hi := float64(BucketLow(i)), float64(BucketLow(i+1))
			if i == BucketsN-1 {
				hi = lo // open-ended: report its low bound
			}
			frac := min(max((rank-below)/float64(v), 0), 1)
			return time.Duration((lo + frac*(hi-lo)) * float64(time.Microsecond))
		}
		below += float64(v)
	}
	return 0 // unreachable: the last non-zero bucket returns
}

// Trim returns h without its trailing zeros (nil if nothing is left), and
// at most BucketsN long (for histograms that came over the wire).
func Trim(h []uint64) []uint64 {
	h = h[:min(len(h), BucketsN)]
	for len(h) > 0 && h[len(h)-1] == 0 {
		h = h[:len(h)-1]
	}
	if len(h) == 0 {
		return nil
	}
	return h
}
