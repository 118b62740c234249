package brick

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSeqFile: a reservation survives a reopen, never goes down, and a
// damaged or newer-format file is refused with a message naming it.
func TestSeqFile(t *testing.T) {
	dir := t.TempDir()
	f, err := openSeqFile(dir)
	if err != nil || f.durable != 0 {
		t.Fatalf("new: %d, %v", f.durable, err)
	}
	for _, r := range []uint64{5 << 32, 3, 7 << 32} {
		if err := f.ensure(r); err != nil {
			t.Fatal(err)
		}
	}
	g, err := openSeqFile(dir)
	if err != nil || g.durable != 7<<32 {
		t.Fatalf("reopened: %d, %v", g.durable, err)
	}
	for _, bad := range []string{"", "plumeria-seq-reserved 1 12", "plumeria-seq-reserved 2 12\n", "x 1 12\n", "plumeria-seq-reserved 1 -4\n"} {
		os.WriteFile(filepath.Join(dir, seqFileName), []byte(bad), 0o644)
		if _, err := openSeqFile(dir); err == nil || !strings.Contains(err.Error(), seqFileName) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func FuzzParseSeqFile(f *testing.F) {
	f.Add([]byte("plumeria-seq-reserved 1 123\n"))
	f.Add([]byte("plumeria-seq-reserved 9 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, err := parseSeqFile(b)
		if err == nil && !strings.HasPrefix(string(b), seqFileMagic) && !strings.HasPrefix(strings.TrimSpace(string(b)), seqFileMagic) {
			t.Fatalf("accepted %q as %d", b, seq)
		}
	})
}
