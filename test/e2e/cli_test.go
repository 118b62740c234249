package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/coord"
	"github.com/plumeria-fs/plumeria/volume"
)

// TestBadInput: operator mistakes get one clear line on stderr and a
// non-zero exit, promptly, and change nothing.
func TestBadInput(t *testing.T) {
	c := startCluster(t, 1, 3)
	c.createVolume("vol", 3)
	co := c.coordArg()
	missing := filepath.Join(t.TempDir(), "no-such-file")
	deadCoord := "--coord=" + deadAddr(t) // nothing answers there

	cases := []struct {
		name    string
		stdin   []byte
		args    []string
		want    []string // substrings of stderr
		timeout time.Duration
	}{
		{name: "read unknown volume", args: []string{"vdisk", "read", co, "--volume", "nope", "--offset", "0", "--length", "10"}, want: []string{"nope", "no such volume"}},
		{name: "write unknown volume", stdin: []byte("x"), args: []string{"vdisk", "write", co, "--volume", "nope"}, want: []string{"nope", "no such volume"}},
		{name: "read past 2^64", args: []string{"vdisk", "read", co, "--volume", "vol", "--offset", "18446744073709551615", "--length", "2"}, want: []string{"2^64"}},
		{name: "write past 2^64", stdin: []byte("ab"), args: []string{"vdisk", "write", co, "--volume", "vol", "--offset", "18446744073709551615"}, want: []string{"2^64"}},
		{name: "decommit past 2^64", args: []string{"vdisk", "decommit", co, "--volume", "vol", "--offset", "18446744073709551615", "--length", "2"}, want: []string{"2^64"}},
		{name: "offset beyond 64 bits", args: []string{"vdisk", "read", co, "--volume", "vol", "--offset", "17179869184TiB", "--length", "1"}, want: []string{"--offset", "64 bits"}},
		{name: "read without length", args: []string{"vdisk", "read", co, "--volume", "vol"}, want: []string{"--length"}},
		{name: "read without volume", args: []string{"vdisk", "read", co, "--length", "1"}, want: []string{"--volume"}},
		{name: "chunk size not a power of two", args: []string{"volume", "create", co, "v-bad1", "--chunk-size", "3000"}, want: []string{"--chunk-size", "power of two"}},
		{name: "chunk size too large", args: []string{"volume", "create", co, "v-bad2", "--chunk-size", "32MiB"}, want: []string{"--chunk-size"}},
		{name: "chunk size too small", args: []string{"volume", "create", co, "v-bad3", "--chunk-size", "1KiB"}, want: []string{"--chunk-size"}},
		{name: "chunk size not a size", args: []string{"volume", "create", co, "v-bad4", "--chunk-size", "big"}, want: []string{"--chunk-size", "not a size"}},
		{name: "replicas on too few hosts", args: []string{"volume", "create", co, "v-bad5", "--replicas", "4"}, want: []string{"--allow-same-domain"}},
		{name: "replicas above the maximum", args: []string{"volume", "create", co, "v-bad6", "--replicas", "6", "--allow-same-domain"}, want: []string{"replicas"}},
		{name: "zero replicas", args: []string{"volume", "create", co, "v-bad7", "--replicas", "0"}, want: []string{"replicas"}},
		{name: "volume exists", args: []string{"volume", "create", co, "vol", "--replicas", "3"}, want: []string{"vol", "already exists"}},
		{name: "bad volume name", args: []string{"volume", "create", co, "-x/y", "--replicas", "3"}, want: []string{"-x/y"}},
		{name: "write missing file", args: []string{"vdisk", "write", co, "--volume", "vol", "--file", missing}, want: []string{missing, "no such file"}},
		{name: "snapshot unknown volume", args: []string{"vdisk", "snapshot", co, "--volume", "nope", "--name", "s"}, want: []string{"nope"}},
		{name: "fence without writer", args: []string{"vdisk", "fence", co}, want: []string{"writer"}},
		{name: "drain unknown brick", args: []string{"brick", "drain", co, "nope"}, want: []string{"nope"}},
		{name: "remove brick in use", args: []string{"brick", "remove", co, "b1"}, want: []string{"b1", "drain"}},
		{name: "unreachable coordinator", args: []string{"status", deadCoord}, want: []string{strings.TrimPrefix(deadCoord, "--coord=")}, timeout: 30 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := c.sub(t)
			timeout := cmp(tc.timeout, cliTimeout)
			r := c.run(timeout, tc.stdin, tc.args...)
			msg := strings.TrimSpace(string(r.stderr))
			switch {
			case r.code == -1:
				t.Fatalf("did not exit within %v: `plumeria %s` (stderr so far: %q)", timeout, strings.Join(tc.args, " "), msg)
			case r.code == 0:
				t.Fatalf("exit 0, want an error: %s\nstdout: %q", r, r.stdout)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("stderr does not mention %q: %s", w, r)
				}
			}
			if strings.Count(msg, "\n") > 0 {
				t.Errorf("error is not one line: %q", msg)
			}
			if len(r.stdout) > 0 && tc.args[0] == "vdisk" {
				t.Errorf("failed command wrote %d bytes to stdout", len(r.stdout))
			}
		})
	}
	t.Cleanup(func() {
		// None of the refused creates made a volume.
		st, err := c.status()
		if err != nil {
			t.Error(err)
			return
		}
		if len(st.Volumes) != 1 || st.Volumes[0].Name != "vol" {
			var names []string
			for _, v := range st.Volumes {
				names = append(names, v.Name)
			}
			t.Errorf("volumes after refused creates: %v, want only vol", names)
		}
	})
}

func cmp(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// TestEndOfAddressSpace: the last chunk of the 2^64-byte volume is as
// usable as any other: written, read (up to its very last byte) and
// decommitted, through the API and the CLI.
func TestEndOfAddressSpace(t *testing.T) {
	_, rng := seed(t)
	c := startCluster(t, 1, 3)
	c.createVolume("vol", 3)
	v := c.open("vol", "w1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const last = ^uint64(0)
	n := uint64(256 << 10)
	off := last - n + 1
	data := make([]byte, n)
	fill(rng, data)
	if err := v.WriteAt(ctx, data, off); err != nil {
		t.Errorf("write of the last %d bytes of the volume: %v", n, err)
	}
	if err := v.WriteAt(ctx, data[:n-1], off); err != nil {
		t.Errorf("write ending one byte before 2^64: %v", err)
	}
	if err := v.WriteAt(ctx, data[:2], last); !errors.Is(err, volume.ErrRange) {
		t.Errorf("write of 2 bytes at 2^64-1: got %v, want volume.ErrRange", err)
	}
	got := make([]byte, n)
	if err := v.ReadAt(ctx, got, off); err != nil {
		t.Errorf("read of the last %d bytes: %v", n, err)
	} else if !bytes.Equal(got, data) {
		t.Errorf("last %d bytes read back wrong: %s", n, describeDiff(got, data, firstDiff(got, data)))
	}
	r := c.run(cliTimeout, nil, "vdisk", "read", c.coordArg(), "--volume", "vol", "--offset", fmt.Sprint(last), "--length", "1")
	if r.code != 0 || !bytes.Equal(r.stdout, data[n-1:]) {
		t.Errorf("CLI read of the volume's last byte: got %x, want %x; %s", r.stdout, data[n-1:], r)
	}
	r = c.run(cliTimeout, nil, "vdisk", "decommit", c.coordArg(), "--volume", "vol", "--writer", "w1",
		"--offset", fmt.Sprint(last-(64<<10)+1), "--length", fmt.Sprint(64<<10))
	if r.code != 0 {
		t.Errorf("decommit of the last chunk: %s", r)
	}
	if err := v.ReadAt(ctx, got, off); err != nil {
		t.Errorf("read after decommit: %v", err)
	} else {
		want := append(data[:n-64<<10:n-64<<10], make([]byte, 64<<10)...)
		if !bytes.Equal(got, want) {
			t.Errorf("after decommit of the last chunk: %s", describeDiff(got, want, firstDiff(got, want)))
		}
	}
}

// TestDecommitAcrossChunks: a decommit of a range over several chunks
// (each PG's brick visits only its own chunks of the range) reads back as
// zeros exactly there, partial blocks at both ends included, and leaves
// every byte around it.
func TestDecommitAcrossChunks(t *testing.T) {
	_, rng := seed(t)
	c := startCluster(t, 1, 3)
	c.createVolume("vol", 3)
	v := c.open("vol", "w1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const mib = 1 << 20
	base := uint64(37*mib + 4096) // not chunk-aligned
	data := make([]byte, 7*mib)
	fill(rng, data)
	if err := v.WriteAt(ctx, data, base); err != nil {
		t.Fatalf("write: %v", err)
	}
	from, to := uint64(mib+mib/2+100), uint64(5*mib+7) // within data
	if err := v.Decommit(ctx, base+from, to-from); err != nil {
		t.Fatalf("decommit: %v", err)
	}
	want := slices.Clone(data)
	clear(want[from:to])
	got := make([]byte, len(data))
	if err := v.ReadAt(ctx, got, base); err != nil {
		t.Fatalf("read: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("after decommit of [%d, %d): %s", from, to, describeDiff(got, want, firstDiff(got, want)))
	}
}

// TestDrain: `plumeria brick drain b4` moves every PG off b4 and exits 0;
// status then shows b4 empty and nothing degraded; `brick remove` takes it
// out of the map, and the data needs it no more.
func TestDrain(t *testing.T) {
	_, rng := seed(t)
	size := int64(32 << 20)
	if testing.Short() {
		size = 8 << 20
	}
	c := startCluster(t, 1, 4)
	c.createVolume("vol", 3)
	v := c.open("vol", "w1")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	exts := newSlots(rng).scattered(size)
	(&writer{v: v, workers: 8}).writeAll(ctx, exts)
	if res := summarise(exts); len(res.failed) > 0 {
		t.Fatalf("writes failed: %s", res)
	}
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	if b := brickOf(st, "b4"); b == nil || b.PGs == 0 {
		t.Fatalf("b4 holds no PG before the drain; nothing to test: %s", brickStates(st))
	}

	start := time.Now()
	r := c.run(3*time.Minute, nil, "brick", "drain", c.coordArg(), "b4")
	if r.code != 0 {
		t.Fatalf("drain: %s", r)
	}
	c.logf("drain returned after %v: %s", time.Since(start).Round(time.Millisecond), bytes.TrimSpace(r.stdout))
	st, err = c.status()
	if err != nil {
		t.Fatal(err)
	}
	vs := volumeOf(st, "vol")
	if b := brickOf(st, "b4"); b == nil || b.PGs != 0 || !b.Draining {
		t.Errorf("after drain, b4 should be draining with 0 PGs: %s", brickStates(st))
	}
	if vs.DegradedPGs != 0 || vs.SyncingPGs != 0 {
		t.Errorf("drain returned while the volume is not fully replicated without b4: %s", volState(st, "vol"))
	}
	c.waitHealthy("vol", chunksOf(exts, chunkBytes), 30*time.Second)
	verifyWith(t, ctx, v, "", exts, c.replicaDiag("vol"))

	c.cli("brick", "remove", c.coordArg(), "b4")
	c.waitStatus(10*time.Second, "b4 gone from the map", func(st *coord.Status) (bool, string) {
		return brickOf(st, "b4") == nil, brickStates(st)
	})
	c.kill("b4")
	// The data must not need b4; and it must survive one more loss.
	verifyWith(t, ctx, v, "", exts, c.replicaDiag("vol"))
	c.kill("b1")
	c.waitBrickState("b1", "down", brickDownAfter+20*time.Second)
	verifyWith(t, ctx, v, "", exts, c.replicaDiag("vol"))
	if err := os.RemoveAll(c.proc("b4").data); err != nil {
		t.Fatal(err)
	}
}
