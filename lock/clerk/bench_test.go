package clerk_test

import (
	"context"
	"testing"

	"github.com/plumeria-fs/plumeria/lock/clerk"
)

// BenchmarkLocks runs the standard workloads (clerk.Workloads) on loopback
// gRPC: one lock server, two clerks with the fs-node model of the tests
// (its OnRevoke waits for operations on the lock). Each reports its own
// unit besides ns/op.
func BenchmarkLocks(b *testing.B) {
	o := defaultOpts()
	o.leaseTicks = 1500 // no lease trouble however long the benchmark runs
	cl := newCluster(b, o, 1)
	k := newChecker()
	x, y := cl.startNode("a", "fs0", k), cl.startNode("b", "fs0", k)
	for _, w := range clerk.Workloads {
		b.Run(w.Name, func(b *testing.B) {
			r, err := w.Run(context.Background(), x.c, y.c, "fs0", b.N)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(r.Value, r.Unit)
		})
	}
}
