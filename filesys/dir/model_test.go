package dir

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// modelRun drives a Dir and a Go map with the same random operations and
// compares every answer.
type modelRun struct {
	t         *testing.T
	rng       *rand.Rand
	d         *Dir
	b         *memBlocks
	hash      func(string) uint64
	model     map[string]Entry
	inlineMax int
	names     int  // name space size
	check     bool // Check after every step
}

func TestModel(t *testing.T) {
	seeds, scale := 16, 2
	if testing.Short() {
		seeds, scale = 6, 1
	}
	if raceEnabled {
		seeds = 3
	}
	for hname, hash := range testHashes {
		for _, inlineMax := range []int{InlineBytesMin, 300, 3500} {
			for seed := range seeds {
				t.Run(fmt.Sprintf("%s/inline%d/seed%d", hname, inlineMax, seed), func(t *testing.T) {
					r := newModelRun(t, uint64(seed), hash, inlineMax)
					r.names = []int{30, 200, 1500, 5000}[seed%4]
					if hname != "xxhash" { // long chains: fewer names
						r.names = min(r.names, 1500)
					}
					r.check = seed%3 == 0 && r.names <= 1500
					steps := 800 * scale
					if !r.check {
						steps = 2500 * scale
					}
					r.run(steps)
				})
			}
		}
	}
}

func newModelRun(t *testing.T, seed uint64, hash func(string) uint64, inlineMax int) *modelRun {
	b := newMem()
	b.stale = true
	return &modelRun{
		t: t, rng: rand.New(rand.NewPCG(seed, 1)), d: newDirHash(inlineMax, hash), b: b,
		hash: hash, model: map[string]Entry{}, inlineMax: inlineMax,
	}
}

// run does steps operations: a growing phase, a shrinking phase, a growing
// one again, then lists and checks everything.
func (r *modelRun) run(steps int) {
	for i := 0; i < steps; i++ {
		insertPct := 75
		if i*3/steps == 1 {
			insertPct = 20
		}
		r.step(insertPct)
		if r.check {
			if err := Check(r.d, r.b); err != nil {
				r.t.Fatalf("step %d: Check: %v", i, err)
			}
		}
		if r.rng.IntN(50) == 0 {
			r.reload()
		}
	}
	r.listCompare(1 + r.rng.IntN(7))
	r.listCompare(1 << 20)
	if err := Check(r.d, r.b); err != nil {
		r.t.Fatalf("final Check: %v", err)
	}
}

func (r *modelRun) step(insertPct int) {
	t := r.t
	name := nameOf(r.rng.IntN(r.names))
	want, in := r.model[name]
	switch p := r.rng.IntN(100); {
	case p < insertPct:
		e := Entry{Name: name, Ino: r.rng.Uint64(), Type: uint8(r.rng.IntN(16))}
		err := r.d.Insert(r.b, e)
		if in != errors.Is(err, ErrExists) || (!in && err != nil) {
			t.Fatalf("Insert(%q) with present=%v: %v", name, in, err)
		}
		if !in {
			r.model[name] = e
		}
	case p < insertPct+(100-insertPct)*2/3:
		got, err := r.d.Remove(r.b, name)
		if !in {
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("Remove(%q) absent: %v", name, err)
			}
			return
		}
		want.Cookie = cookieOf(r.hash(name))
		if err != nil || got != want {
			t.Fatalf("Remove(%q) = %+v, %v; want %+v", name, got, err, want)
		}
		delete(r.model, name)
	case p < 98:
		got, ok, err := r.d.Lookup(r.b, name)
		want.Cookie = cookieOf(r.hash(name))
		if err != nil || ok != in || (in && got != want) {
			t.Fatalf("Lookup(%q) = %+v, %v, %v; want %+v, %v", name, got, ok, err, want, in)
		}
	default:
		r.listCompare(1 + r.rng.IntN(20))
	}
	if r.d.Len() != uint64(len(r.model)) {
		t.Fatalf("Len %d, model %d", r.d.Len(), len(r.model))
	}
}

// reload goes through Encode and Decode, as the inode would.
func (r *modelRun) reload() {
	enc := r.d.Encode()
	if len(enc) > r.inlineMax {
		r.t.Fatalf("root of %d bytes > inlineMax %d", len(enc), r.inlineMax)
	}
	d, err := decode(enc, r.inlineMax, r.hash)
	if err != nil {
		r.t.Fatalf("Decode(Encode()): %v", err)
	}
	r.d = d
}

func (r *modelRun) listCompare(max int) {
	got := listAll(r.t, r.d, r.b, max)
	want := sortedModel(r.model, r.hash)
	if !slices.Equal(got, want) {
		r.t.Fatalf("List(max %d): %d entries, model %d\n got %v\nwant %v", max, len(got), len(want), head(got), head(want))
	}
}

func head(e []Entry) []Entry { return e[:min(len(e), 5)] }

// TestGrowShrink fills a directory far enough for overflow chains, splits,
// merges, moves of overflow blocks and the way back inline, with Check and
// a comparison after each step.
func TestGrowShrink(t *testing.T) {
	for hname, hash := range testHashes {
		t.Run(hname, func(t *testing.T) {
			b := newMem()
			b.stale = true
			d := newDirHash(InlineBytesMin, hash)
			model := map[string]Entry{}
			n := 3000
			rng := rand.New(rand.NewPCG(9, 9))
			order := rng.Perm(n)
			var maxBlocks uint64
			for _, i := range order {
				e := Entry{Name: nameOf(i), Ino: uint64(i)}
				if err := d.Insert(b, e); err != nil {
					t.Fatal(err)
				}
				model[e.Name] = e
				maxBlocks = max(maxBlocks, d.BlocksInUse())
				if i%50 == 0 {
					if err := Check(d, b); err != nil {
						t.Fatalf("after %d inserts: %v", len(model), err)
					}
				}
			}
			if got := listAll(t, d, b, 100); !slices.Equal(got, sortedModel(model, hash)) {
				t.Fatal("full listing differs")
			}
			for k, i := range rng.Perm(n) {
				name := nameOf(i)
				if _, err := d.Remove(b, name); err != nil {
					t.Fatalf("Remove(%q): %v", name, err)
				}
				delete(model, name)
				if k%50 == 0 || len(model) < 100 {
					if err := Check(d, b); err != nil {
						t.Fatalf("after removes down to %d: %v", len(model), err)
					}
				}
			}
			if d.hashed || d.BlocksInUse() != 0 || d.Len() != 0 {
				t.Fatalf("empty directory still hashed=%v with %d blocks, len %d", d.hashed, d.BlocksInUse(), d.Len())
			}
			t.Logf("peak %d blocks", maxBlocks)
		})
	}
}
