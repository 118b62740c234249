package main

import (
	"fmt"
	"strconv"
	"strings"
)

var units = []struct {
	suffix string
	mult   uint64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1}}

// parseBytes reads "4096", "64KiB", "1G". Empty is 0.
func parseBytes(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := parseUint(s)
	if err != nil {
		return 0, err
	}
	if n > 1<<62 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(n), nil
}

// parseUint reads a non-negative size with an optional binary unit,
// rejecting overflow of 64 bits.
func parseUint(s string) (uint64, error) {
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

func humanBytes(n int64) string {
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
