package memfs

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/plumeria-fs/plumeria/filesys"
)

// TestContent checks reads, writes and truncates at chunk boundaries and
// in holes against a plain byte slice.
func TestContent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var c content
	var want []byte
	const span = 3*chunkSize + 100
	for i := range 400 {
		off := uint64(rng.IntN(span))
		switch rng.IntN(8) {
		case 0:
			c.truncate(off)
			if int(off) <= len(want) {
				want = want[:off]
			} else {
				want = append(want, make([]byte, int(off)-len(want))...)
			}
		default:
			p := make([]byte, rng.IntN(2*chunkSize/3))
			for j := 0; j < len(p); j += 512 { // distinct enough to catch a misplaced copy
				p[j] = byte(rng.Uint32())
			}
			c.write(p, off)
			if end := int(off) + len(p); end > len(want) {
				want = append(want, make([]byte, end-len(want))...)
			}
			copy(want[off:], p)
		}
		if c.size != uint64(len(want)) {
			t.Fatalf("step %d: size %d, want %d", i, c.size, len(want))
		}
		var alloc uint64
		for _, ch := range c.chunks {
			alloc += uint64(len(ch))
		}
		if alloc != c.alloc || alloc > c.size+chunkSize {
			t.Fatalf("step %d: alloc %d, chunks hold %d, size %d", i, c.alloc, alloc, c.size)
		}
		roff := uint64(rng.IntN(span))
		got := make([]byte, rng.IntN(chunkSize+10))
		n := c.read(got, roff)
		var exp []byte
		if int(roff) < len(want) {
			exp = want[roff:min(len(want), int(roff)+len(got))]
		}
		if !bytes.Equal(got[:n], exp) {
			t.Fatalf("step %d: read %d at %d: %d bytes differing from the %d expected", i, len(got), roff, n, len(exp))
		}
	}
	// A far write allocates one chunk, not the hole before it.
	var s content
	s.write([]byte("far"), 1<<40)
	if s.size != 1<<40+3 || s.alloc > chunkSize || len(s.chunks) != 1 {
		t.Errorf("sparse write: size %d, alloc %d, %d chunks", s.size, s.alloc, len(s.chunks))
	}
}

// TestReadDirCookies: a listing resumed after any cookie sees the names
// that stayed exactly once and in the same order, across removals (and the
// compaction they cause), additions and exchanges.
func TestReadDirCookies(t *testing.T) {
	ctx := t.Context()
	f := New()
	const n = 1000
	for i := range n {
		if _, err := f.Create(ctx, filesys.RootIno, fmt.Sprintf("f%04d", i), 0o644, filesys.Caller{}, true); err != nil {
			t.Fatal(err)
		}
	}
	list := func(after uint64, max int) (all []filesys.DirEntry) {
		for {
			ents, done, err := f.ReadDir(ctx, filesys.RootIno, after, max)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, ents...)
			if done {
				return all
			}
			if len(ents) == 0 {
				t.Fatal("no entries and not done")
			}
			after = ents[len(ents)-1].Cookie
		}
	}
	first := list(0, 7)
	if len(first) != n {
		t.Fatalf("%d entries, want %d", len(first), n)
	}
	mid := first[n/2].Cookie
	// Remove three quarters (compaction runs), add some, exchange two.
	for i := range n {
		if i%4 != 0 {
			if err := f.Unlink(ctx, filesys.RootIno, fmt.Sprintf("f%04d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 10 {
		f.Mkdir(ctx, filesys.RootIno, fmt.Sprintf("new%d", i), 0o755, filesys.Caller{})
	}
	if err := f.Rename(ctx, filesys.RootIno, "f0000", filesys.RootIno, "new0", filesys.RenameExchange); err != nil {
		t.Fatal(err)
	}
	rest := list(mid, 5)
	var want []string
	for i := n/2 + 1; i < n; i++ {
		if i%4 == 0 {
			want = append(want, fmt.Sprintf("f%04d", i))
		}
	}
	for i := range 10 {
		want = append(want, fmt.Sprintf("new%d", i))
	}
	var got []string
	prev := mid
	for _, e := range rest {
		if e.Cookie <= prev {
			t.Fatalf("cookie %d after %d", e.Cookie, prev)
		}
		prev = e.Cookie
		got = append(got, e.Name)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after cookie %d: %v\nwant %v", mid, got, want)
	}
	all := list(0, 1000)
	if all[0].Name != "f0000" || all[0].Mode != 0o040000 {
		t.Errorf("first entry %+v, want f0000, now a directory (exchanged in place)", all[0])
	}
}

// TestRenameDirs: directories know their parent, so a rename into a
// descendant is refused and Nlink counts follow.
func TestRenameDirs(t *testing.T) {
	ctx := t.Context()
	f := New()
	a, _ := f.Mkdir(ctx, filesys.RootIno, "a", 0o755, filesys.Caller{})
	b, _ := f.Mkdir(ctx, a.Ino, "b", 0o755, filesys.Caller{})
	c, _ := f.Mkdir(ctx, b.Ino, "c", 0o755, filesys.Caller{})
	if err := f.Rename(ctx, filesys.RootIno, "a", c.Ino, "a", 0); !errors.Is(err, filesys.ErrInvalid) {
		t.Errorf("rename a into a/b/c: %v, want ErrInvalid", err)
	}
	if err := f.Rename(ctx, a.Ino, "b", filesys.RootIno, "b", 0); err != nil {
		t.Fatal(err)
	}
	// b's parent is now the root: moving a under c (in b) is fine.
	if err := f.Rename(ctx, filesys.RootIno, "a", c.Ino, "a", 0); err != nil {
		t.Errorf("rename a into b/c after b moved out of a: %v", err)
	}
	if err := f.Rename(ctx, filesys.RootIno, "b", a.Ino, "b", 0); !errors.Is(err, filesys.ErrInvalid) {
		t.Errorf("rename b into b/c/a: %v, want ErrInvalid", err)
	}
	root, _ := f.Getattr(ctx, filesys.RootIno)
	if ga, _ := f.Getattr(ctx, a.Ino); root.Nlink != 3 || ga.Nlink != 2 {
		t.Errorf("nlink: root %d (want 3), a %d (want 2)", root.Nlink, ga.Nlink)
	}
}
