package clustermap

import (
	"fmt"

	"github.com/plumeria-fs/plumeria/internal/limits"
)

// ValidName reports whether s may name a brick, volume, snapshot or member:
// 1 to limits.NameBytesMax bytes of [A-Za-z0-9._-], not starting with '.' or '-'.
func ValidName(s string) error {
	if len(s) == 0 || len(s) > limits.NameBytesMax {
		return fmt.Errorf("name %q: length %d not in [1, %d]", s, len(s), limits.NameBytesMax)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' ||
			(i > 0 && (c == '.' || c == '-'))
		if !ok {
			return fmt.Errorf("name %q: character %q at %d not allowed (use letters, digits, '.', '_', '-')", s, c, i)
		}
	}
	return nil
}

// ValidChunkBytes checks a volume's chunk size: a power of two that is a
// multiple of the block size, within the limits.
func ValidChunkBytes(n uint32) error {
	if n < limits.ChunkBytesMin || n > limits.ChunkBytesMax || n&(n-1) != 0 {
		return fmt.Errorf("chunk size %d: must be a power of two in [%d, %d]", n, limits.ChunkBytesMin, limits.ChunkBytesMax)
	}
	return nil
}

// ValidClass checks a storage class name: a name (ValidName) of at most
// limits.ClassBytesMax bytes.
func ValidClass(s string) error {
	if len(s) > limits.ClassBytesMax {
		return fmt.Errorf("storage class %q: longer than %d bytes", s, limits.ClassBytesMax)
	}
	if err := ValidName(s); err != nil {
		return fmt.Errorf("storage class: %w", err)
	}
	return nil
}

// ValidDomainLevel checks a volume's hard failure-domain level: "" (host),
// host, rack or site.
func ValidDomainLevel(s string) error {
	switch s {
	case "", LevelHost, LevelRack, LevelSite:
		return nil
	}
	return fmt.Errorf("failure-domain level %q: use host, rack or site", s)
}
