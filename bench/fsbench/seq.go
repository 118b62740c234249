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

// writeSeq writes size bytes of p to f from offset 0 in chunk-byte writes.
func (r *runner) writeSeq(f *os.File, p pattern, size int64, chunk int, what string) error {
	buf := make([]byte, chunk)
	for off := int64(0); off < size; off += int64(chunk) {
		if off/int64(chunk)%ctxEvery == 0 && r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		b := buf[:min(int64(chunk), size-off)]
		p.next(b, off)
		if _, err := f.Write(b); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

// sequential: write cfg.SeqSize bytes and fsync, then read them back.
func (r *runner) sequential(work string) error {
	cfg := r.cfg
	path := filepath.Join(work, "seq.dat")
	p := newPattern(rand.New(rand.NewPCG(cfg.Seed, 2)), cfg.SeqIO)
	r.logf("seq: write %d MiB in %d KiB writes, fsync, read back", cfg.SeqSize>>20, cfg.SeqIO>>10)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("seq_write_fsync: %w", err)
	}
	defer f.Close()
	start := time.Now()
	if err := r.writeSeq(f, p, cfg.SeqSize, cfg.SeqIO, "seq_write_fsync"); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("seq_write_fsync: %w", err)
	}
	r.add("seq_write_fsync", rate(float64(cfg.SeqSize)/(1<<20), time.Since(start)), "MiB/s")
	r.drop(f)
	if err := f.Close(); err != nil {
		return fmt.Errorf("seq_write_fsync: %w", err)
	}

	if f, err = os.Open(path); err != nil {
		return fmt.Errorf("seq_read: %w", err)
	}
	defer f.Close()
	r.drop(f)
	want := make([]byte, cfg.SeqIO)
	got := make([]byte, cfg.SeqIO)
	start = time.Now()
	for off := int64(0); off < cfg.SeqSize; off += int64(cfg.SeqIO) {
		if off/int64(cfg.SeqIO)%ctxEvery == 0 && r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		n := min(int64(cfg.SeqIO), cfg.SeqSize-off)
		if _, err := io.ReadFull(f, got[:n]); err != nil {
			return fmt.Errorf("seq_read: %s at offset %d: %w", path, off, err)
		}
		p.next(want[:n], off)
		if !bytes.Equal(got[:n], want[:n]) {
			return fmt.Errorf("seq_read: %s: the %d bytes at offset %d differ from what was written", path, n, off)
		}
	}
	el := time.Since(start)
	if n, err := f.Read(got[:1]); n != 0 || err != io.EOF {
		return fmt.Errorf("seq_read: %s: longer than the %d bytes written", path, cfg.SeqSize)
	}
	r.add("seq_read", rate(float64(cfg.SeqSize)/(1<<20), el), "MiB/s")
	return nil
}

// random: RandOps 4 KiB reads at distinct random pages of a RandSize file,
// then RandOps 4 KiB writes and an fsync, then (RandQD > 0) the mixed
// reads and writes of randMixed on the same file.
func (r *runner) random(work string) error {
	cfg := r.cfg
	rng := rand.New(rand.NewPCG(cfg.Seed, 3))
	pages := cfg.RandSize / PageSize
	path := filepath.Join(work, "rand.dat")
	p := newPattern(rng, 1<<20)
	r.logf("rand: write a %d MiB file, then %d random 4 KiB reads and %d writes (at most %v each)",
		pages*PageSize>>20, cfg.RandOps, cfg.RandOps, cfg.RandTime)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("rand: %w", err)
	}
	defer f.Close()
	if err := r.writeSeq(f, p, pages*PageSize, 1<<20, "rand: fill"); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("rand: fill: %w", err)
	}
	if err := adviseRandom(f); err != nil {
		r.logf("fadvise random: %v", err)
	}
	r.drop(f)

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
		if _, err := f.ReadAt(buf, off); err != nil {
			return fmt.Errorf("rand_read_4k: %s at offset %d: %w", path, off, err)
		}
		p.fill(want, off)
		if !bytes.Equal(buf, want) {
			return fmt.Errorf("rand_read_4k: %s: the page at offset %d differs from what was written", path, off)
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
		if _, err := f.WriteAt(buf, off); err != nil {
			return fmt.Errorf("rand_write_4k: %s at offset %d: %w", path, off, err)
		}
		ops++
	}
	if err := r.ctx.Err(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("rand_write_4k: %w", err)
	}
	r.add("rand_write_4k", rate(float64(ops), time.Since(start)), "IOPS")

	// Check (untimed) a sample of the pages written.
	r.drop(f)
	for _, pg := range written[:min(ops, 256)] {
		off := pg * PageSize
		if _, err := f.ReadAt(buf, off); err != nil {
			return fmt.Errorf("rand_write_4k: check: %s at offset %d: %w", path, off, err)
		}
		if p2.fill(want, off); !bytes.Equal(buf, want) {
			return fmt.Errorf("rand_write_4k: check: %s: the page at offset %d is not what was written", path, off)
		}
	}
	if cfg.RandQD == 0 {
		return nil
	}
	return r.randMixed(f, p, written[:ops])
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
