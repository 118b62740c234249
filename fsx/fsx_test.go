package fsx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunLocal(t *testing.T) {
	ops := 100000
	if testing.Short() {
		ops = 20000
	}
	st, err := Run(context.Background(), filepath.Join(t.TempDir(), "fsx.dat"), Config{
		Ops: ops, Seed: 1, MaxFileBytes: 256 << 10, MaxOpBytes: 16 << 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", st)
	if st.Ops != ops {
		t.Errorf("Ops = %d, want %d", st.Ops, ops)
	}
	for _, k := range []string{OpWrite, OpRead, OpTruncate, OpFsync, OpReopen, OpMapRead, OpFallocate, OpPunchHole} {
		if st.ByKind[k] == 0 {
			t.Errorf("no %s operations performed (skipped %d)", k, st.Skipped[k])
		}
	}
	if st.WholeChecks != ops/1000+1 {
		t.Errorf("WholeChecks = %d, want %d", st.WholeChecks, ops/1000+1)
	}
}

// TestRunTmpfs: tmpfs lacks ZERO_RANGE; the run must turn it off and pass.
func TestRunTmpfs(t *testing.T) {
	dir, err := os.MkdirTemp("/dev/shm", "fsx-")
	if err != nil {
		t.Skip("no /dev/shm")
	}
	defer os.RemoveAll(dir)
	st, err := Run(context.Background(), filepath.Join(dir, "f"), Config{Ops: 20000, Seed: 7, MaxFileBytes: 256 << 10, MaxOpBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", st)
}

func TestSameSeedSameOps(t *testing.T) {
	run := func(seed uint64) string {
		var log bytes.Buffer
		_, err := Run(context.Background(), filepath.Join(t.TempDir(), "f"), Config{Ops: 2000, Seed: seed, MaxFileBytes: 64 << 10, Log: &log})
		if err != nil {
			t.Fatal(err)
		}
		return log.String()
	}
	a, b, c := run(42), run(42), run(43)
	if a != b {
		t.Error("two runs with seed 42 logged different operations")
	}
	if a == c {
		t.Error("seeds 42 and 43 logged the same operations")
	}
	// Disabling a kind does not change the others.
	var log bytes.Buffer
	if _, err := Run(context.Background(), filepath.Join(t.TempDir(), "f"), Config{Ops: 2000, Seed: 42, MaxFileBytes: 64 << 10, Log: &log, Disable: []string{OpFsync}}); err != nil {
		t.Fatal(err)
	}
	d := strings.ReplaceAll(log.String(), "skip fsync", "fsync")
	if d != strings.Replace(a, "disable []", "disable [fsync]", 1) {
		t.Error("disabling fsync changed the other operations")
	}
}

// TestDetectsChangeBehindItsBack: a byte flipped in the file outside fsx
// must surface as a mismatch naming the seed, the op and the offset.
func TestDetectsChangeBehindItsBack(t *testing.T) {
	const ops = 3000
	var flipped int64 = -1
	cfg := Config{Ops: ops, Seed: 99, MaxFileBytes: 128 << 10, CheckEvery: -1,
		AfterOp: func(op int, path string) error {
			if op != ops-1 {
				return nil
			}
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			fi, _ := f.Stat()
			if fi.Size() == 0 {
				return fmt.Errorf("empty file at the last op")
			}
			flipped = fi.Size() / 2
			b := make([]byte, 1)
			f.ReadAt(b, flipped)
			b[0] ^= 0x40
			_, err = f.WriteAt(b, flipped)
			return err
		}}
	_, err := Run(context.Background(), filepath.Join(t.TempDir(), "f"), cfg)
	var m *MismatchError
	if !errors.As(err, &m) {
		t.Fatalf("want a *MismatchError, got %v", err)
	}
	t.Logf("%v", err)
	if m.Offset != flipped || m.Op != ops || m.Seed != 99 || len(m.Recent) != 20 {
		t.Errorf("mismatch at offset %d op %d seed %d with %d recent ops; want offset %d op %d seed 99 and 20 recent", m.Offset, m.Op, m.Seed, len(m.Recent), flipped, ops)
	}
	if len(m.Expected) == 0 || len(m.Actual) == 0 || m.Expected[0]^m.Actual[0] != 0x40 {
		t.Errorf("expected/actual bytes % x / % x", m.Expected, m.Actual)
	}
	for _, s := range []string{"seed 99", fmt.Sprintf("op #%d", ops), fmt.Sprintf("offset %d", flipped), "expected", "actual", "last 20 operations"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error message lacks %q", s)
		}
	}
}

// TestDetectsCorruptRead: a read path that corrupts one byte is caught by
// the first read that returns data.
func TestDetectsCorruptRead(t *testing.T) {
	corrupted := -1
	cfg := Config{Ops: 5000, Seed: 5, MaxFileBytes: 64 << 10,
		readHook: func(op int, off int64, buf []byte) {
			if op >= 100 && corrupted < 0 && len(buf) > 10 {
				buf[7]++
				corrupted = op
			}
		}}
	_, err := Run(context.Background(), filepath.Join(t.TempDir(), "f"), cfg)
	var m *MismatchError
	if !errors.As(err, &m) {
		t.Fatalf("want a *MismatchError, got %v", err)
	}
	t.Logf("%v", err)
	if m.Op != corrupted || m.Actual[0] != m.Expected[0]+1 {
		t.Errorf("mismatch at op %d (% x vs % x), corrupted op %d", m.Op, m.Actual, m.Expected, corrupted)
	}
}

// TestDetectsSizeChange: the model notices a size change behind its back.
func TestDetectsSizeChange(t *testing.T) {
	cfg := Config{Ops: 500, Seed: 3, MaxFileBytes: 64 << 10,
		AfterOp: func(op int, path string) error {
			if op == 250 {
				return os.Truncate(path, 64<<10+1)
			}
			return nil
		}}
	_, err := Run(context.Background(), filepath.Join(t.TempDir(), "f"), cfg)
	var m *MismatchError
	if !errors.As(err, &m) || m.ActualSize != 64<<10+1 || !strings.Contains(err.Error(), "seed 3") {
		t.Fatalf("want a size mismatch naming the seed, got %v", err)
	}
	t.Logf("%v", err)
}

func TestCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, filepath.Join(t.TempDir(), "f"), Config{Ops: 10})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
}

func TestUnknownDisable(t *testing.T) {
	if _, err := Run(context.Background(), filepath.Join(t.TempDir(), "f"), Config{Ops: 10, Disable: []string{"bogus"}}); err == nil {
		t.Fatal("want an error for an unknown kind")
	}
}
