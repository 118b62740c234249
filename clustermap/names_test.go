package clustermap_test

import (
	"strings"
	"testing"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/limits"
)

func TestValidName(t *testing.T) {
	good := []string{
		"a", "Z", "0", "_", "_x", "a.b", "a-b", "a_b", "a.", "a-", "a..b", "vol-01.snap_2",
		"ABCxyz019", strings.Repeat("x", limits.NameBytesMax),
	}
	for _, s := range good {
		if err := clustermap.ValidName(s); err != nil {
			t.Errorf("ValidName(%q) = %v, want nil", s, err)
		}
	}
	bad := []string{
		"", ".", "..", "-", ".a", "-a", "a/b", "/", "a b", " a", "a ", "a\x00", "\x00",
		"a:b", "a@b", "a+b", "a,b", "a\nb", "a\tb", "é", "aé", "a\u200b", "\xff",
		"../etc", "a\\b", "*", "a=b",
		strings.Repeat("x", limits.NameBytesMax+1),
	}
	for _, s := range bad {
		err := clustermap.ValidName(s)
		if err == nil {
			t.Errorf("ValidName(%q) = nil, want an error", s)
			continue
		}
		if strings.ContainsAny(err.Error(), "\n") {
			t.Errorf("ValidName(%q) error spans lines: %q", s, err)
		}
	}
}

// TestValidNameMatchesModel checks every single byte in every position
// against the documented rule.
func TestValidNameMatchesModel(t *testing.T) {
	model := func(s string) bool {
		if len(s) < 1 || len(s) > limits.NameBytesMax || s[0] == '.' || s[0] == '-' {
			return false
		}
		for _, c := range []byte(s) {
			if !strings.ContainsRune("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-", rune(c)) {
				return false
			}
		}
		return true
	}
	for c := 0; c < 256; c++ {
		for _, s := range []string{string([]byte{byte(c)}), "a" + string([]byte{byte(c)}), string([]byte{byte(c)}) + "a"} {
			want := model(s)
			got := clustermap.ValidName(s) == nil
			if got != want {
				t.Errorf("ValidName(%q) ok=%v, want %v", s, got, want)
			}
		}
	}
}

func TestValidChunkBytes(t *testing.T) {
	var good []uint32
	for n := uint32(limits.ChunkBytesMin); n <= limits.ChunkBytesMax; n <<= 1 {
		good = append(good, n)
	}
	if len(good) < 2 || good[0] != limits.BlockBytes {
		t.Fatalf("limits changed: %v", good)
	}
	for _, n := range good {
		if err := clustermap.ValidChunkBytes(n); err != nil {
			t.Errorf("ValidChunkBytes(%d) = %v, want nil", n, err)
		}
		if n%limits.BlockBytes != 0 {
			t.Errorf("accepted chunk %d is not a multiple of the block", n)
		}
	}
	bad := []uint32{
		0, 1, 2, 512, 1024, limits.ChunkBytesMin / 2, limits.ChunkBytesMin - 1, limits.ChunkBytesMin + 1,
		limits.ChunkBytesMin * 3, limits.ChunkBytesDefault + limits.BlockBytes,
		limits.ChunkBytesMax - 1, limits.ChunkBytesMax + 1, limits.ChunkBytesMax * 2,
		limits.ChunkBytesMax + limits.ChunkBytesMax/2, 1 << 31, 1<<31 + 1, ^uint32(0),
	}
	for _, n := range bad {
		if err := clustermap.ValidChunkBytes(n); err == nil {
			t.Errorf("ValidChunkBytes(%d) = nil, want an error", n)
		}
	}
}
