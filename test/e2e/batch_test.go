package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumeria-fs/plumeria/volume"
)

// TestWriteBatches: small writes that reach a placement group while its
// last request is under way go together in its next one (volume/batch.go,
// Brick.WriteV), and each still lands exactly: whole blocks, pieces of
// blocks merged with what is stored, two halves of one block written at
// once (one request may carry both: the brick merges the second into the
// first's put), and writes that cross chunks. Fails if the client never
// gathers (the pieces-per-request histogram stays at 1) or any byte is off.
func TestWriteBatches(t *testing.T) {
	c := startCluster(t, 1, 3)
	c.createVolume("batch", 3, "--chunk-size", "64KiB")
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v, err := volume.Open(ctx, c.client(), "batch", volume.Options{Writer: "batch-test", Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()

	const block = 4096
	type w struct {
		off  uint64
		data []byte
	}
	var writes []w
	pattern := func(n, tag int) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(tag*131 + i*7 + 1)
		}
		return p
	}
	// The first 4 MiB: 64 chunks of 64 KiB over the volume's PGs.
	for i := range 256 { // whole blocks, every fourth block
		writes = append(writes, w{uint64(i*4) * block, pattern(block, i)})
	}
	for i := range 128 { // two halves of one block each
		b := uint64(i*4+1) * block
		writes = append(writes, w{b, pattern(block/2, 1000+i)}, w{b + block/2, pattern(block/2, 2000+i)})
	}
	for i := range 128 { // 100 bytes inside a block
		writes = append(writes, w{uint64(i*4+2)*block + 1000, pattern(100, 3000+i)})
	}
	for i := range 8 { // across a chunk boundary, past the others
		writes = append(writes, w{uint64(i+5)*(1<<20) - 3000, pattern(7000, 4000+i)})
	}
	want := make([]byte, 16<<20)
	for _, x := range writes {
		copy(want[x.off:], x.data)
	}

	var wg sync.WaitGroup
	errs := make(chan error, len(writes))
	start := make(chan struct{})
	for _, x := range writes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := v.WriteAt(ctx, x.data, x.off); err != nil {
				errs <- fmt.Errorf("write %d bytes at %d: %w", len(x.data), x.off, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	got := make([]byte, len(want))
	if err := v.ReadAt(ctx, got, 0); err != nil {
		t.Fatal(err)
	}
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("volume differs from the writes: %s", describeDiff(got, want, i))
	}

	pieces, requests := batchHistogram(t, reg)
	t.Logf("%d write pieces in %d requests", pieces, requests)
	if pieces <= requests {
		t.Fatalf("%d pieces in %d requests: no request carried more than one write", pieces, requests)
	}
}

// batchHistogram returns the sum and count of the client's
// pieces-per-request histogram.
func batchHistogram(t *testing.T, reg *prometheus.Registry) (sum, count uint64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "plumeria_vdisk_write_batch_pieces" {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += uint64(m.GetHistogram().GetSampleSum())
			count += m.GetHistogram().GetSampleCount()
		}
	}
	if count == 0 {
		t.Fatal("no plumeria_vdisk_write_batch_pieces samples")
	}
	return sum, count
}
