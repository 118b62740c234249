package dir

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// memBlocks is a map-backed Blocks. Read returns one shared buffer that the
// next Read overwrites, and Write poisons p after copying it, so code that
// keeps either too long sees garbage. Blocks never written read as stale
// garbage if stale is set (as a block an earlier directory used would).
type memBlocks struct {
	m       map[uint64][]byte
	scratch []byte
	stale   bool

	reads, writes int
}

func newMem() *memBlocks { return &memBlocks{m: map[uint64][]byte{}} }

func (m *memBlocks) Read(n uint64) ([]byte, error) {
	m.reads++
	if n >= MaxBlocks {
		return nil, fmt.Errorf("read block %d beyond the region", n)
	}
	if m.scratch == nil {
		m.scratch = make([]byte, BlockBytes)
	}
	if p, ok := m.m[n]; ok {
		copy(m.scratch, p)
	} else if m.stale {
		staleBlock(m.scratch, n)
	} else {
		clear(m.scratch)
	}
	return m.scratch, nil
}

func (m *memBlocks) Write(n uint64, p []byte) error {
	m.writes++
	if n >= MaxBlocks || len(p) != BlockBytes {
		return fmt.Errorf("write block %d of %d bytes", n, len(p))
	}
	q, ok := m.m[n]
	if !ok {
		q = make([]byte, BlockBytes)
		m.m[n] = q
	}
	copy(q, p)
	for i := range p {
		p[i] = 0xA5
	}
	return nil
}

func (m *memBlocks) clone() *memBlocks {
	c := newMem()
	for n, p := range m.m {
		c.m[n] = slices.Clone(p)
	}
	c.stale = m.stale
	return c
}

// touched returns the reads and writes since the last call.
func (m *memBlocks) touched() (reads, writes int) {
	r, w := m.reads, m.writes
	m.reads, m.writes = 0, 0
	return r, w
}

// staleBlock fills p with what an earlier directory might have left at
// block n: half the time a well-formed block of its own, else noise.
func staleBlock(p []byte, n uint64) {
	rng := rand.New(rand.NewPCG(n, 7))
	if n%2 == 0 {
		var recs []rec
		for i := 0; i < 20; i++ {
			name := fmt.Sprintf("stale-%d-%d", n, i)
			recs = append(recs, rec{h: xxhash.Sum64String(name), ino: n, name: name})
		}
		encodeBlock(p[:0:BlockBytes], blockHeader{kind: kindBucket, self: uint32(n % MaxBlocks), owner: uint32(n % BucketsMax)}, recs)
		return
	}
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
}

// Hash functions the tests force on a Dir.
var testHashes = map[string]func(string) uint64{
	"xxhash": xxhash.Sum64String,
	// Only 5 distinct hashes: long chains, huge same-cookie groups.
	"collide5": func(s string) uint64 { return xxhash.Sum64String(s)%5 + 0x9E3779B97F4A7C15 },
	// Hashes differ only in bits 62, 63 and 0..2: 8 cookie groups, each
	// mixing different hashes.
	"cookiegroups": func(s string) uint64 { return xxhash.Sum64String(s) & 0xC000_0000_0000_0007 },
	// Low 12 bits zero: everything in bucket 0 until the table is large.
	"lowzero": func(s string) uint64 { return xxhash.Sum64String(s) << 12 },
}

func newDirHash(inlineMax int, hash func(string) uint64) *Dir {
	d := New(inlineMax)
	d.hash = hash
	return d
}

// nameOf returns the i-th test name; lengths vary from short to 255.
func nameOf(i int) string {
	s := fmt.Sprintf("n%d.", i)
	pad := i * 37 % 64
	if i%17 == 0 {
		pad = NameBytesMax - len(s)
	}
	return s + strings.Repeat("x", pad)
}

// sortedModel returns the model's entries in List order, cookies set.
func sortedModel(model map[string]Entry, hash func(string) uint64) []Entry {
	ents := slices.Collect(maps.Values(model))
	for i := range ents {
		ents[i].Cookie = cookieOf(hash(ents[i].Name))
	}
	slices.SortFunc(ents, func(a, b Entry) int {
		if a.Cookie != b.Cookie {
			if a.Cookie < b.Cookie {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return ents
}

// listAll pages through d with pages of at most max and checks the paging
// rules: cookies increase, groups are whole, pages exceed max only to
// finish a group.
func listAll(t testing.TB, d *Dir, b Blocks, max int) []Entry {
	t.Helper()
	var all []Entry
	after := uint64(0)
	for pages := 0; ; pages++ {
		if pages > 10_000_000 {
			t.Fatal("listing does not end")
		}
		ents, done, err := d.List(b, after, max)
		if err != nil {
			t.Fatalf("List(%d, %d): %v", after, max, err)
		}
		checkPage(t, ents, after, max)
		all = append(all, ents...)
		if done {
			return all
		}
		if len(ents) > 0 {
			after = ents[len(ents)-1].Cookie
		}
		if len(ents) == 0 && !done {
			t.Fatalf("List(%d, %d): empty page, not done", after, max)
		}
	}
}

func checkPage(t testing.TB, ents []Entry, after uint64, max int) {
	t.Helper()
	for i, e := range ents {
		if e.Cookie <= after || e.Cookie == 0 || e.Cookie >= cookieEnd {
			t.Fatalf("entry %q cookie %#x after %#x", e.Name, e.Cookie, after)
		}
		if i > 0 && e.Cookie < ents[i-1].Cookie {
			t.Fatalf("cookies out of order: %#x then %#x", ents[i-1].Cookie, e.Cookie)
		}
		if i >= max && e.Cookie != ents[max-1].Cookie {
			t.Fatalf("page of %d > max %d beyond a group", len(ents), max)
		}
	}
}

func mustCorrupt(t testing.TB, err error) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("got %v, want ErrCorrupt", err)
	}
}
