package main

import "testing"

func TestQuotaFlags(t *testing.T) {
	for in, want := range map[string]string{"64MiB": "67108864", "4096": "4096", "0": "none", "none": "none", "1G": "1073741824"} {
		if got, err := quotaBytes(in); err != nil || got != want {
			t.Errorf("quotaBytes(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{"1M": "1000000", "10k": "10000", "7": "7", "none": "none"} {
		if got, err := quotaCount(in); err != nil || got != want {
			t.Errorf("quotaCount(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"-1", "-5GiB", "lots", "1.5.3", ""} {
		if got, err := quotaBytes(in); err == nil {
			t.Errorf("quotaBytes(%q) = %q, want an error", in, got)
		}
	}
	for _, in := range []string{"-1", "1MiB", "x", "99999999999G", ""} {
		if got, err := quotaCount(in); err == nil {
			t.Errorf("quotaCount(%q) = %q, want an error", in, got)
		}
	}
}
