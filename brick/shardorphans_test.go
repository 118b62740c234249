package brick

import "testing"

func TestShardVolOf(t *testing.T) {
	for _, c := range []struct {
		vol uint64
		sg  uint16
	}{{0, 0}, {1, 2}, {1<<40 - 1, 0xffff}} {
		vol, sg, ok := shardVolOf(shardVol(c.vol, c.sg))
		if !ok || vol != c.vol || sg != c.sg {
			t.Errorf("shardVolOf(shardVol(%d, %d)) = %d, %d, %v", c.vol, c.sg, vol, sg, ok)
		}
	}
	for _, key := range []uint64{0, 7, 1<<63 - 1, 1<<63 | 1<<56} {
		if _, _, ok := shardVolOf(key); ok {
			t.Errorf("shardVolOf(%#x) ok, want not a shard volume", key)
		}
	}
}
