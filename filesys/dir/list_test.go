package dir

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestListStableUnderChurn lists a directory page by page while other names
// are inserted and removed between pages, in bursts big enough to split and
// merge many buckets, move overflow blocks, and go inline and back. Every
// name present for the whole listing must come back exactly once, and no
// name twice.
func TestListStableUnderChurn(t *testing.T) {
	seeds := 6
	if testing.Short() {
		seeds = 4
	}
	if raceEnabled {
		seeds = 2
	}
	for hname, hash := range testHashes {
		for seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed%d", hname, seed), func(t *testing.T) {
				churnListing(t, uint64(seed), hash, hname == "xxhash")
			})
		}
	}
}

// big says the hash spreads names well; the others make long chains, so
// they get fewer names.
func churnListing(t *testing.T, seed uint64, hash func(string) uint64, big bool) {
	rng := rand.New(rand.NewPCG(seed, 2))
	b := newMem()
	b.stale = true
	d := newDirHash(300+int(seed)*200, hash)
	stable := map[string]bool{}
	nStable, burstMax := []int{200, 1000, 3000}[seed%3], 2000
	if !big {
		nStable, burstMax = nStable/3, 400
	}
	for i := 0; i < nStable; i++ {
		name := fmt.Sprintf("stable-%d", i)
		if err := d.Insert(b, Entry{Name: name, Ino: uint64(i)}); err != nil {
			t.Fatal(err)
		}
		stable[name] = true
	}
	churn := map[string]bool{}
	for i := 0; i < int(seed%4)*300; i++ {
		churnOnce(t, rng, d, b, churn, burstMax)
	}
	seen := map[string]int{}
	after := uint64(0)
	for pages := 0; ; pages++ {
		churnOnce(t, rng, d, b, churn, burstMax)
		ents, done, err := d.List(b, after, 1+rng.IntN(20))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.Cookie <= after {
				t.Fatalf("page %d: cookie %#x <= after %#x", pages, e.Cookie, after)
			}
			seen[e.Name]++
			if seen[e.Name] > 1 {
				t.Fatalf("page %d: %q listed twice", pages, e.Name)
			}
		}
		if done {
			break
		}
		if len(ents) > 0 {
			after = ents[len(ents)-1].Cookie
		}
		if pages%8 == 0 {
			if err := Check(d, b); err != nil {
				t.Fatalf("page %d: %v", pages, err)
			}
		}
	}
	t.Logf("%d stable, %d listed, %d churn names at the end, %d buckets", len(stable), len(seen), len(churn), d.buckets())
	for name := range stable {
		if seen[name] != 1 {
			t.Fatalf("stable %q listed %d times", name, seen[name])
		}
	}
}

// churnOnce inserts or removes a burst of churn names: sometimes a few,
// sometimes up to burstMax (many splits), sometimes all of them (merges).
func churnOnce(t *testing.T, rng *rand.Rand, d *Dir, b *memBlocks, churn map[string]bool, burstMax int) {
	n := 1 + rng.IntN(8)
	if rng.IntN(6) == 0 {
		n = []int{100, burstMax / 4, burstMax}[rng.IntN(3)]
	}
	insert := rng.IntN(2) == 0
	if rng.IntN(10) == 0 {
		insert, n = false, len(churn)
	}
	for i := 0; i < n; i++ {
		if insert {
			name := fmt.Sprintf("churn-%d", rng.IntN(1_000_000))
			err := d.Insert(b, Entry{Name: name})
			if err != nil && !errors.Is(err, ErrExists) {
				t.Fatal(err)
			}
			churn[name] = true
			continue
		}
		for name := range churn {
			if _, err := d.Remove(b, name); err != nil {
				t.Fatal(err)
			}
			delete(churn, name)
			break
		}
	}
}

// TestListGroups: with only 5 distinct hashes, every page is a whole group
// however small max is.
func TestListGroups(t *testing.T) {
	hash := testHashes["collide5"]
	b := newMem()
	d := newDirHash(3500, hash)
	for i := 0; i < 500; i++ {
		if err := d.Insert(b, Entry{Name: nameOf(i)}); err != nil {
			t.Fatal(err)
		}
	}
	groups := 0
	after := uint64(0)
	for {
		ents, done, err := d.List(b, after, 1)
		if err != nil {
			t.Fatal(err)
		}
		if done && len(ents) == 0 {
			break
		}
		groups++
		for _, e := range ents {
			if e.Cookie != ents[0].Cookie {
				t.Fatalf("page mixes cookies %#x and %#x", ents[0].Cookie, e.Cookie)
			}
		}
		after = ents[0].Cookie
		if done {
			break
		}
	}
	if groups != 5 {
		t.Fatalf("%d groups, want 5", groups)
	}
}

func TestListEnds(t *testing.T) {
	b := newMem()
	d := New(3500)
	ents, done, err := d.List(b, 0, 10)
	if len(ents) != 0 || !done || err != nil {
		t.Fatalf("empty List = %v, %v, %v", ents, done, err)
	}
	for i := 0; i < 2000; i++ {
		if err := d.Insert(b, Entry{Name: nameOf(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, after := range []uint64{cookieEnd - 1, cookieEnd, 1<<64 - 1} {
		ents, done, err := d.List(b, after, 10)
		if len(ents) != 0 || !done || err != nil {
			t.Fatalf("List(%#x) = %v, %v, %v", after, ents, done, err)
		}
	}
	all := listAll(t, d, b, 1<<30)
	if len(all) != 2000 {
		t.Fatalf("%d entries", len(all))
	}
	last := all[len(all)-1].Cookie
	ents, done, err = d.List(b, last-1, 1)
	if len(ents) != 1 || !done || err != nil {
		t.Fatalf("List(last-1) = %v, %v, %v", ents, done, err)
	}
}
