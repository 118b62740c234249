// Package fsx is an fsx-style data integrity exerciser for one file on any
// file system (a Plumeria FUSE mount, or a local file as a control).
//
// Run keeps an in-memory model of the file and applies a seeded random
// sequence of operations to both: writes at random offsets (also past EOF,
// leaving holes), reads compared against the model, truncates up and down,
// fallocate (plain, KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE), mmap reads, fsync,
// fdatasync and close/reopen. Every CheckEvery operations and at the end it
// compares the whole file. A mismatch is returned as a *MismatchError that
// names the seed, the operation number, the first bad offset, the expected
// and actual bytes and the last operations; the same seed with the same
// Disable list replays the same operations.
//
// Fallocate modes and mmap reads that the file system rejects with
// EOPNOTSUPP/ENOTSUP/ENOSYS (or ENODEV for mmap) are turned off for the rest
// of the run and counted in Stats.Skipped; they still consume the same
// random numbers, so the sequence of the other operations does not change.
package fsx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Config tunes Run. Zero values take the defaults.
type Config struct {
	// Ops is the number of operations (default 10000).
	Ops int
	// Seed seeds the operation sequence; 0 picks one from the clock (it is
	// reported in Stats.Seed and in every error).
	Seed uint64
	// MaxFileBytes bounds the file size (default 1 MiB).
	MaxFileBytes int64
	// MaxOpBytes bounds one read or write (default 64 KiB).
	MaxOpBytes int64
	// CheckEvery is how often (in operations) the whole file is compared;
	// default 1000, negative means only at the end.
	CheckEvery int
	// Disable lists operation kinds not to perform (see Kinds), e.g. to
	// replay on a file system that lacks them.
	Disable []string
	// Log, when set, receives one line per operation.
	Log io.Writer
	// AfterOp, when set, is called after each operation with its number
	// (0-based) and the path; an error stops the run. It is meant for fault
	// injection: killing a node, or (in tests) changing the file behind
	// fsx's back.
	AfterOp func(op int, path string) error

	// readHook lets in-package tests corrupt what a read returned.
	readHook func(op int, off int64, buf []byte)
}

// Operation kinds, as they appear in logs and Stats.
const (
	OpWrite      = "write"
	OpRead       = "read"
	OpTruncate   = "truncate"
	OpFallocate  = "fallocate"
	OpKeepSize   = "fallocate_keep_size"
	OpPunchHole  = "punch_hole"
	OpZeroRange  = "zero_range"
	OpMapRead    = "mapread"
	OpFsync      = "fsync"
	OpFdatasync  = "fdatasync"
	OpReopen     = "close_reopen"
	OpCheckWhole = "check_whole_file"
)

// Kinds lists the operation kinds Run draws from.
func Kinds() []string {
	k := make([]string, len(weights))
	for i, w := range weights {
		k[i] = w.kind
	}
	return k
}

// weights is the draw table; its order is part of the replay format.
var weights = []struct {
	kind   string
	weight int
}{
	{OpWrite, 30}, {OpRead, 25}, {OpTruncate, 7}, {OpFallocate, 4}, {OpKeepSize, 3},
	{OpPunchHole, 4}, {OpZeroRange, 3}, {OpMapRead, 6}, {OpFsync, 3}, {OpFdatasync, 2}, {OpReopen, 4},
}

// Stats reports a run.
type Stats struct {
	Seed         uint64
	Ops          int            // operations drawn
	ByKind       map[string]int // operations performed, by kind
	Skipped      map[string]int // operations drawn but not performed (unsupported or disabled)
	WholeChecks  int
	BytesWritten int64
	BytesRead    int64
	FinalSize    int64
	Duration     time.Duration
}

func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d ops in %v, %d whole-file checks, %d bytes written, %d read, final size %d\n",
		s.Seed, s.Ops, s.Duration.Round(time.Millisecond), s.WholeChecks, s.BytesWritten, s.BytesRead, s.FinalSize)
	for _, k := range Kinds() {
		fmt.Fprintf(&b, "  %-20s %8d", k, s.ByKind[k])
		if s.Skipped[k] > 0 {
			fmt.Fprintf(&b, "  (skipped %d)", s.Skipped[k])
		}
		b.WriteString("\n")
	}
	return b.String()
}

// MismatchError is a difference between the file and the model.
type MismatchError struct {
	Seed     uint64
	Op       int    // the operation that found it (0-based)
	What     string // the operation that found it, as logged
	Offset   int64  // first bad byte
	Expected []byte // model bytes from Offset (up to 32)
	Actual   []byte // file bytes from Offset (up to 32); shorter when the file ended
	FileSize int64  // size the model expects
	// ActualSize is the file's size when the sizes differ (then Offset is
	// the smaller size and the bytes are empty), else equal to FileSize.
	ActualSize int64
	Recent     []string
}

func (m *MismatchError) Error() string {
	var b strings.Builder
	if m.ActualSize != m.FileSize {
		fmt.Fprintf(&b, "fsx: size mismatch (seed %d, op #%d: %s): file has %d bytes, expected %d\n",
			m.Seed, m.Op, m.What, m.ActualSize, m.FileSize)
	} else {
		fmt.Fprintf(&b, "fsx: data mismatch (seed %d, op #%d: %s) at offset %d (%#x), file size %d\n",
			m.Seed, m.Op, m.What, m.Offset, m.Offset, m.FileSize)
		fmt.Fprintf(&b, "  expected % x\n  actual   % x\n", m.Expected, m.Actual)
	}
	b.WriteString(recentString(m.Recent))
	fmt.Fprintf(&b, "  replay with the same seed (%d) and options", m.Seed)
	return b.String()
}

func recentString(r []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  last %d operations:\n", len(r))
	for _, l := range r {
		fmt.Fprintf(&b, "    %s\n", l)
	}
	return b.String()
}

const recentOps = 20

type runner struct {
	cfg      Config
	path     string
	f        *os.File
	model    []byte
	rng      *rand.Rand
	op       int
	recent   []string
	stats    Stats
	disabled map[string]bool
	buf      []byte
	total    int
}

// Run exercises the file at path (created or truncated first) and returns
// the stats; the file is left in place. A data mismatch is a
// *MismatchError; other failures (I/O errors, ctx) are returned wrapped
// with the seed, the operation number and the recent operations.
func Run(ctx context.Context, path string, cfg Config) (Stats, error) {
	if cfg.Ops <= 0 {
		cfg.Ops = 10000
	}
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = 1 << 20
	}
	if cfg.MaxOpBytes <= 0 {
		cfg.MaxOpBytes = 64 << 10
	}
	cfg.MaxOpBytes = min(cfg.MaxOpBytes, cfg.MaxFileBytes)
	if cfg.CheckEvery == 0 {
		cfg.CheckEvery = 1000
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	r := &runner{
		cfg:      cfg,
		path:     path,
		rng:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		disabled: map[string]bool{},
		buf:      make([]byte, cfg.MaxOpBytes),
		stats:    Stats{Seed: cfg.Seed, ByKind: map[string]int{}, Skipped: map[string]int{}},
	}
	for _, k := range cfg.Disable {
		if !slices.Contains(Kinds(), k) {
			return r.stats, fmt.Errorf("fsx: unknown operation kind %q in Disable (have %s)", k, strings.Join(Kinds(), ", "))
		}
		r.disabled[k] = true
	}
	for _, w := range weights {
		r.total += w.weight
	}
	start := time.Now()
	defer func() {
		if r.f != nil {
			r.f.Close()
		}
	}()
	var err error
	r.f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return r.stats, fmt.Errorf("fsx: %w", err)
	}
	r.logf("fsx seed %d ops %d maxfile %d maxop %d disable %v", cfg.Seed, cfg.Ops, cfg.MaxFileBytes, cfg.MaxOpBytes, cfg.Disable)
	for r.op = 0; r.op < cfg.Ops; r.op++ {
		if err := ctx.Err(); err != nil {
			return r.finish(start), r.wrap(err)
		}
		if err := r.step(); err != nil {
			return r.finish(start), err
		}
		if cfg.AfterOp != nil {
			if err := cfg.AfterOp(r.op, path); err != nil {
				return r.finish(start), r.wrap(fmt.Errorf("AfterOp: %w", err))
			}
		}
		if cfg.CheckEvery > 0 && (r.op+1)%cfg.CheckEvery == 0 {
			if err := r.checkWhole(); err != nil {
				return r.finish(start), err
			}
		}
	}
	r.op = cfg.Ops
	if err := r.checkWhole(); err != nil {
		return r.finish(start), err
	}
	return r.finish(start), nil
}

func (r *runner) finish(start time.Time) Stats {
	r.stats.Duration = time.Since(start)
	r.stats.FinalSize = int64(len(r.model))
	return r.stats
}

func (r *runner) logf(format string, args ...any) {
	if r.cfg.Log != nil {
		fmt.Fprintf(r.cfg.Log, format+"\n", args...)
	}
}

func (r *runner) record(s string) {
	line := fmt.Sprintf("#%d %s (size %d)", r.op, s, len(r.model))
	if len(r.recent) == recentOps {
		r.recent = r.recent[1:]
	}
	r.recent = append(r.recent, line)
	r.logf("%s", line)
}

func (r *runner) wrap(err error) error {
	return fmt.Errorf("fsx: seed %d, op #%d: %w\n%s", r.cfg.Seed, r.op, err, recentString(r.recent))
}

// step draws one operation. It always draws the same four numbers so the
// sequence does not depend on which operations were performed.
func (r *runner) step() error {
	pick := r.rng.IntN(r.total)
	a := r.rng.Int64N(r.cfg.MaxFileBytes)
	b := r.rng.Int64N(r.cfg.MaxOpBytes) + 1
	c := r.rng.Uint64()
	kind := ""
	for _, w := range weights {
		if pick < w.weight {
			kind = w.kind
			break
		}
		pick -= w.weight
	}
	r.stats.Ops++
	if r.disabled[kind] {
		r.stats.Skipped[kind]++
		r.record("skip " + kind)
		return nil
	}
	size := int64(len(r.model))
	var err error
	switch kind {
	case OpWrite:
		off, n := a, min(b, r.cfg.MaxFileBytes-a)
		// Half the writes land near EOF, where extending and partial-page
		// bugs live.
		if c&1 == 0 && size > 0 {
			off = max(0, min(size-int64(c>>1%uint64(min(size, 4096)+1)), r.cfg.MaxFileBytes-1))
			n = min(b, r.cfg.MaxFileBytes-off)
		}
		err = r.write(off, n)
	case OpRead:
		off, n := a, b
		if size > 0 && c&3 != 0 { // mostly inside the file
			off = a % size
		}
		err = r.read(off, n)
	case OpTruncate:
		n := a
		if c&1 == 0 { // small changes around the current size, too
			n = max(0, min(size+int64(c>>1%8192)-4096, r.cfg.MaxFileBytes))
		}
		err = r.truncate(n)
	case OpFallocate, OpKeepSize, OpPunchHole, OpZeroRange:
		err = r.fallocate(kind, a, min(b, r.cfg.MaxFileBytes-a))
	case OpMapRead:
		err = r.mapread(a, b)
	case OpFsync:
		r.record("fsync")
		err = r.f.Sync()
	case OpFdatasync:
		r.record("fdatasync")
		err = unix.Fdatasync(int(r.f.Fd()))
	case OpReopen:
		r.record("close and reopen")
		if err = r.f.Close(); err == nil {
			r.f, err = os.OpenFile(r.path, os.O_RDWR, 0)
			if err == nil {
				err = r.checkSize("after reopen")
			}
		}
	}
	if err != nil {
		var m *MismatchError
		if errors.As(err, &m) {
			return err
		}
		return r.wrap(fmt.Errorf("%s: %w", kind, err))
	}
	if !r.disabled[kind] {
		r.stats.ByKind[kind]++
	}
	return nil
}

// fill makes the data of a write: never zero, so it cannot pass for a
// hole, and different per operation and offset, so misplaced data shows.
// Byte i of a write is 1 + (op*131 + off + i) mod 255.
func fill(buf []byte, op int, off int64) {
	start := int((uint64(op)*131 + uint64(off)) % 255)
	for i := 0; i < len(buf); {
		i += copy(buf[i:], cycle[start:])
		start = 0
	}
}

// cycle is the bytes 1..255 repeated, for fill.
var cycle = func() []byte {
	c := make([]byte, 255*64)
	for i := range c {
		c[i] = byte(1 + i%255)
	}
	return c
}()

func (r *runner) write(off, n int64) error {
	buf := r.buf[:n]
	fill(buf, r.op, off)
	r.record(fmt.Sprintf("write %#x..%#x (%d bytes)", off, off+n, n))
	if _, err := r.f.WriteAt(buf, off); err != nil {
		return err
	}
	if end := off + n; end > int64(len(r.model)) {
		r.model = growTo(r.model, end)
	}
	copy(r.model[off:], buf)
	r.stats.BytesWritten += n
	return nil
}

func growTo(m []byte, n int64) []byte {
	if n <= int64(len(m)) {
		return m[:n]
	}
	old := len(m)
	m = slices.Grow(m, int(n)-old)[:n]
	clear(m[old:])
	return m
}

func (r *runner) read(off, n int64) error {
	r.record(fmt.Sprintf("read %#x..%#x (%d bytes)", off, off+n, n))
	buf := r.buf[:n]
	got, err := r.f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	r.stats.BytesRead += int64(got)
	if r.cfg.readHook != nil {
		r.cfg.readHook(r.op, off, buf[:got])
	}
	return r.compare("read", off, buf[:got], r.modelRange(off, n))
}

func (r *runner) modelRange(off, n int64) []byte {
	size := int64(len(r.model))
	if off >= size {
		return nil
	}
	return r.model[off:min(off+n, size)]
}

// compare reports the first difference between got (from the file at off)
// and want (from the model).
func (r *runner) compare(what string, off int64, got, want []byte) error {
	if bytes.Equal(got, want) {
		return nil
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	return &MismatchError{
		Seed:       r.cfg.Seed,
		Op:         r.op,
		What:       fmt.Sprintf("%s %#x..%#x", what, off, off+int64(len(want))),
		Offset:     off + int64(i),
		Expected:   slices.Clone(want[i:min(i+32, len(want))]),
		Actual:     slices.Clone(got[i:min(i+32, len(got))]),
		FileSize:   int64(len(r.model)),
		ActualSize: int64(len(r.model)),
		Recent:     slices.Clone(r.recent),
	}
}

func (r *runner) truncate(n int64) error {
	r.record(fmt.Sprintf("truncate to %#x (%d)", n, n))
	if err := r.f.Truncate(n); err != nil {
		return err
	}
	r.model = growTo(r.model, n)
	return r.checkSize("after truncate")
}

func unsupported(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.ENOSYS)
}

func (r *runner) fallocate(kind string, off, n int64) error {
	var mode uint32
	switch kind {
	case OpKeepSize:
		mode = unix.FALLOC_FL_KEEP_SIZE
	case OpPunchHole:
		mode = unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE
	case OpZeroRange:
		mode = unix.FALLOC_FL_ZERO_RANGE
	}
	size := int64(len(r.model))
	if kind == OpPunchHole && size > 0 {
		off %= size // holes are only interesting inside the file
		n = min(n, size-off)
	}
	r.record(fmt.Sprintf("%s %#x..%#x (%d bytes)", kind, off, off+n, n))
	err := unix.Fallocate(int(r.f.Fd()), mode, off, n)
	if unsupported(err) {
		r.disabled[kind] = true
		r.stats.Skipped[kind]++
		r.logf("  %s not supported (%v): disabled", kind, err)
		return nil
	}
	if err != nil {
		return err
	}
	end := off + n
	switch kind {
	case OpFallocate, OpZeroRange:
		if end > size {
			r.model = growTo(r.model, end)
		}
	}
	switch kind {
	case OpPunchHole, OpZeroRange:
		clear(r.model[min(off, int64(len(r.model))):min(end, int64(len(r.model)))])
	}
	return r.checkSize("after " + kind)
}

func (r *runner) mapread(off, n int64) error {
	size := int64(len(r.model))
	if size == 0 {
		r.record("mapread of an empty file: nothing to map")
		return nil
	}
	off %= size
	n = min(n, size-off)
	r.record(fmt.Sprintf("mapread %#x..%#x (%d bytes)", off, off+n, n))
	page := int64(os.Getpagesize())
	base := off / page * page
	m, err := unix.Mmap(int(r.f.Fd()), base, int(off+n-base), unix.PROT_READ, unix.MAP_SHARED)
	if unsupported(err) || errors.Is(err, unix.ENODEV) {
		r.disabled[OpMapRead] = true
		r.stats.Skipped[OpMapRead]++
		r.logf("  mmap not supported (%v): disabled", err)
		return nil
	}
	if err != nil {
		return err
	}
	got := slices.Clone(m[off-base:])
	if err := unix.Munmap(m); err != nil {
		return err
	}
	r.stats.BytesRead += n
	if r.cfg.readHook != nil {
		r.cfg.readHook(r.op, off, got)
	}
	return r.compare("mapread", off, got, r.modelRange(off, n))
}

func (r *runner) checkSize(when string) error {
	fi, err := r.f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != int64(len(r.model)) {
		return &MismatchError{
			Seed: r.cfg.Seed, Op: r.op, What: "stat " + when,
			Offset: min(fi.Size(), int64(len(r.model))), FileSize: int64(len(r.model)), ActualSize: fi.Size(),
			Recent: slices.Clone(r.recent),
		}
	}
	return nil
}

// checkWhole compares the whole file with the model through a fresh
// descriptor.
func (r *runner) checkWhole() error {
	r.stats.WholeChecks++
	r.stats.ByKind[OpCheckWhole]++
	r.record("check whole file")
	if err := r.checkSize("at whole-file check"); err != nil {
		var m *MismatchError
		if errors.As(err, &m) {
			return err
		}
		return r.wrap(err)
	}
	f, err := os.Open(r.path)
	if err != nil {
		return r.wrap(err)
	}
	defer f.Close()
	got, err := io.ReadAll(f)
	if err != nil {
		return r.wrap(err)
	}
	r.stats.BytesRead += int64(len(got))
	if r.cfg.readHook != nil {
		r.cfg.readHook(r.op, 0, got)
	}
	if int64(len(got)) != int64(len(r.model)) {
		return &MismatchError{
			Seed: r.cfg.Seed, Op: r.op, What: "whole-file read",
			Offset: min(int64(len(got)), int64(len(r.model))), FileSize: int64(len(r.model)), ActualSize: int64(len(got)),
			Recent: slices.Clone(r.recent),
		}
	}
	return r.compare("whole-file check", 0, got, r.model)
}
