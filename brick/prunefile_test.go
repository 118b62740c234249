package brick

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPruneFile: what a prune recorded survives a reopen, never goes down,
// forgets volumes no longer in the map, and a damaged or newer-format file
// is refused with a message naming it.
func TestPruneFile(t *testing.T) {
	dir := t.TempDir()
	f, err := openPruneFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := pgKey{Vol: 1, PG: 0}, pgKey{Vol: 1, PG: 7}, pgKey{Vol: 2, PG: 3}
	if f.at(a) != 0 {
		t.Fatalf("new record: %d", f.at(a))
	}
	vols := map[uint64]bool{1: true, 2: true}
	if err := f.record([]pgKey{a, b}, 3, vols); err != nil {
		t.Fatal(err)
	}
	if err := f.record([]pgKey{a, c}, 2, vols); err != nil { // an older count: a stays at 3
		t.Fatal(err)
	}
	g, err := openPruneFile(dir)
	if err != nil || g.at(a) != 3 || g.at(b) != 3 || g.at(c) != 2 {
		t.Fatalf("reopened: %d %d %d, %v", g.at(a), g.at(b), g.at(c), err)
	}
	if err := g.record(nil, 5, map[uint64]bool{2: true}); err != nil { // volume 1 deleted
		t.Fatal(err)
	}
	if g, err = openPruneFile(dir); err != nil || g.at(a) != 0 || g.at(c) != 2 {
		t.Fatalf("after volume 1 left: %d %d, %v", g.at(a), g.at(c), err)
	}
	for _, bad := range []string{"", "plumeria-pruned 2\n", "plumeria-pruned 1\n1 2\n", "plumeria-pruned 1\n1 2 x\n", "plumeria-pruned 1\n1 2 3"} {
		os.WriteFile(filepath.Join(dir, pruneFileName), []byte(bad), 0o644)
		if _, err := openPruneFile(dir); err == nil || !strings.Contains(err.Error(), pruneFileName) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func FuzzParsePruneFile(f *testing.F) {
	f.Add([]byte("plumeria-pruned 1\n1 2 3\n"))
	f.Add([]byte("plumeria-pruned 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		at, err := parsePruneFile(b)
		if err == nil && !strings.HasPrefix(string(b), pruneFileMagic+" 1\n") {
			t.Fatalf("accepted %q as %v", b, at)
		}
	})
}
