package dir

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestBadNames(t *testing.T) {
	b := newMem()
	d := New(3500)
	for _, name := range []string{"", ".", "..", "a/b", "/", "a\x00b", strings.Repeat("x", NameBytesMax+1)} {
		if err := d.Insert(b, Entry{Name: name}); !errors.Is(err, ErrBadName) {
			t.Errorf("Insert(%q): %v", name, err)
		}
		if _, _, err := d.Lookup(b, name); !errors.Is(err, ErrBadName) {
			t.Errorf("Lookup(%q): %v", name, err)
		}
		if _, err := d.Remove(b, name); !errors.Is(err, ErrBadName) {
			t.Errorf("Remove(%q): %v", name, err)
		}
	}
	for _, name := range []string{"...", ".a", "a.", strings.Repeat("y", NameBytesMax), "\xff\xfe"} {
		if err := d.Insert(b, Entry{Name: name}); err != nil {
			t.Errorf("Insert(%q): %v", name, err)
		}
	}
}

func TestSentinels(t *testing.T) {
	for _, n := range []int{10, 3000} { // inline, hashed
		b := newMem()
		d := New(3500)
		for i := 0; i < n; i++ {
			if err := d.Insert(b, Entry{Name: nameOf(i), Ino: uint64(i)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.Insert(b, Entry{Name: nameOf(3)}); !errors.Is(err, ErrExists) {
			t.Errorf("n=%d: Insert existing: %v", n, err)
		}
		if _, err := d.Remove(b, "absent"); !errors.Is(err, ErrNotFound) {
			t.Errorf("n=%d: Remove absent: %v", n, err)
		}
		if _, ok, err := d.Lookup(b, "absent"); ok || err != nil {
			t.Errorf("n=%d: Lookup absent: %v %v", n, ok, err)
		}
	}
}

func TestNewPanicsOnTinyInline(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	New(InlineBytesMin - 1)
}

// TestFull fakes a directory whose overflow region is used up and whose
// bucket has no room.
func TestFull(t *testing.T) {
	b := newMem()
	var recs []rec
	used := 0
	for i := 0; used+recordHeaderBytes+200 <= recordSpace; i++ {
		r := rec{name: fmt.Sprintf("%0200d", i)}
		recs = append(recs, r)
		used += r.size()
	}
	d := newDirHash(3500, func(string) uint64 { return 0 })
	buf := make([]byte, BlockBytes)
	b.Write(0, encodeBlock(buf, blockHeader{kind: kindBucket}, recs))
	d.hashed, d.overflows = true, OverflowsMax
	d.count, d.bytes = uint64(len(recs)), uint64(used)
	err := d.Insert(b, Entry{Name: strings.Repeat("z", 255)})
	if !errors.Is(err, ErrFull) {
		t.Fatalf("Insert into a full region: %v", err)
	}
}

// hashedDir returns a directory of n entries with overflow blocks.
func hashedDir(t testing.TB, n int) (*Dir, *memBlocks) {
	b := newMem()
	d := newDirHash(3500, testHashes["lowzero"])
	for i := 0; i < n; i++ {
		if err := d.Insert(b, Entry{Name: nameOf(i), Ino: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if d.overflows == 0 || d.buckets() < 2 {
		t.Fatalf("want overflows and buckets: %d, %d", d.overflows, d.buckets())
	}
	return d, b
}

// TestCorruptBlocks damages blocks in specific ways; Check must say
// ErrCorrupt, and no operation may panic.
func TestCorruptBlocks(t *testing.T) {
	ov := uint64(OverflowBase)
	cases := map[string]func(b *memBlocks){
		"version":       func(b *memBlocks) { b.m[0][0] = 9 },
		"kind":          func(b *memBlocks) { b.m[0][1] = 2 },
		"self":          func(b *memBlocks) { binary.LittleEndian.PutUint32(b.m[1][8:], 0) },
		"owner":         func(b *memBlocks) { binary.LittleEndian.PutUint32(b.m[ov][12:], 1) },
		"next out":      func(b *memBlocks) { binary.LittleEndian.PutUint32(b.m[ov][16:], MaxBlocks) },
		"next cycle":    func(b *memBlocks) { binary.LittleEndian.PutUint32(b.m[ov][16:], uint32(ov)) },
		"prev":          func(b *memBlocks) { binary.LittleEndian.PutUint32(b.m[ov][20:], 5) },
		"used":          func(b *memBlocks) { binary.LittleEndian.PutUint16(b.m[0][4:], recordSpace+1) },
		"count":         func(b *memBlocks) { binary.LittleEndian.PutUint16(b.m[0][2:], 1) },
		"tail":          func(b *memBlocks) { b.m[0][BlockBytes-1] = 1 },
		"zeroed":        func(b *memBlocks) { clear(b.m[ov]) },
		"hash":          func(b *memBlocks) { b.m[0][blockHeaderBytes] ^= 1 },
		"name slash":    func(b *memBlocks) { b.m[0][blockHeaderBytes+recordHeaderBytes] = '/' },
		"wrong bucket":  func(b *memBlocks) { copy(b.m[1][blockHeaderBytes:blockHeaderBytes+40], b.m[0][blockHeaderBytes:]) },
		"overflow lost": func(b *memBlocks) { binary.LittleEndian.PutUint32(b.m[0][16:], 0) },
		"duplicate": func(b *memBlocks) {
			p := b.m[0]
			n := recSizeAt(p, blockHeaderBytes)
			used := int(binary.LittleEndian.Uint16(p[4:]))
			copy(p[blockHeaderBytes+used:], p[blockHeaderBytes:blockHeaderBytes+n])
			binary.LittleEndian.PutUint16(p[4:], uint16(used+n))
			binary.LittleEndian.PutUint16(p[2:], binary.LittleEndian.Uint16(p[2:])+1)
		},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			d, b := hashedDir(t, 600)
			if err := Check(d, b); err != nil {
				t.Fatal(err)
			}
			damage(b)
			mustCorrupt(t, Check(d, b))
			exercise(t, d, b, 100)
		})
	}
}

// exercise runs ops rounds of every operation on a possibly damaged directory: errors
// must wrap ErrCorrupt (or be the ordinary sentinels), never panic.
func exercise(t testing.TB, d *Dir, b *memBlocks, ops int) {
	ok := func(err error) {
		t.Helper()
		if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrExists) &&
			!errors.Is(err, ErrNotFound) && !errors.Is(err, ErrFull) {
			t.Fatalf("unexpected error %v", err)
		}
	}
	for i := 0; i < 7*ops; i += 7 {
		_, _, err := d.Lookup(b, nameOf(i))
		ok(err)
		if i%2 == 0 {
			_, err = d.Remove(b, nameOf(i))
		} else {
			err = d.Insert(b, Entry{Name: nameOf(i + 1000)})
		}
		ok(err)
		_, _, err = d.List(b, uint64(i)<<52, 10)
		ok(err)
	}
	ok(Check(d, b))
}

// TestRandomDamage flips random bytes of random blocks in use.
func TestRandomDamage(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	n := 60
	if raceEnabled {
		n = 15
	}
	for i := 0; i < n; i++ {
		d, b := hashedDir(t, 600)
		blocks := slices.Collect(d.InUse())
		for j := 0; j < 1+i%5; j++ {
			p := b.m[blocks[rng.IntN(len(blocks))]]
			p[rng.IntN(blockHeaderBytes+200)] ^= byte(1 + rng.IntN(255))
		}
		exercise(t, d, b, 100)
	}
}

func TestStaleBlocksIgnored(t *testing.T) {
	// A directory grows, shrinks back inline, then a second directory
	// reuses the same region: it must never see the first one's entries.
	b := newMem()
	d1 := New(3500)
	for i := 0; i < 3000; i++ {
		if err := d1.Insert(b, Entry{Name: nameOf(i)}); err != nil {
			t.Fatal(err)
		}
	}
	d2 := New(3500)
	for i := 5000; i < 5400; i++ {
		if err := d2.Insert(b, Entry{Name: nameOf(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := Check(d2, b); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := d2.Lookup(b, nameOf(1)); ok {
		t.Fatal("second directory sees the first one's entry")
	}
	if got := listAll(t, d2, b, 50); len(got) != 400 {
		t.Fatalf("listed %d, want 400", len(got))
	}
}
