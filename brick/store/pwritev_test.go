package store

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestPwritev: more buffers than one pwritev(2) takes (IOV_MAX), of mixed
// sizes, land in order at the offset given.
func TestPwritev(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var bufs [][]byte
	var want []byte
	for i := range 3000 {
		b := bytes.Repeat([]byte{byte(i)}, 1+i%7)
		bufs = append(bufs, b)
		want = append(want, b...)
	}
	const off = 1000
	if err := pwritev(f, bufs, off); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want)+10)
	n, _ := f.ReadAt(got, off)
	if n != len(want) || !bytes.Equal(got[:n], want) {
		t.Fatalf("read back %d bytes, want %d, equal %v", n, len(want), bytes.Equal(got[:min(n, len(want))], want[:min(n, len(want))]))
	}
}
