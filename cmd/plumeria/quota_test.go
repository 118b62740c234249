package main

import (
	"strings"
	"testing"

	"github.com/plumeria-fs/plumeria/filesys"
)

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

func TestPrintQuota(t *testing.T) {
	var b strings.Builder
	printQuota(&b, "/mnt/q", filesys.QuotaInfo{LimitBytes: 64 << 20, UsedBytes: 48 << 20, UsedInodes: 12, Counting: true,
		Shares: []filesys.QuotaShare{{Slot: 3, Node: "n1", ChargedBytes: 40 << 20, ChargedInode: 10, HeldBytes: 1 << 20, HeldInodes: -1}, {Slot: 9, ChargedBytes: 8 << 20, ChargedInode: 2}}})
	got := b.String()
	for _, want := range []string{
		"bytes   50331648 (48.0 MiB) used of 67108864 (64.0 MiB), 16777216 (16.0 MiB) left",
		"inodes  12 used, no limit",
		"still counting",
		"slot 3 n1: charged 41943040 bytes, 10 inodes; holds 1.0 MiB bytes, unlimited inodes more",
		"slot 9 (slot free)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("printQuota lacks %q:\n%s", want, got)
		}
	}
}
