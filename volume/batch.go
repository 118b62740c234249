package volume

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// Group commit of writes at the client. The pieces of plain (unversioned)
// writes queue per placement group; while limits.ClientPGWritesInflight
// requests of a PG are under way, the pieces that arrive meanwhile are
// gathered, and the next request (Brick.WriteV) carries them all: one
// admission at the primary, one store batch per member, one replication
// round trip, instead of one each. A write that finds its PG idle is sent
// at once, so gathering adds no latency; under load it turns thousands of
// small random writes per second into a few requests per PG.
//
// Each WriteAt still returns only when every replica has its own bytes
// durable (its batch succeeded). The pieces of one request apply in the
// order they were queued (the brick merges a later piece over an earlier
// one), and with one request per PG under way the requests do too; still,
// callers that need an order between overlapping writes wait for the
// first to return, as before (filesys/data.go does).
//
// Memory: a queue holds only pieces of WriteAt calls that are waiting for
// them (the callers' own buffers, not copies); a request carries at most
// limits.ClientWriteBatchBytes (or one larger piece alone) and
// limits.ClientWriteBatchExtents pieces.

// pgQueue is the write queue of one PG (and reserved flag).
type pgQueue struct {
	mu       sync.Mutex
	inflight int
	queue    []*queued
}

type pgQueueKey struct {
	pg       uint32
	reserved bool
}

// queued is one piece waiting for its request.
type queued struct {
	off  uint64
	buf  []byte
	f    uint32          // its file version (0: none); pieces of several may share a request
	ctx  context.Context // the caller's: a request is abandoned only when every caller in it is
	done chan error      // buffered; receives the request's outcome once
	sent bool            // taken into a request (under the queue's mu)
}

func (v *Volume) pgQueue(k pgQueueKey) *pgQueue {
	v.queues.Lock()
	defer v.queues.Unlock()
	q := v.queues.m[k]
	if q == nil {
		q = &pgQueue{}
		v.queues.m[k] = q
	}
	return q
}

// writeQueued writes p at off, as file version f, through the PGs' queues
// and waits for every piece. If ctx ends first, pieces not yet sent are withdrawn; pieces
// under way are waited for (the request still reads the caller's bytes),
// and a request whose callers have all gone is cancelled.
func (v *Volume) writeQueued(ctx context.Context, vol *clustermap.Volume, p []byte, off uint64, f uint32) error {
	reserved := isReserved(ctx)
	pieces := split(off, p, uint64(vol.ChunkBytes))
	qs := make([]*pgQueue, len(pieces))
	items := make([]*queued, len(pieces))
	for i, pc := range pieces {
		k := pgQueueKey{pg: uint32(vol.PGOf(pc.off)), reserved: reserved}
		qs[i] = v.pgQueue(k)
		items[i] = &queued{off: pc.off, buf: pc.buf, f: f, ctx: ctx, done: make(chan error, 1)}
		v.enqueue(qs[i], k, items[i])
	}
	var first error
	for i, it := range items {
		var err error
		select {
		case err = <-it.done:
		case <-ctx.Done():
			if qs[i].withdraw(it) {
				err = ctx.Err()
			} else {
				err = <-it.done
			}
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// enqueue queues it and starts a request if fewer than the limit are under
// way for the PG.
func (v *Volume) enqueue(q *pgQueue, k pgQueueKey, it *queued) {
	q.mu.Lock()
	q.queue = append(q.queue, it)
	if q.inflight >= limits.ClientPGWritesInflight {
		q.mu.Unlock()
		return
	}
	q.inflight++
	batch := q.takeLocked()
	q.mu.Unlock()
	go v.sendLoop(q, k, batch)
}

// withdraw removes it from the queue if it was not sent yet.
func (q *pgQueue) withdraw(it *queued) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if it.sent {
		return false
	}
	for i, o := range q.queue {
		if o == it {
			q.queue = append(q.queue[:i], q.queue[i+1:]...)
			return true
		}
	}
	return false
}

// takeLocked takes the next request's pieces off the queue, in order.
func (q *pgQueue) takeLocked() []*queued {
	n, bytes := 0, 0
	for n < len(q.queue) && n < limits.ClientWriteBatchExtents {
		if n > 0 && bytes+len(q.queue[n].buf) > limits.ClientWriteBatchBytes {
			break
		}
		bytes += len(q.queue[n].buf)
		n++
	}
	batch := make([]*queued, n)
	copy(batch, q.queue[:n])
	for _, it := range batch {
		it.sent = true
	}
	q.queue = append(q.queue[:0], q.queue[n:]...)
	if len(q.queue) == 0 {
		q.queue = nil // do not keep a large backing array
	}
	return batch
}

// sendLoop sends batch, then the pieces queued meanwhile, until the queue
// is empty.
func (v *Volume) sendLoop(q *pgQueue, k pgQueueKey, batch []*queued) {
	for len(batch) > 0 {
		err := v.sendBatch(k, batch)
		for _, it := range batch {
			it.done <- err
		}
		q.mu.Lock()
		batch = q.takeLocked()
		if len(batch) == 0 {
			q.inflight--
		}
		q.mu.Unlock()
	}
}

// sendBatch writes the pieces of one PG as one request, with retries. Its
// context ends when every caller's has.
func (v *Volume) sendBatch(k pgQueueKey, batch []*queued) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var gone atomic.Int64
	for _, it := range batch {
		stop := context.AfterFunc(it.ctx, func() {
			if gone.Add(1) == int64(len(batch)) {
				cancel()
			}
		})
		defer stop()
	}
	v.stats.batchExtents.Observe(float64(len(batch)))
	exts := make([]*pb.Extent, len(batch))
	for i, it := range batch {
		exts[i] = &pb.Extent{Offset: it.off, Data: it.buf, FileVersion: it.f}
	}
	return v.retry(ctx, func(ctx context.Context, m *clustermap.Map, vol *clustermap.Volume) error {
		cl, err := v.brick(m, vol.PGs[k.pg].Primary())
		if err != nil {
			return err
		}
		_, err = cl.WriteV(ctx, &pb.WriteVRequest{MapEpoch: m.Epoch, Vol: vol.ID, Pg: k.pg, Extents: exts, Writer: v.writer, Reserved: k.reserved})
		return err
	})
}
