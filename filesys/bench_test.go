package filesys

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys/fstest"
)

// benchFS is a formatted in-memory volume with one directory of n files,
// mounted by one node with the single-node locker: the file system's own
// cost per operation, without FUSE, the network or the lock service.
func benchFS(b *testing.B, n int) (*FS, uint64, []string) {
	b.Helper()
	ctx := context.Background()
	dev := newMemDevice()
	if _, err := Format(ctx, dev, false, time.Now()); err != nil {
		b.Fatal(err)
	}
	fs, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "bench", Session: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fs.Close(ctx) })
	d, err := fs.Mkdir(ctx, RootIno, "d", 0o755, Caller{})
	if err != nil {
		b.Fatal(err)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("file-%06d", i)
		if _, err := fs.Create(ctx, d.Ino, names[i], 0o644, Caller{}, true); err != nil {
			b.Fatal(err)
		}
	}
	return fs, d.Ino, names
}

// BenchmarkStat is what a stat(2) through FUSE asks: LOOKUP, then GETATTR.
func BenchmarkStat(b *testing.B) {
	fs, dir, names := benchFS(b, 1000)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		a, err := fs.Lookup(ctx, dir, names[i%len(names)])
		if err != nil {
			b.Fatal(err)
		}
		if _, err := fs.Getattr(ctx, a.Ino); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCreate creates empty files in one directory.
func BenchmarkCreate(b *testing.B) {
	fs, dir, _ := benchFS(b, 0)
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		if _, err := fs.Create(ctx, dir, fmt.Sprintf("new-%08d", i), 0o644, Caller{}, true); err != nil {
			b.Fatal(err)
		}
	}
}
