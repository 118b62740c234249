package iostat

import (
	"reflect"
	"sync"
	"testing"
	"time"
)

func TestBucketBounds(t *testing.T) {
	// Every latency lands in the bucket whose bounds hold it, and bounds
	// grow strictly: the buckets tile [0, ∞) without gaps.
	for i := 1; i < BucketsN; i++ {
		if BucketLow(i) <= BucketLow(i-1) {
			t.Fatalf("BucketLow(%d) = %d not above BucketLow(%d) = %d", i, BucketLow(i), i-1, BucketLow(i-1))
		}
	}
	for _, us := range []uint64{0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 100, 999, 1000, 4096, 123456, 1 << 22, 29 << 20} {
		b := Bucket(time.Duration(us) * time.Microsecond)
		if BucketLow(b) > us || b < BucketsN-1 && BucketLow(b+1) <= us {
			t.Errorf("%d µs in bucket %d = [%d, %d)", us, b, BucketLow(b), BucketLow(b+1))
		}
	}
	if b := Bucket(time.Hour); b != BucketsN-1 {
		t.Errorf("an hour in bucket %d, want the last (%d)", b, BucketsN-1)
	}
	if b := Bucket(-time.Second); b != 0 {
		t.Errorf("a negative latency in bucket %d, want 0", b)
	}
}

func TestQuantile(t *testing.T) {
	var c Counters
	for range 98 {
		c.Write(4096, 100*time.Microsecond)
	}
	c.Write(4096, 10*time.Millisecond)
	c.Write(4096, 10*time.Millisecond)
	h := c.Snapshot().Write.Latency
	within := func(got, want time.Duration) bool { return got >= want*3/4 && got <= want*5/4 }
	if p50 := Quantile(h, 0.5); !within(p50, 100*time.Microsecond) {
		t.Errorf("p50 = %v, want about 100µs", p50)
	}
	if p99 := Quantile(h, 0.99); !within(p99, 10*time.Millisecond) {
		t.Errorf("p99 = %v, want about 10ms", p99)
	}
	if q := Quantile(nil, 0.5); q != 0 {
		t.Errorf("quantile of an empty histogram = %v, want 0", q)
	}
	if q := Quantile(Op{}.Latency, 0.99); q != 0 {
		t.Errorf("quantile of no requests = %v, want 0", q)
	}
}

func TestSubAdd(t *testing.T) {
	var c Counters
	c.Read(100, time.Microsecond)
	a := c.Snapshot()
	c.Read(50, 2*time.Microsecond)
	c.Write(10, time.Millisecond)
	b := c.Snapshot()
	d := b.Read.Sub(a.Read)
	want := Op{Ops: 1, Bytes: 50, Latency: []uint64{0, 0, 1}}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("read delta %+v, want %+v", d, want)
	}
	if s := a.Read.Add(d); !reflect.DeepEqual(s, Op{Ops: 2, Bytes: 150, Latency: []uint64{0, 1, 1}}) {
		t.Errorf("a + delta = %+v", s)
	}
	// A restarted process counts from zero: the delta is what it counted.
	restarted := Op{Ops: 1, Bytes: 7, Latency: []uint64{1}}
	if d := restarted.Sub(b.Read); !reflect.DeepEqual(d, restarted) {
		t.Errorf("delta across a restart %+v, want %+v", d, restarted)
	}
	if d := b.Write.Sub(Op{}); !reflect.DeepEqual(d, b.Write) {
		t.Errorf("delta from nothing %+v, want %+v", d, b.Write)
	}
	if d := b.Read.Sub(b.Read); d.Latency != nil {
		t.Errorf("no requests between: histogram %v, want none", d.Latency)
	}
}

func TestTrim(t *testing.T) {
	long := make([]uint64, BucketsN+10)
	long[3] = 1
	long[BucketsN+5] = 9 // beyond the format: dropped
	if got := Trim(long); !reflect.DeepEqual(got, []uint64{0, 0, 0, 1}) {
		t.Errorf("Trim = %v", got)
	}
}

func TestConcurrent(t *testing.T) {
	var c Counters
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				c.Write(1, time.Microsecond)
				c.Snapshot()
			}
		})
	}
	wg.Wait()
	s := c.Snapshot()
	if s.Write.Ops != 8000 || s.Write.Bytes != 8000 || s.Write.Latency[1] != 8000 {
		t.Errorf("after 8000 writes: %+v", s.Write)
	}
}
