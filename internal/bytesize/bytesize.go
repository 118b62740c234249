// Package bytesize reads and prints byte counts with binary units
// ("64KiB", "1G", "4096"), the one grammar every size flag and config
// key uses. Parse returns an error for anything else; it never panics.
package bytesize

import (
	"fmt"
	"strconv"
	"strings"
)

// units are tried in order: the longer suffixes first, so "KiB" is not
// read as "Ki" + "B".
var units = []struct {
	suffix string
	mult   uint64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1}}

// Parse reads a non-negative size with an optional binary unit, rejecting
// overflow of 64 bits.
func Parse(s string) (uint64, error) {
	mult := uint64(1)
	num := s
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			mult, num = u.mult, strings.TrimSuffix(s, u.suffix)
			break
		}
	}
	n, err := strconv.ParseUint(num, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size (a number, optionally with KiB, MiB, GiB, TiB): %v", s, err)
	}
	if n != 0 && n*mult/mult != n {
		return 0, fmt.Errorf("%q does not fit in 64 bits", s)
	}
	return n * mult, nil
}

// ParseInt64 is Parse for sizes of things that exist (disks, files): at
// most 2^62 bytes. Empty is 0.
func ParseInt64(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := Parse(s)
	if err != nil {
		return 0, err
	}
	if n > 1<<62 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(n), nil
}

// Format prints n with one decimal and the largest binary unit below it:
// "512 B", "1.5 KiB", "2.0 GiB".
func Format(n int64) string {
	const u = 1024
	if n < u {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(u), 0
	for m := n / u; m >= u; m /= u {
		div *= u
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
