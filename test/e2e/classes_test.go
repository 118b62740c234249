package e2e

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coord"
)

// TestStorageClasses: bricks carry a storage class (--class) and racks; a
// volume created with --class and --domain rack lands only on bricks of
// its class, in distinct racks, and serves reads and writes; impossible
// requests are refused with the reason; a brick restarted with another
// class is replaced in its PGs without losing data.
func TestStorageClasses(t *testing.T) {
	c := startCluster(t, 1, 0)
	type b struct{ name, host, rack, class string }
	bricks := []b{{"s1", "h1", "r1", "ssd"}, {"s2", "h2", "r2", "ssd"}, {"s3", "h3", "r3", "ssd"}, {"d1", "h4", "r1", ""}, {"d2", "h5", "r2", ""}}
	for _, x := range bricks {
		extra := []string{"--domain", fmt.Sprintf("host=%s,rack=%s", x.host, x.rack)}
		if x.class != "" {
			extra = append(extra, "--class", x.class)
		}
		c.addBrick(x.name, x.host, extra...)
	}
	c.waitStatus(30*time.Second, "5 bricks up with their classes", func(st *coord.Status) (bool, string) {
		n := 0
		for _, x := range bricks {
			want := x.class
			if want == "" {
				want = clustermap.ClassDefault
			}
			if bs := brickOf(st, x.name); bs != nil && bs.State == "up" && bs.Class == want {
				n++
			}
		}
		return n == len(bricks), brickStates(st)
	})

	c.createVolume("fast", 3, "--class", "ssd", "--domain", "rack", "--pgs", "16")
	c.createVolume("slow", 2, "--class", "default", "--pgs", "16")
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--class", "nvme"}, `no brick of class "nvme"`},
		{[]string{"--replicas", "4", "--domain", "rack"}, "4 distinct racks"},
		{[]string{"--domain", "planet"}, "use host, rack or site"},
		{[]string{"--class", "a/b"}, "not allowed"},
	} {
		r := c.run(30*time.Second, nil, append([]string{"volume", "create", c.coordArg(), "bad"}, bad.args...)...)
		if r.code == 0 || !bytes.Contains(r.stderr, []byte(bad.want)) {
			t.Errorf("volume create %v: want a refusal naming %q, got %s", bad.args, bad.want, r)
		}
	}

	cl := c.client()
	mapNow := func() *clustermap.Map {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m, err := cl.Map(ctx, 0)
		if err != nil {
			t.Fatalf("map: %v", err)
		}
		return m
	}
	m := mapNow()
	checkPlacement := func(m *clustermap.Map, vol, class string, distinctRacks bool) {
		t.Helper()
		for i, p := range m.Volume(vol).PGs {
			racks := map[string]bool{}
			rackOf := func(name string) string { return m.Brick(name).Domain[clustermap.LevelRack] }
			for _, name := range p.Bricks {
				if got := m.Brick(name).ClassName(); got != class {
					t.Fatalf("volume %s pg %d: member %s of class %s, want %s: %v", vol, i, name, got, class, p.Bricks)
				}
				if distinctRacks && racks[rackOf(name)] {
					t.Fatalf("volume %s pg %d: two members in rack %s: %v", vol, i, rackOf(name), p.Bricks)
				}
				racks[rackOf(name)] = true
			}
		}
	}
	checkPlacement(m, "fast", "ssd", true)
	checkPlacement(m, "slow", clustermap.ClassDefault, false)
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	if vs := volumeOf(st, "fast"); vs == nil || vs.Class != "ssd" || vs.Domain != "rack" {
		t.Fatalf("status of fast: %+v", vs)
	}
	if st.Balance.Deviation >= 2 || len(st.Balance.Bricks) != len(bricks) {
		t.Fatalf("balance after placement: %+v", st.Balance)
	}
	out := string(c.cli("status", c.coordArg()))
	if !strings.Contains(out, "CLASS") || !strings.Contains(out, "rack,class=ssd") {
		t.Errorf("status text lacks classes:\n%s", out)
	}

	// Data written to the ssd volume survives the replacement of a brick
	// that changes class: a new ssd brick in rack r3 takes s3's place.
	v := c.open("fast", "w1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	data := bytes.Repeat([]byte("plumeria classes "), 1<<16) // ~1.1 MiB over several chunks
	if err := v.WriteAt(ctx, data, 3<<20); err != nil {
		t.Fatal(err)
	}
	c.addBrick("s4", "h6", "--domain", "host=h6,rack=r3", "--class", "ssd")
	p := c.proc("s3")
	c.stop("s3")
	p.args = append(slices.Clone(p.args), "--class", "hdd")
	c.restart("s3")
	c.waitFor(90*time.Second, "s3 (now hdd) replaced in every PG of fast", func() (bool, string) {
		m := mapNow()
		for i, pg := range m.Volume("fast").PGs {
			if slices.Contains(pg.Bricks, "s3") || len(pg.Syncing) > 0 || len(pg.Bricks) != 3 {
				return false, fmt.Sprintf("pg %d: %+v (s3 class %s)", i, pg, m.Brick("s3").ClassName())
			}
		}
		return true, ""
	})
	checkPlacement(mapNow(), "fast", "ssd", true)
	got := make([]byte, len(data))
	if err := v.ReadAt(ctx, got, 3<<20); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read after the replacement: err %v, equal %v", err, bytes.Equal(got, data))
	}
}
