package fsbench

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"
)

// pattern is the content of the sequential and random I/O files: base
// repeated (from byte rot of base at offset 0), with the first 8 bytes of
// every PageSize page replaced by the page's index xor salt, so that a
// page read from the wrong place, or an old version of a page, does not
// compare equal.
type pattern struct {
	base []byte
	salt uint64
	rot  int64 // in [0, len(base))
}

func newPattern(rng *rand.Rand, n int) pattern {
	return pattern{base: randomBytes(rng, n), salt: rng.Uint64()}
}

// version returns the pattern of the pages rewritten v times: version 0
// is p itself. Each version changes every stamp (the multiplier is odd, so
// two versions of one page never share a stamp) and rotates the base by
// one more byte, so that most bytes of a page also differ from one version
// to the next and a half-written page does not compare equal either.
func (p pattern) version(v uint64) pattern {
	n := uint64(len(p.base))
	return pattern{base: p.base, salt: p.salt ^ v*0x9e37_79b9_7f4a_7c15, rot: int64((uint64(p.rot) + v%n) % n)}
}

// fill sets b to the content of the file at offset off.
func (p pattern) fill(b []byte, off int64) {
	for i := 0; i < len(b); {
		i += copy(b[i:], p.base[(off+int64(i)+p.rot)%int64(len(p.base)):])
	}
	p.stamp(b, off)
}

// stamp writes the page stamps that fall in b, which holds the file from
// offset off.
func (p pattern) stamp(b []byte, off int64) {
	var s [8]byte
	end := off + int64(len(b))
	for pg := off / PageSize * PageSize; pg < end; pg += PageSize {
		binary.LittleEndian.PutUint64(s[:], uint64(pg/PageSize)^p.salt)
		lo, hi := max(pg, off), min(pg+8, end)
		if lo < hi {
			copy(b[lo-off:hi-off], s[lo-pg:hi-pg])
		}
	}
}

// next sets buf to the content of the file at off, knowing buf held the
// content of the chunk at off-len(buf): when the base is one chunk and
// chunks keep their page alignment only the stamps change.
func (p pattern) next(buf []byte, off int64) {
	if off != 0 && len(p.base) == cap(buf) && len(p.base)%PageSize == 0 {
		p.stamp(buf, off)
		return
	}
	p.fill(buf, off)
}

// writeSeq writes size bytes of p to t from offset 0 in chunk-byte writes.
func (r *runner) writeSeq(t target, p pattern, size int64, chunk int, what string) error {
	buf := make([]byte, chunk)
	for off := int64(0); off < size; off += int64(chunk) {
		if off/int64(chunk)%ctxEvery == 0 && r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		b := buf[:min(int64(chunk), size-off)]
		p.next(b, off)
		if err := t.dev.WriteAt(r.ctx, b, uint64(off)); err != nil {
			return fmt.Errorf("%s: %s at offset %d: %w", what, t.name, off, err)
		}
	}
	return nil
}

// sequential: write cfg.SeqSize bytes to a new file and fsync, then read
// them back through a new descriptor (on a FUSE mount, an open may drop
// the kernel's cached pages of the file, as a reader's would).
func (r *runner) sequential(work string) error {
	path := filepath.Join(work, "seq.dat")
	p := r.seqPattern()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("seq_write_fsync: %w", err)
	}
	defer f.Close()
	if err := r.seqWrite(fileTarget(f), p); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("seq_write_fsync: %w", err)
	}

	if f, err = os.Open(path); err != nil {
		return fmt.Errorf("seq_read: %w", err)
	}
	defer f.Close()
	if err := r.seqRead(fileTarget(f), p); err != nil {
		return err
	}
	if n, err := f.ReadAt(make([]byte, 1), r.cfg.SeqSize); n != 0 || err != io.EOF {
		return fmt.Errorf("seq_read: %s: longer than the %d bytes written", path, r.cfg.SeqSize)
	}
	return nil
}

// seqPattern is the content of the sequential workload.
func (r *runner) seqPattern() pattern {
	return newPattern(rand.New(rand.NewPCG(r.cfg.Seed, 2)), r.cfg.SeqIO)
}

// seqWrite writes cfg.SeqSize bytes of p to t from offset 0 in cfg.SeqIO
// writes, then syncs, timed together (seq_write_fsync MiB/s).
func (r *runner) seqWrite(t target, p pattern) error {
	cfg := r.cfg
	r.logf("seq: write %d MiB in %d KiB writes, fsync, read back", cfg.SeqSize>>20, cfg.SeqIO>>10)
	start := time.Now()
	if err := r.writeSeq(t, p, cfg.SeqSize, cfg.SeqIO, "seq_write_fsync"); err != nil {
		return err
	}
	if err := t.dev.Sync(r.ctx); err != nil {
		return fmt.Errorf("seq_write_fsync: %s: %w", t.name, err)
	}
	r.add("seq_write_fsync", rate(float64(cfg.SeqSize)/(1<<20), time.Since(start)), "MiB/s")
	return nil
}

// seqRead reads back what seqWrite wrote, cold, in cfg.SeqIO reads, and
// checks every byte (seq_read MiB/s).
func (r *runner) seqRead(t target, p pattern) error {
	cfg := r.cfg
	r.drop(t)
	want := make([]byte, cfg.SeqIO)
	got := make([]byte, cfg.SeqIO)
	start := time.Now()
	for off := int64(0); off < cfg.SeqSize; off += int64(cfg.SeqIO) {
		if off/int64(cfg.SeqIO)%ctxEvery == 0 && r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		n := min(int64(cfg.SeqIO), cfg.SeqSize-off)
		if err := t.dev.ReadAt(r.ctx, got[:n], uint64(off)); err != nil {
			return fmt.Errorf("seq_read: %s at offset %d: %w", t.name, off, err)
		}
		p.next(want[:n], off)
		if !bytes.Equal(got[:n], want[:n]) {
			return fmt.Errorf("seq_read: %s: the %d bytes at offset %d differ from what was written", t.name, n, off)
		}
	}
	r.add("seq_read", rate(float64(cfg.SeqSize)/(1<<20), time.Since(start)), "MiB/s")
	return nil
}

// random: the random workloads of randomOn on a new file, with the
// kernel's read-ahead turned off for it.
func (r *runner) random(work string) error {
	path := filepath.Join(work, "rand.dat")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("rand: %w", err)
	}
	defer f.Close()
	if err := adviseRandom(f); err != nil {
		r.logf("fadvise random: %v", err)
	}
	return r.randomOn(fileTarget(f))
}

// randomOn: fill RandSize bytes of t, then RandOps 4 KiB reads at
// distinct random pages, then RandOps 4 KiB writes and a sync, then
// (RandQD > 0) the mixed reads and writes of randMixed.
func (r *runner) randomOn(t target) error {
	cfg := r.cfg
	rng := rand.New(rand.NewPCG(cfg.Seed, 3))
	pages := cfg.RandSize / PageSize
	p := newPattern(rng, 1<<20)
	r.logf("rand: write %d MiB, then %d random 4 KiB reads and %d writes (at most %v each)",
		pages*PageSize>>20, cfg.RandOps, cfg.RandOps, cfg.RandTime)
	if err := r.writeSeq(t, p, pages*PageSize, 1<<20, "rand: fill"); err != nil {
		return err
	}
	if err := t.dev.Sync(r.ctx); err != nil {
		return fmt.Errorf("rand: fill: %s: %w", t.name, err)
	}
	r.drop(t)

	// The time bound is checked every few operations.
	expired := func(i int, start time.Time) bool {
		return i%ctxEvery == 0 && (r.ctx.Err() != nil || cfg.RandTime > 0 && time.Since(start) >= cfg.RandTime)
	}
	buf := make([]byte, PageSize)
	want := make([]byte, PageSize)
	ops := 0
	start := time.Now()
	for _, pg := range pickPages(rng, pages, cfg.RandOps) {
		if expired(ops, start) {
			break
		}
		off := pg * PageSize
		if err := t.dev.ReadAt(r.ctx, buf, uint64(off)); err != nil {
			return fmt.Errorf("rand_read_4k: %s at offset %d: %w", t.name, off, err)
		}
		p.fill(want, off)
		if !bytes.Equal(buf, want) {
			return fmt.Errorf("rand_read_4k: %s: the page at offset %d differs from what was written", t.name, off)
		}
		ops++
	}
	if err := r.ctx.Err(); err != nil {
		return err
	}
	r.add("rand_read_4k", rate(float64(ops), time.Since(start)), "IOPS")

	p2 := p.version(1)
	written := pickPages(rng, pages, cfg.RandOps)
	ops = 0
	start = time.Now()
	for _, pg := range written {
		if expired(ops, start) {
			break
		}
		off := pg * PageSize
		p2.fill(buf, off)
		if err := t.dev.WriteAt(r.ctx, buf, uint64(off)); err != nil {
			return fmt.Errorf("rand_write_4k: %s at offset %d: %w", t.name, off, err)
		}
		ops++
	}
	if err := r.ctx.Err(); err != nil {
		return err
	}
	if err := t.dev.Sync(r.ctx); err != nil {
		return fmt.Errorf("rand_write_4k: %s: %w", t.name, err)
	}
	r.add("rand_write_4k", rate(float64(ops), time.Since(start)), "IOPS")

	// Check (untimed) a sample of the pages written.
	r.drop(t)
	if err := checkPages(r.ctx, t, p, written[:min(ops, 256)], func(int64) uint64 { return 1 }, "rand_write_4k: check"); err != nil {
		return err
	}
	if cfg.RandQD == 0 {
		return nil
	}
	return r.randMixed(t, p, written[:ops])
}

// pickPages returns n page indexes below pages: distinct while n <= pages
// (so that reads do not hit pages cached by earlier reads), cycling
// through further permutations beyond.
func pickPages(rng *rand.Rand, pages int64, n int) []int64 {
	out := make([]int64, 0, n)
	if pages > 1<<24 { // a permutation would be too large; repeats are unlikely
		for range n {
			out = append(out, rng.Int64N(pages))
		}
		return out
	}
	for len(out) < n {
		for _, pg := range rng.Perm(int(pages)) {
			if len(out) == n {
				break
			}
			out = append(out, int64(pg))
		}
	}
	return out
}
