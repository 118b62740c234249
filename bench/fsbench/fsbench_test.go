package fsbench

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tiny is a configuration that runs every workload in well under a second.
func tiny(t *testing.T) Config {
	return Config{
		Files: 50, Dirs: 3, FileSize: 1000,
		Mkdirs:  20,
		SeqSize: 3<<20 + 5000, SeqIO: 1 << 20,
		RandSize: 1 << 20, RandOps: 300, RandTime: 10 * time.Second, RandQD: 16,
		FsyncOps:  20,
		TreeFiles: 120,
		Seed:      42,
		Log:       testLog{t},
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

var wantMetrics = []struct{ name, unit string }{
	{"files_create", "files/s"}, {"files_stat", "files/s"}, {"files_readdir", "entries/s"},
	{"files_relist", "entries/s"}, {"files_read", "files/s"}, {"files_reread", "files/s"},
	{"files_delete", "files/s"}, {"mkdir_rmdir", "dirs/s"},
	{"seq_write_fsync", "MiB/s"}, {"seq_read", "MiB/s"},
	{"rand_read_4k", "IOPS"}, {"rand_write_4k", "IOPS"}, {"rand_mixed_qd16", "IOPS"},
	{"write_fsync_4k_latency", "us"}, {"write_fsync_4k_latency_p99", "us"},
	{"write_fdatasync_4k_latency", "us"}, {"write_fdatasync_4k_latency_p99", "us"}, {"tree_extract", "s"},
}

func TestRunEveryMetric(t *testing.T) {
	dir := t.TempDir()
	res, err := Run(context.Background(), dir, tiny(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(wantMetrics) {
		t.Fatalf("%d results, want %d: %v", len(res), len(wantMetrics), res)
	}
	for i, w := range wantMetrics {
		r := res[i]
		if r.Name != w.name || r.Unit != w.unit || !(r.Value > 0) {
			t.Errorf("result %d: %q, want %s, a positive value, %s", i, r, w.name, w.unit)
		}
		if f := strings.Fields(r.String()); len(f) != 3 {
			t.Errorf("%q is not three fields", r)
		}
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 0 {
		t.Errorf("left behind in %s: %v", dir, left)
	}
}

// TestZeroSkips: a zero count skips its workload, and only it; the queue
// depth names the mixed workload.
func TestZeroSkips(t *testing.T) {
	for _, c := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.RandQD, c.FsyncOps = 0, 0 }, "mkdir_rmdir rand_read_4k rand_write_4k"},
		{func(c *Config) { c.RandQD = 3 }, "mkdir_rmdir rand_read_4k rand_write_4k rand_mixed_qd3 write_fsync_4k_latency write_fsync_4k_latency_p99 write_fdatasync_4k_latency write_fdatasync_4k_latency_p99"},
		{func(c *Config) { c.RandOps, c.Mkdirs = 0, 0 }, "write_fsync_4k_latency write_fsync_4k_latency_p99 write_fdatasync_4k_latency write_fdatasync_4k_latency_p99"},
		{func(c *Config) { c.FsyncOps, c.Mkdirs, c.RandQD = 0, 0, 1 }, "rand_read_4k rand_write_4k rand_mixed_qd1"},
	} {
		cfg := tiny(t)
		cfg.Files, cfg.SeqSize, cfg.TreeFiles = 0, 0, 0
		c.set(&cfg)
		res, err := Run(context.Background(), t.TempDir(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range res {
			names = append(names, r.Name)
			if !(r.Value > 0) {
				t.Errorf("%q is not positive", r)
			}
		}
		if got := strings.Join(names, " "); got != c.want {
			t.Errorf("results %s, want %s", got, c.want)
		}
	}
}

// TestMixedLane: a lane of rand_mixed reads and writes only its own pages,
// keeps their versions, and finds a page that is not the version it last
// wrote.
func TestMixedLane(t *testing.T) {
	const pages, lanes = 10, 3
	rng := rand.New(rand.NewPCG(1, 2))
	p := newPattern(rng, 1<<16)
	f, err := os.Create(filepath.Join(t.TempDir(), "rand.dat"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	whole := make([]byte, pages*PageSize)
	p.fill(whole, 0)
	f.Write(whole)
	never := func(int) bool { return false }
	budget := func(n int) func() bool { return func() bool { n--; return n >= 0 } }

	l := newMixedLane(1, lanes, pages, rng) // pages 1, 4, 7
	tf := fileTarget(f)
	if err := l.run(context.Background(), tf, p, budget(300), never); err != nil {
		t.Fatal(err)
	}
	if l.reads+l.writes != 300 || l.reads < 150 || l.writes < 50 {
		t.Fatalf("%d reads and %d writes, want 300, about 70%% reads", l.reads, l.writes)
	}
	for pg := range int64(pages) {
		v := l.versions[pg]
		if (pg%lanes == 1) != (v > 0) {
			t.Errorf("page %d at version %d after lane 1 of %d wrote", pg, v, lanes)
		}
	}
	all := []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	version := func(pg int64) uint64 { return uint64(l.versions[pg]) }
	if err := checkPages(context.Background(), tf, p, all, version, "check"); err != nil {
		t.Fatal(err)
	}

	// A page one version behind (a write lost), then a page with a byte
	// changed: each lane read of it fails, and so does checkPages.
	l.versions[4]++
	for _, damage := range []func(){func() {}, func() { l.versions[4]--; f.WriteAt([]byte{0x5a}, 4*PageSize+100) }} {
		damage()
		if err := checkPages(context.Background(), tf, p, all, version, "check"); err == nil || !strings.Contains(err.Error(), "offset 16384") {
			t.Errorf("checkPages of a damaged page: %v", err)
		}
		l.readPercent = 100
		err := l.run(context.Background(), tf, p, budget(100), never)
		if err == nil || !strings.Contains(err.Error(), "offset 16384 is not version") {
			t.Errorf("lane reads of a damaged page: %v", err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.run(ctx, tf, p, budget(100), never); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled lane: %v", err)
	}
}

func TestQuantile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 200; i++ {
		d = append(d, time.Duration(i))
	}
	if q := quantile(d, 0.5); q != 100 {
		t.Errorf("median of 1..200: %d", q)
	}
	if q := quantile(d, 0.99); q != 198 {
		t.Errorf("p99 of 1..200: %d", q)
	}
	if q := quantile(d[:1], 0.99); q != 1 {
		t.Errorf("p99 of one: %d", q)
	}
	if !LowerIsBetter("us") || !LowerIsBetter("s") || LowerIsBetter("IOPS") {
		t.Error("LowerIsBetter: us and s lower, IOPS higher")
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	if _, err := Run(context.Background(), missing, tiny(t)); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing directory: %v", err)
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	if _, err := Run(context.Background(), file, tiny(t)); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("file: %v", err)
	}
	for what, set := range map[string]func(*Config){
		"no directories for the files": func(c *Config) { c.Dirs = 0 },
		"negative queue depth":         func(c *Config) { c.RandQD = -1 },
		"negative fsync count":         func(c *Config) { c.FsyncOps = -1 },
		"queue depth over the max":     func(c *Config) { c.RandQD, c.RandSize = RandQDMax+1, 1<<30 },
		"fewer pages than the depth":   func(c *Config) { c.RandQD, c.RandSize = 16, 15*PageSize },
	} {
		cfg := tiny(t)
		set(&cfg)
		if _, err := Run(context.Background(), dir, cfg); err == nil {
			t.Errorf("%s: no error", what)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, dir, tiny(t)); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 {
		t.Errorf("left behind in %s: %v", dir, left)
	}
}

func TestTreeExtract(t *testing.T) {
	tr, err := GenTree(600, 7)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Files != 600 || tr.Dirs != 50 || tr.Symlinks != 12 {
		t.Fatalf("tree of %d files, %d dirs, %d symlinks; want 600, 50, 12", tr.Files, tr.Dirs, tr.Symlinks)
	}
	again, _ := GenTree(600, 7)
	if !bytes.Equal(tr.Tar, again.Tar) {
		t.Fatal("same seed, different tarballs")
	}
	dir := t.TempDir()
	if err := Extract(dir, bytes.NewReader(tr.Tar)); err != nil {
		t.Fatal(err)
	}
	if err := tr.Verify(dir); err != nil {
		t.Fatal(err)
	}

	// Independently of Verify: count what is on disk.
	var files, dirs, links, execs, maxDepth int
	var total int64
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		maxDepth = max(maxDepth, strings.Count(rel, string(filepath.Separator)))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			dirs++
		case d.Type()&os.ModeSymlink != 0:
			links++
			if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
				t.Errorf("symlink %s does not lead to a file: %v", path, err)
			}
		case d.Type().IsRegular():
			files++
			total += info.Size()
			if info.Mode().Perm()&0o100 != 0 {
				execs++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files != 600 || dirs != 50 || links != 12 || execs == 0 || total != tr.Bytes || maxDepth < 3 {
		t.Fatalf("on disk: %d files (%d executable, %d bytes), %d dirs, %d symlinks, depth %d; want 600 files (%d bytes), 50 dirs, 12 symlinks",
			files, execs, total, dirs, links, maxDepth, tr.Bytes)
	}
	t.Logf("%d files, %d bytes (tar %d), %d executable, depth %d", files, total, len(tr.Tar), execs, maxDepth)

	// Verify notices damage.
	var victim string
	for _, e := range tr.Entries {
		if e.Type == tar.TypeReg && len(e.Data) > 0 {
			victim = filepath.Join(dir, filepath.FromSlash(e.Path))
			break
		}
	}
	f, _ := os.OpenFile(victim, os.O_WRONLY, 0)
	f.WriteAt([]byte{0}, 0)
	f.Close()
	os.Chtimes(victim, treeMTime, treeMTime)
	if err := tr.Verify(dir); err == nil || !strings.Contains(err.Error(), victim) {
		t.Errorf("changed content: %v", err)
	}
	dir2 := t.TempDir()
	Extract(dir2, bytes.NewReader(tr.Tar))
	os.WriteFile(filepath.Join(dir2, "src", "extra"), nil, 0o644)
	if err := tr.Verify(dir2); err == nil || !strings.Contains(err.Error(), "extra") {
		t.Errorf("extra file: %v", err)
	}
}

func TestTreeSizes(t *testing.T) {
	tr, err := GenTree(3000, 1)
	if err != nil {
		t.Fatal(err)
	}
	var small, large int
	for _, e := range tr.Entries {
		if e.Type != tar.TypeReg {
			continue
		}
		if len(e.Data) < 4<<10 {
			small++
		}
		if len(e.Data) >= 256<<10 {
			large++
		}
	}
	if small < 1800 || large == 0 || large > 50 {
		t.Fatalf("%d small and %d large files of 3000", small, large)
	}
	t.Logf("3000 files: %d under 4 KiB, %d of 256 KiB or more, %.1f MiB, tar %.1f MiB",
		small, large, float64(tr.Bytes)/(1<<20), float64(len(tr.Tar))/(1<<20))
}

// TestPatternChunking: the content does not depend on how it is cut into
// writes, so pages read at random match what sequential writes produced.
func TestPatternChunking(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const size = 5*PageSize + 123
	for _, base := range []int{PageSize, 2 * PageSize, 3000} {
		p := newPattern(rng, base)
		whole := make([]byte, size)
		p.fill(whole, 0)
		for _, chunk := range []int{base, 1000, PageSize, 7} {
			buf := make([]byte, chunk)
			var got []byte
			for off := int64(0); off < size; off += int64(chunk) {
				b := buf[:min(int64(chunk), size-off)]
				p.next(b, off)
				got = append(got, b...)
			}
			if !bytes.Equal(got, whole) {
				t.Fatalf("base %d, chunk %d: content differs", base, chunk)
			}
		}
		// Stamps differ page to page and from another salt.
		a, b := make([]byte, PageSize), make([]byte, PageSize)
		p.fill(a, 0)
		p.fill(b, int64(base)*PageSize) // same base bytes, another page
		if bytes.Equal(a, b) {
			t.Fatal("two pages with the same content")
		}
		q := pattern{base: p.base, salt: p.salt ^ 1}
		q.fill(b, 0)
		if bytes.Equal(a, b) {
			t.Fatal("two salts, same page")
		}

		// Versions: 0 is p; the next differs in its stamp and in most
		// other bytes; chunking does not change a version's content.
		if p.version(0).fill(b, 0); !bytes.Equal(a, b) {
			t.Fatal("version 0 is not the pattern itself")
		}
		for v := uint64(1); v < 4; v++ {
			p.version(v-1).fill(a, PageSize)
			p.version(v).fill(b, PageSize)
			same := 0
			for i := range a {
				if a[i] == b[i] {
					same++
				}
			}
			if bytes.Equal(a[:8], b[:8]) || same > PageSize/16 {
				t.Fatalf("base %d, versions %d and %d: same stamp or %d equal bytes", base, v-1, v, same)
			}
		}
		pv := p.version(5)
		pv.fill(whole, 0)
		buf := make([]byte, base)
		for off := int64(0); off < size; off += int64(base) {
			b := buf[:min(int64(base), size-off)]
			pv.next(b, off)
			if !bytes.Equal(b, whole[off:off+int64(len(b))]) {
				t.Fatalf("base %d, version 5: content at %d differs chunk by chunk", base, off)
			}
		}
	}
}

func TestPickPages(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	got := pickPages(rng, 100, 100)
	seen := map[int64]bool{}
	for _, p := range got {
		if p < 0 || p >= 100 || seen[p] {
			t.Fatalf("page %d out of range or repeated in %v", p, got)
		}
		seen[p] = true
	}
	if len(pickPages(rng, 10, 25)) != 25 {
		t.Fatal("more operations than pages")
	}
}
