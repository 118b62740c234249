package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/volume"
)

// offsetsPerPG returns, for every PG of the volume, a block-aligned offset
// below 2^50 in a chunk of that PG, in distinct slots of sl.
func offsetsPerPG(t *testing.T, v *volume.Volume, sl *slots) []uint64 {
	t.Helper()
	vol := v.Map().Volume("vol")
	out := make([]uint64, len(vol.PGs))
	found := 0
	for tries := 0; found < len(vol.PGs); tries++ {
		if tries > 1_000_000 {
			t.Fatalf("found chunks for only %d of %d PGs", found, len(vol.PGs))
		}
		base := sl.next()
		pg := clustermap.PGOfChunk(vol.ID, base/uint64(vol.ChunkBytes), len(vol.PGs))
		if out[pg] == 0 {
			out[pg] = base
			found++
		}
	}
	return out
}

// TestFencing: once `plumeria vdisk fence --writer w1` returns, the Volume
// that w1 opened before cannot write or decommit anywhere (every PG), and
// none of its refused writes lands. Then writes race a fence: no write
// issued after the fence returned may succeed or land.
func TestFencing(t *testing.T) {
	_, rng := seed(t)
	c := startCluster(t, 1, 3)
	c.createVolume("vol", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sl := newSlots(rng)

	t.Run("after fence", func(t *testing.T) {
		c := c.sub(t)
		v := c.open("vol", "w1")
		ok := sl.scattered(2 << 20)
		(&writer{v: v, workers: 4}).writeAll(ctx, ok)
		if res := summarise(ok); len(res.failed) > 0 {
			t.Fatalf("writes before the fence failed: %s", res)
		}
		out := c.cli("vdisk", "fence", c.coordArg(), "--writer", "w1")
		c.logf("fence: %s", bytes.TrimSpace(out))

		offs := offsetsPerPG(t, v, sl)
		block := make([]byte, blockBytes)
		fill(rng, block)
		for pg, off := range offs {
			start := time.Now()
			err := v.WriteAt(ctx, block[:blockBytes-100], off+50) // partial block: the primary merges
			took := time.Since(start)
			switch {
			case err == nil:
				t.Errorf("pg %d: write at %d by fenced writer w1 succeeded", pg, off+50)
			case !isFenced(err):
				t.Errorf("pg %d: write by fenced writer: got %v, want volume.ErrFenced", pg, err)
			case took > 10*time.Second:
				t.Errorf("pg %d: ErrFenced took %v; a fenced write must not be retried", pg, took)
			}
		}
		// Several chunks in one call.
		big := make([]byte, 3*chunkBytes+123)
		fill(rng, big)
		bigOff := sl.next() + 999
		if err := v.WriteAt(ctx, big, bigOff); !isFenced(err) {
			t.Errorf("multi-chunk write by fenced writer: got %v, want volume.ErrFenced", err)
		}
		if err := v.Decommit(ctx, ok[0].off, uint64(len(ok[0].data))); !isFenced(err) {
			t.Errorf("decommit by fenced writer: got %v, want volume.ErrFenced", err)
		}
		// Nothing of the refused writes landed; the decommit freed nothing.
		got := make([]byte, blockBytes)
		for pg, off := range offs {
			if err := v.ReadAt(ctx, got, off); err != nil {
				t.Fatalf("read: %v", err)
			}
			if !bytes.Equal(got, make([]byte, blockBytes)) {
				t.Errorf("pg %d: a write refused with ErrFenced landed at %d", pg, off)
			}
		}
		gotBig := make([]byte, len(big))
		if err := v.ReadAt(ctx, gotBig, bigOff); err != nil {
			t.Fatalf("read: %v", err)
		}
		if !bytes.Equal(gotBig, make([]byte, len(big))) {
			t.Errorf("part of a multi-chunk write refused with ErrFenced landed")
		}
		verify(t, ctx, v, ok)

		// A new Open as w1 takes the new epoch and may write again.
		v2 := c.open("vol", "w1")
		if err := v2.WriteAt(ctx, block, offs[0]); err != nil {
			t.Errorf("write by w1 reopened after the fence: %v", err)
		}
	})

	t.Run("fence during writes", func(t *testing.T) {
		c := c.sub(t)
		v := c.open("vol", "w2")
		var (
			mu   sync.Mutex
			exts []*extent
			wg   sync.WaitGroup
		)
		stop := make(chan struct{})
		w := &writer{v: v}
		for g := range 8 {
			var mine []*extent
			// Enough writes that some are still to be issued when the
			// fence returns, even when it takes a while on a loaded machine
			// (300 of up to 64 KiB each could all finish during the fence).
			for range 800 {
				e := &extent{off: sl.next() + uint64(g), data: make([]byte, 4096+rng.IntN(20<<10))}
				fill(rng, e.data)
				mine = append(mine, e)
			}
			mu.Lock()
			exts = append(exts, mine...)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, e := range mine {
					select {
					case <-stop:
						return
					default:
					}
					w.writeOne(ctx, e)
				}
			}()
		}
		// Fence once writes are flowing.
		deadline := time.Now().Add(30 * time.Second)
		for w.acked.Load() < 1<<20 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		fenceStart := time.Now()
		out := c.cli("vdisk", "fence", c.coordArg(), "--writer", "w2")
		fenced := time.Now()
		c.logf("fence returned after %v: %s", fenced.Sub(fenceStart).Round(time.Millisecond), bytes.TrimSpace(out))
		time.Sleep(1500 * time.Millisecond)
		close(stop)
		wg.Wait()

		w.mu.Lock()
		defer w.mu.Unlock()
		var before, inFlight, after, afterFenced int
		var bad []string
		for _, e := range exts {
			switch {
			case !e.done:
				continue
			case e.end.Before(fenceStart):
				before++
			case e.start.After(fenced):
				after++
				if isFenced(e.err) {
					afterFenced++
				} else {
					bad = append(bad, fmt.Sprintf("write %v issued %v after the fence returned ended with %v, want ErrFenced",
						e, e.start.Sub(fenced).Round(time.Millisecond), e.err))
				}
			default:
				inFlight++
			}
		}
		t.Logf("writes: %d ended before the fence, %d overlapped it, %d issued after it (%d refused with ErrFenced)", before, inFlight, after, afterFenced)
		if before == 0 || after == 0 {
			t.Errorf("the race did not happen: %d writes before the fence, %d after", before, after)
		}
		for i, b := range bad {
			if i == 10 {
				t.Errorf("... %d more", len(bad)-10)
				break
			}
			t.Error(b)
		}
		// Acknowledged writes read back; writes issued after the fence left nothing.
		var check []*extent
		for _, e := range exts {
			if e.done {
				check = append(check, e)
			}
		}
		verify(t, ctx, v, check)
		for _, e := range check {
			if !e.start.After(fenced) {
				continue
			}
			got := make([]byte, len(e.data))
			if err := v.ReadAt(ctx, got, e.off); err != nil {
				t.Fatalf("read: %v", err)
			}
			if !bytes.Equal(got, make([]byte, len(got))) {
				t.Errorf("write %v issued after the fence returned landed (err %v)", e, e.err)
			}
		}
	})
}

// TestSnapshot: snapshot s1 of pattern A; then overwrites (B) and
// decommits, snapshot s2, more overwrites (C). `vdisk read --snapshot`
// must give each snapshot's content exactly, and live reads the newest.
func TestSnapshot(t *testing.T) {
	_, rng := seed(t)
	c := startCluster(t, 1, 3)
	c.createVolume("vol", 3)
	v := c.open("vol", "w1")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Regions: one unaligned across chunks, one aligned, one high up.
	type region struct {
		lo, n uint64 // modelled bytes [lo, lo+n), including margins
		live  []byte
	}
	regions := []*region{
		{lo: 5<<30 + 1234 - 5000, n: 300<<10 + 17 + 10000},
		{lo: 1<<40 - 5000, n: 128<<10 + 10000},
		{lo: 1<<63 - 5000, n: 256<<10 + 10000},
	}
	for _, r := range regions {
		r.live = make([]byte, r.n)
	}
	apply := func(off uint64, p []byte) { // p nil: decommit len bytes
		for _, r := range regions {
			if off >= r.lo && off-r.lo < r.n {
				copy(r.live[off-r.lo:], p)
			}
		}
	}
	write := func(off uint64, n int) {
		t.Helper()
		p := make([]byte, n)
		fill(rng, p)
		if err := v.WriteAt(ctx, p, off); err != nil {
			t.Fatalf("write %d bytes at %d: %v", n, off, err)
		}
		apply(off, p)
	}
	decommit := func(off, n uint64) {
		t.Helper()
		c.cli("vdisk", "decommit", c.coordArg(), "--volume", "vol", "--writer", "w1",
			"--offset", fmt.Sprint(off), "--length", fmt.Sprint(n))
		apply(off, make([]byte, n))
	}
	snapshot := func(name string) [][]byte {
		t.Helper()
		c.cli("vdisk", "snapshot", c.coordArg(), "--volume", "vol", "--name", name)
		var out [][]byte
		for _, r := range regions {
			out = append(out, bytes.Clone(r.live))
		}
		return out
	}
	check := func(snap string, want [][]byte) {
		t.Helper()
		for i, r := range regions {
			args := []string{"vdisk", "read", c.coordArg(), "--volume", "vol", "--offset", fmt.Sprint(r.lo), "--length", fmt.Sprint(r.n)}
			what := "live volume"
			if snap != "" {
				args = append(args, "--snapshot", snap)
				what = "snapshot " + snap
			}
			got := c.cli(args...)
			if d := firstDiff(got, want[i]); len(got) != len(want[i]) || d >= 0 {
				t.Errorf("%s, region %d [%d, +%d): %d bytes, %s", what, i, r.lo, r.n, len(got), describeDiff(got, want[i], max(d, 0)))
			}
		}
	}
	r0, r1, r2 := regions[0].lo+5000, regions[1].lo+5000, regions[2].lo+5000

	// A, through the API and the CLI.
	write(r0, 300<<10+17)
	write(r1, 128<<10)
	a2 := make([]byte, 256<<10)
	fill(rng, a2)
	if r := c.run(cliTimeout, a2, "vdisk", "write", c.coordArg(), "--volume", "vol", "--writer", "w1", "--offset", fmt.Sprint(r2)); r.code != 0 {
		t.Fatalf("%s", r)
	}
	apply(r2, a2)
	s1 := snapshot("s1")

	// B: overwrite parts, then decommit across old and new data.
	write(r0+50000, 100000)
	write(r1, 128<<10)
	write(r2, 128<<10)
	decommit(r0+20000, 50000)      // unaligned both ends, over A and B
	decommit(r2+(192<<10), 64<<10) // a whole chunk
	decommit(r1+4096*3, 4096*2)    // whole blocks inside B
	s2 := snapshot("s2")

	// C.
	write(r1+777, 10000)
	write(r0, 4096)
	reader := c.open("vol", "reader") // opened before s3 exists
	live := snapshot("s3")

	check("s1", s1)
	check("s2", s2)
	check("", live)
	check("s3", live)

	// The Go API agrees with the CLI.
	got := make([]byte, regions[0].n)
	if err := v.ReadSnapshotAt(ctx, "s1", got, regions[0].lo); err != nil || !bytes.Equal(got, s1[0]) {
		t.Errorf("ReadSnapshotAt s1: err %v, equal %v", err, bytes.Equal(got, s1[0]))
	}
	if err := v.ReadSnapshotAt(ctx, "nope", got, regions[0].lo); !errors.Is(err, volume.ErrNoSnapshot) {
		t.Errorf("ReadSnapshotAt of a missing snapshot: got %v, want volume.ErrNoSnapshot", err)
	}
	// A handle opened before a snapshot was taken can read it.
	if err := reader.ReadSnapshotAt(ctx, "s3", got, regions[0].lo); err != nil || !bytes.Equal(got, live[0]) {
		t.Errorf("ReadSnapshotAt s3 through a Volume opened before s3 was taken: err %v, equal %v", err, bytes.Equal(got, live[0]))
	}
	r := c.run(cliTimeout, nil, "vdisk", "read", c.coordArg(), "--volume", "vol", "--offset", "0", "--length", "1", "--snapshot", "nope")
	if r.code == 0 || !strings.Contains(string(r.stderr), "snapshot") {
		t.Errorf("vdisk read of a missing snapshot should fail naming the snapshot: %s", r)
	}
	r = c.run(cliTimeout, nil, "vdisk", "snapshot", c.coordArg(), "--volume", "vol", "--name", "s1")
	if r.code == 0 || !strings.Contains(string(r.stderr), "already") {
		t.Errorf("a second snapshot named s1 should be refused: %s", r)
	}
}
