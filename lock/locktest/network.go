package locktest

import (
	"container/heap"
	"fmt"

	"github.com/plumeria-fs/plumeria/lock"
)

// endpoint is a server (server true) or a clerk node, by index.
type endpoint struct {
	server bool
	i      int
}

type delivery struct {
	at       int64
	seq      uint64
	from, to endpoint
	m        lock.Message
}

// network holds messages in flight and the partitions between clerk nodes
// and servers. Messages are delivered in (time, send order).
type network struct {
	q    deliveries
	seq  uint64
	cuts map[[2]int]cut // (node, server) → partition
	calm bool           // no loss, duplication or long delays
}

type deliveries []delivery

func (d deliveries) Len() int { return len(d) }
func (d deliveries) Less(i, j int) bool {
	return d[i].at < d[j].at || (d[i].at == d[j].at && d[i].seq < d[j].seq)
}
func (d deliveries) Swap(i, j int) { d[i], d[j] = d[j], d[i] }
func (d *deliveries) Push(x any)   { *d = append(*d, x.(delivery)) }
func (d *deliveries) Pop() any {
	old := *d
	x := old[len(old)-1]
	*d = old[:len(old)-1]
	return x
}

func (n *network) pop(now int64) (delivery, bool) {
	if len(n.q) == 0 || n.q[0].at > now {
		return delivery{}, false
	}
	return heap.Pop(&n.q).(delivery), true
}

// cut is a partition between a clerk node and a server until a tick, in
// both directions or in one.
type cut struct {
	until            int64
	toNode, toServer bool // which directions are cut
}

// cut reports whether a message from a to b is lost to a partition.
func (w *World) cut(a, b endpoint, now int64) bool {
	if a.server == b.server {
		return false
	}
	node, srv := a.i, b.i
	if a.server {
		node, srv = b.i, a.i
	}
	c := w.net.cuts[[2]int{node, srv}]
	return c.until > now && ((a.server && c.toNode) || (!a.server && c.toServer))
}

// post sends m, subject to faults.
func (w *World) post(from, to endpoint, m lock.Message) {
	if w.cut(from, to, w.now) {
		return
	}
	copies := 1
	if !w.net.calm {
		if w.chance(w.opts.Drop) {
			return
		}
		if w.chance(w.opts.Dup) {
			copies = 2
		}
	}
	for range copies {
		delay := w.between(1, w.opts.DelayMax)
		if !w.net.calm && w.chance(w.opts.Faults.LongDelay) {
			delay = w.between(w.opts.DelayMax, 2*w.opts.LeaseTicks)
		}
		w.net.seq++
		heap.Push(&w.net.q, delivery{at: w.now + delay, seq: w.net.seq, from: from, to: to, m: m})
	}
}

// deliver hands a message to its recipient and carries out what it produced.
func (w *World) deliver(d delivery) error {
	if w.cut(d.from, d.to, w.now) {
		return nil
	}
	if w.verbose {
		w.logf("deliver %v→%v %T%+v", d.from, d.to, d.m, d.m)
	}
	if d.to.server {
		s := w.servers[d.to.i]
		if s.s == nil {
			return nil
		}
		if err := s.s.Step(d.m); err != nil {
			return w.report(fmt.Errorf("server %d step %T: %w", s.id, d.m, err))
		}
		w.drainServer(s)
	} else {
		n := w.nodes[d.to.i]
		if n.c == nil {
			return nil
		}
		if err := n.c.Step(d.m); err != nil {
			return w.report(fmt.Errorf("clerk %s step %T: %w", n.id, d.m, err))
		}
		w.drainClerk(n)
	}
	return w.step()
}

// partition cuts a random clerk node from a random server, or from all;
// sometimes only one direction.
func (w *World) partition() {
	node := w.rng.IntN(len(w.nodes))
	c := cut{until: w.now + w.between(5, 3*w.opts.LeaseTicks), toNode: true, toServer: true}
	switch w.rng.IntN(4) {
	case 0:
		c.toServer = false
	case 1:
		c.toNode = false
	}
	if w.chance(0.3) {
		for s := range w.servers {
			w.net.cuts[[2]int{node, s}] = c
		}
		w.logf("partition %s from all servers %+v", w.nodes[node].id, c)
		return
	}
	s := w.rng.IntN(len(w.servers))
	w.net.cuts[[2]int{node, s}] = c
	w.logf("partition %s from server %d %+v", w.nodes[node].id, s, c)
}
