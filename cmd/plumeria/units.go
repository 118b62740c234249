package main

import "github.com/plumeria-fs/plumeria/internal/bytesize"

// parseBytes reads "4096", "64KiB", "1G". Empty is 0.
func parseBytes(s string) (int64, error) { return bytesize.ParseInt64(s) }

// parseUint reads a non-negative size with an optional binary unit,
// rejecting overflow of 64 bits.
func parseUint(s string) (uint64, error) { return bytesize.Parse(s) }

func humanBytes(n int64) string { return bytesize.Format(n) }
