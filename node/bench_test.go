package node

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/plumeria-fs/plumeria/volume"
)

// BenchmarkVdiskSeqWrite writes 1 MiB pieces sequentially to volumes of 1,
// 2 and 3 replicas on an in-process loopback cluster.
func BenchmarkVdiskSeqWrite(b *testing.B) {
	for _, r := range []uint32{1, 2, 3} {
		b.Run(fmt.Sprintf("replicas=%d", r), func(b *testing.B) {
			tc := newTestCluster(b, 3)
			tc.createVolume("v", r)
			ctx := context.Background()
			v, err := volume.Open(ctx, tc.cl, "v", volume.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer v.Close()
			buf := make([]byte, 1<<20)
			rand.Read(buf)
			// Warm up: new primaries wait for the map to settle first.
			if err := v.WriteAt(ctx, buf, 0); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := v.WriteAt(ctx, buf, uint64(i)<<20); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
