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

// ctxEvery is how many operations pass between context checks.
const ctxEvery = 64

// smallFiles: create, stat, readdir, read, delete cfg.Files files of
// cfg.FileSize bytes in cfg.Dirs directories.
func (r *runner) smallFiles(work string) error {
	cfg := r.cfg
	n := cfg.Files
	dirs := make([]string, cfg.Dirs)
	for i := range dirs {
		dirs[i] = filepath.Join(work, fmt.Sprintf("d%03d", i))
		if err := os.Mkdir(dirs[i], 0o755); err != nil {
			return fmt.Errorf("files_create: %w", err)
		}
	}
	paths := make([]string, n)
	for i := range paths {
		paths[i] = filepath.Join(dirs[i%len(dirs)], fmt.Sprintf("f%07d", i))
	}
	base := randomBytes(rand.New(rand.NewPCG(r.cfg.Seed, 1)), cfg.FileSize)
	// content of file i: base with i in its first 8 bytes.
	content := func(buf []byte, i int) []byte {
		buf = append(buf[:0], base...)
		if len(buf) >= 8 {
			binary.LittleEndian.PutUint64(buf, uint64(i))
		}
		return buf
	}
	buf := make([]byte, 0, cfg.FileSize)

	r.logf("files: create %d files of %d bytes in %d directories", n, cfg.FileSize, cfg.Dirs)
	start := time.Now()
	for i, p := range paths {
		if i%ctxEvery == 0 && r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		buf = content(buf, i)
		if err := writeNew(p, buf, 0o644); err != nil {
			return fmt.Errorf("files_create: %w", err)
		}
	}
	r.add("files_create", rate(float64(n), time.Since(start)), "files/s")

	start = time.Now()
	for i, p := range paths {
		if i%ctxEvery == 0 && r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		st, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("files_stat: %w", err)
		}
		if !st.Mode().IsRegular() || st.Size() != int64(cfg.FileSize) {
			return fmt.Errorf("files_stat: %s: %v of %d bytes, want a regular file of %d", p, st.Mode().Type(), st.Size(), cfg.FileSize)
		}
	}
	r.add("files_stat", rate(float64(n), time.Since(start)), "files/s")

	// Listed twice: the second listing is what a directory listed again
	// costs (ls, a build's globs), where the kernel may keep the listing.
	for _, name := range []string{"files_readdir", "files_relist"} {
		start = time.Now()
		entries, err := listAll(dirs, n)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		r.add(name, rate(float64(entries), time.Since(start)), "entries/s")
	}

	// Evict the files' data (untimed) so that reading measures the file
	// system: write back everything, then drop each file's pages.
	if err := syncFS(work); err != nil {
		r.logf("syncfs: %v", err)
	}
	for i, p := range paths {
		if i%ctxEvery == 0 && r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("files_read: %w", err)
		}
		r.drop(fileTarget(f))
		f.Close()
	}
	// Read cold, then again with nothing dropped: what a file read again
	// costs (a header included twice), where the kernel may keep its pages.
	rbuf := make([]byte, cfg.FileSize+1)
	for _, name := range []string{"files_read", "files_reread"} {
		start = time.Now()
		for i, p := range paths {
			if i%ctxEvery == 0 && r.ctx.Err() != nil {
				return r.ctx.Err()
			}
			got, err := readSmall(p, rbuf)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if buf = content(buf, i); !bytes.Equal(got, buf) {
				return fmt.Errorf("%s: %s: content differs from what was written (%d bytes read, %d written)", name, p, len(got), len(buf))
			}
		}
		r.add(name, rate(float64(n), time.Since(start)), "files/s")
	}

	start = time.Now()
	for i, p := range paths {
		if i%ctxEvery == 0 && r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("files_delete: %w", err)
		}
	}
	r.add("files_delete", rate(float64(n), time.Since(start)), "files/s")
	return nil
}

// listAll lists every directory of dirs, which hold n files dealt out in
// turn, checks the count of each, and returns the entries seen.
func listAll(dirs []string, n int) (int, error) {
	entries := 0
	for i, d := range dirs {
		f, err := os.Open(d)
		if err != nil {
			return 0, err
		}
		names, err := f.Readdirnames(-1)
		f.Close()
		if err != nil {
			return 0, err
		}
		if want := (n - i + len(dirs) - 1) / len(dirs); len(names) != want {
			return 0, fmt.Errorf("%s: %d entries, want %d", d, len(names), want)
		}
		entries += len(names)
	}
	return entries, nil
}

// mkdirs: make cfg.Mkdirs directories in one directory, then remove them.
func (r *runner) mkdirs(work string) error {
	n := r.cfg.Mkdirs
	r.logf("mkdir: make and remove %d directories", n)
	paths := make([]string, n)
	for i := range paths {
		paths[i] = filepath.Join(work, fmt.Sprintf("dir%07d", i))
	}
	start := time.Now()
	for i, p := range paths {
		if i%ctxEvery == 0 && r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		if err := os.Mkdir(p, 0o755); err != nil {
			return fmt.Errorf("mkdir_rmdir: %w", err)
		}
	}
	for i, p := range paths {
		if i%ctxEvery == 0 && r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		if err := rmdir(p); err != nil {
			return fmt.Errorf("mkdir_rmdir: %w", err)
		}
	}
	r.add("mkdir_rmdir", rate(float64(n), time.Since(start)), "dirs/s")
	return nil
}

// writeNew creates path (which must not exist) holding data.
func writeNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readSmall reads the whole of a file that fits in buf (one byte more than
// expected, to notice a longer file) with one open and few reads.
func readSmall(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n := 0
	for n < len(buf) {
		m, err := f.Read(buf[n:])
		n += m
		if err == io.EOF || m == 0 {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	return buf[:n], nil
}

// randomBytes returns n pseudo-random bytes from rng.
func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, (n+7)&^7)
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
	}
	return b[:n]
}
