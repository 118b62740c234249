package dir

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

func scaleName(i int) string { return fmt.Sprintf("file-%07d.dat", i) }

// opCost tracks the blocks touched (reads + writes) per operation.
type opCost struct {
	max, sum, n int
	hist        map[int]int
}

func (c *opCost) add(reads, writes int) {
	k := reads + writes
	c.max = max(c.max, k)
	c.sum += k
	c.n++
	if c.hist == nil {
		c.hist = map[int]int{}
	}
	c.hist[k]++
}

func (c *opCost) mean() float64 { return float64(c.sum) / float64(max(c.n, 1)) }

// TestScale inserts a million entries (100,000 under the race detector),
// and checks Len, lookups of a sample, that each insert touches O(1)
// blocks, that List returns every entry once, and Check.
func TestScale(t *testing.T) {
	if testing.Short() {
		t.Skip("scale test skipped with -short")
	}
	n := 1_000_000
	if raceEnabled {
		n = 100_000
	}
	b := newMem()
	d := New(3500)
	var ins opCost
	for i := 0; i < n; i++ {
		b.touched()
		if err := d.Insert(b, Entry{Name: scaleName(i), Ino: uint64(i)}); err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
		ins.add(b.touched())
	}
	if d.Len() != uint64(n) {
		t.Fatalf("Len %d, want %d", d.Len(), n)
	}
	t.Logf("%d entries: %d buckets, %d overflow blocks (%.1f%% of buckets), %d bytes of records, %.1f%% of block space used",
		n, d.buckets(), d.overflows, 100*float64(d.overflows)/float64(d.buckets()), d.bytes,
		100*float64(d.bytes)/float64(d.BlocksInUse()*recordSpace))
	t.Logf("insert: blocks touched max %d mean %.2f histogram %v", ins.max, ins.mean(), ins.hist)
	if ins.max > 16 || ins.mean() > 6 {
		t.Errorf("insert touches too many blocks: max %d mean %.2f", ins.max, ins.mean())
	}

	rng := rand.New(rand.NewPCG(1, 1))
	var look opCost
	for k := 0; k < 20_000; k++ {
		i := rng.IntN(n)
		b.touched()
		e, ok, err := d.Lookup(b, scaleName(i))
		look.add(b.touched())
		if err != nil || !ok || e.Ino != uint64(i) {
			t.Fatalf("Lookup(%q) = %+v, %v, %v", scaleName(i), e, ok, err)
		}
		if _, ok, _ := d.Lookup(b, scaleName(n+i)); ok {
			t.Fatalf("Lookup(%q) found an absent name", scaleName(n+i))
		}
	}
	t.Logf("lookup: blocks touched max %d mean %.2f", look.max, look.mean())

	seen := make([]bool, n)
	b.touched()
	ents := listAll(t, d, b, 1000)
	reads, _ := b.touched()
	for _, e := range ents {
		if seen[e.Ino] {
			t.Fatalf("%q listed twice", e.Name)
		}
		seen[e.Ino] = true
	}
	if len(ents) != n {
		t.Fatalf("listed %d of %d", len(ents), n)
	}
	t.Logf("list in pages of 1000: %d block reads for %d blocks in use", reads, d.BlocksInUse())
	if err := Check(d, b); err != nil {
		t.Fatal(err)
	}

	var rm opCost
	for k := 0; k < n/2; k++ {
		b.touched()
		if _, err := d.Remove(b, scaleName(k*2)); err != nil {
			t.Fatal(err)
		}
		rm.add(b.touched())
	}
	t.Logf("remove half: blocks touched max %d mean %.2f; now %d buckets, %d overflow blocks",
		rm.max, rm.mean(), d.buckets(), d.overflows)
	if err := Check(d, b); err != nil {
		t.Fatal(err)
	}
}

// A directory of a million entries, built once for the benchmarks.
var bench struct {
	once sync.Once
	root []byte
	b    *memBlocks
}

const benchEntries = 1_000_000

func benchDir(tb testing.TB) (*Dir, *memBlocks) {
	bench.once.Do(func() {
		b := newMem()
		d := New(3500)
		for i := 0; i < benchEntries; i++ {
			if err := d.Insert(b, Entry{Name: scaleName(i), Ino: uint64(i)}); err != nil {
				panic(err)
			}
		}
		bench.root, bench.b = d.Encode(), b
	})
	d, err := Decode(bench.root, 3500)
	if err != nil {
		tb.Fatal(err)
	}
	return d, bench.b
}

func BenchmarkInsert1M(b *testing.B) {
	d, base := benchDir(b)
	blocks := base.clone()
	blocks.touched()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := d.Insert(blocks, Entry{Name: scaleName(benchEntries + i)}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	r, w := blocks.touched()
	b.ReportMetric(float64(r)/float64(b.N), "reads/op")
	b.ReportMetric(float64(w)/float64(b.N), "writes/op")
}

func BenchmarkLookup1M(b *testing.B) {
	d, blocks := benchDir(b)
	rng := rand.New(rand.NewPCG(2, 2))
	names := make([]string, 4096)
	for i := range names {
		names[i] = scaleName(rng.IntN(benchEntries))
	}
	blocks.touched()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok, err := d.Lookup(blocks, names[i%len(names)]); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
	b.StopTimer()
	r, w := blocks.touched()
	b.ReportMetric(float64(r+w)/float64(b.N), "blocks/op")
}

func BenchmarkList1M(b *testing.B) {
	d, blocks := benchDir(b)
	blocks.touched()
	b.ResetTimer()
	after := uint64(0)
	for i := 0; i < b.N; i++ {
		ents, done, err := d.List(blocks, after, 100)
		if err != nil {
			b.Fatal(err)
		}
		switch {
		case done:
			after = 0
		case len(ents) > 0:
			after = ents[len(ents)-1].Cookie
		}
	}
	b.StopTimer()
	r, _ := blocks.touched()
	b.ReportMetric(float64(r)/float64(b.N), "blocks/page")
}
