package fsbench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// memDevice is an in-memory Device. lose, if set, is asked before each
// write (numbered from 0) whether to drop it while still reporting
// success; flip, if set, is asked for each read whether to invert the
// first byte it returns.
type memDevice struct {
	lose func(n int) bool
	flip func(off uint64) bool

	mu struct {
		sync.Mutex
		b      []byte
		writes int
		syncs  int
	}
}

var _ Device = (*memDevice)(nil)

func (d *memDevice) ReadAt(_ context.Context, p []byte, off uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(p)
	if off < uint64(len(d.mu.b)) {
		copy(p, d.mu.b[off:])
	}
	if d.flip != nil && d.flip(off) {
		p[0] ^= 0xff
	}
	return nil
}

func (d *memDevice) WriteAt(_ context.Context, p []byte, off uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.mu.writes
	d.mu.writes++
	if d.lose != nil && d.lose(n) {
		return nil
	}
	if end := off + uint64(len(p)); end > uint64(len(d.mu.b)) {
		d.mu.b = append(d.mu.b, make([]byte, end-uint64(len(d.mu.b)))...)
	}
	copy(d.mu.b[off:], p)
	return nil
}

func (d *memDevice) Sync(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mu.syncs++
	return nil
}

// deviceMetrics are the results of RunDevice: those of Run but the file
// system's own workloads.
func deviceMetrics() []struct{ name, unit string } {
	var out []struct{ name, unit string }
	for _, w := range wantMetrics {
		if strings.HasPrefix(w.name, "seq_") || strings.HasPrefix(w.name, "rand_") || strings.HasPrefix(w.name, "write_fsync") {
			out = append(out, w)
		}
	}
	return out
}

func checkResults(t *testing.T, res []Result) {
	t.Helper()
	want := deviceMetrics()
	if len(res) != len(want) {
		t.Fatalf("%d results, want %d: %v", len(res), len(want), res)
	}
	for i, w := range want {
		if r := res[i]; r.Name != w.name || r.Unit != w.unit || !(r.Value > 0) {
			t.Errorf("result %d: %q, want %s, a positive value, %s", i, r, w.name, w.unit)
		}
	}
}

// TestRunDevice: the block workloads on an in-memory device give the
// metrics of Run, write only below DeviceBytes, and sync.
func TestRunDevice(t *testing.T) {
	cfg := tiny(t)
	d := &memDevice{}
	res, err := RunDevice(context.Background(), d, "mem", cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, res)
	if got, want := uint64(len(d.mu.b)), DeviceBytes(cfg); got != want {
		t.Errorf("wrote up to byte %d, DeviceBytes says %d", got, want)
	}
	if want := 3 + 1 + 1 + cfg.FsyncOps; d.mu.syncs != want { // seq; rand fill, write, mixed; fsync fill, ops
		t.Errorf("%d syncs, want %d", d.mu.syncs, want)
	}
	// The sections do not overlap: the sequential one ends where it
	// should, and the fsync one holds its fill's stamps.
	secs := deviceSections(cfg)
	for i := 1; i < len(secs); i++ {
		if secs[i].base < secs[i-1].base+secs[i-1].bytes || secs[i].base%sectionAlign != 0 {
			t.Errorf("section %d at %d overlaps or is unaligned: %+v", i, secs[i].base, secs)
		}
	}
}

// TestRunDeviceBadData: a read that returns other bytes than were written,
// or a write the device acknowledged but lost, fails the workload that
// reads it, naming it and the offset.
func TestRunDeviceBadData(t *testing.T) {
	base := tiny(t)
	base.SeqSize, base.RandOps, base.FsyncOps, base.RandQD = 0, 0, 0, 4
	base.RandSize = 64 * PageSize // filled in one write
	for _, c := range []struct {
		name string
		set  func(*Config)
		dev  *memDevice
		want string
	}{
		{"seq read flipped", func(c *Config) { c.SeqSize = 3 << 20 },
			&memDevice{flip: func(off uint64) bool { return off == 2<<20 }}, "seq_read: dev from offset 0: the 1048576 bytes at offset 2097152 differ"},
		{"random read flipped", func(c *Config) { c.RandOps = 300 },
			&memDevice{flip: func(off uint64) bool { return off == 5*PageSize }}, "rand_read_4k: dev from offset 0: the page at offset 20480 differs"},
		{"random write lost", func(c *Config) { c.RandOps = 30 }, // each page written at most once
			&memDevice{lose: func(n int) bool { return n == 1 }}, "rand_write_4k: check: dev from offset 0: the page at offset"},
		{"mixed write lost", func(c *Config) { c.RandOps = 300 },
			&memDevice{lose: func(n int) bool { return n > 1+300 }}, "rand_mixed_qd4: dev from offset 0: the page at offset"},
		{"fsync write lost", func(c *Config) { c.FsyncOps = 20 },
			&memDevice{lose: func(n int) bool { return n == 4+5 }}, "write_fsync_4k_latency: check: dev from offset 0: the page at offset"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := base
			c.set(&cfg)
			_, err := RunDevice(context.Background(), c.dev, "dev", cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one with %q", err, c.want)
			}
		})
	}
}

// TestRunFile: the block workloads on a local file give the same metrics,
// and the file is gone afterwards; an existing file is refused.
func TestRunFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "local.dat")
	res, err := RunFile(context.Background(), path, tiny(t))
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, res)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("%s after the run: %v", path, err)
	}
	os.WriteFile(path, []byte("keep"), 0o644)
	if _, err := RunFile(context.Background(), path, tiny(t)); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("RunFile on an existing file: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "keep" {
		t.Errorf("RunFile changed an existing file: %q", b)
	}
}
