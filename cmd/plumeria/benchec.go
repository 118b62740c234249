package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/plumeria-fs/plumeria/brick/ec"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/node"
	"github.com/plumeria-fs/plumeria/volume"
)

// benchECCmd measures large-file throughput per redundancy profile on a
// cluster of its own (issue J): copies=N are volumes of N replicas;
// K+M is a 2-replica volume whose data is then coded into stripes.
func benchECCmd() *cobra.Command {
	var dir, size, profiles string
	var qd, bricks int
	c := &cobra.Command{
		Use:   "ec [--size 256MiB] [--profiles copies=2,copies=3,4+2] [--bricks 6]",
		Short: "Large-file write, apply, read and degraded read per redundancy profile (replication and erasure coding)",
		Long: "`plumeria bench ec` starts a coordinator and --bricks bricks in this process on loopback (state\n" +
			"under --dir) and, per profile, writes --size bytes in 1 MiB requests with --qd in flight, reads\n" +
			"them back, stops one brick and reads them again (degraded: a K+M stripe then rebuilds the lost\n" +
			"shards on the fly; copies fail over to another replica), checking every byte. copies=N is a\n" +
			"volume of N replicas; K+M is a volume of 2 replicas whose data is then coded into K+M stripes\n" +
			"(apply: vdisk relayout's rate). Results go to stdout, progress to stderr:\n" +
			"  ec_PROFILE_seq_write, _apply, _seq_read, _degraded_read MiB/s\n" +
			"  ec_PROFILE_raw_ratio        raw bytes stored per byte of data (replicas, or shards + refs)\n" +
			"All bricks share this machine and its disk: the numbers compare profiles with each other.",
		Example: "  plumeria bench ec --size 256MiB --profiles copies=2,copies=3,4+2",
		Args:    cobra.NoArgs,
	}
	f := c.Flags()
	f.StringVar(&dir, "dir", "", "state directory (default: a temporary one)")
	f.StringVar(&size, "size", "256MiB", "bytes per profile")
	f.StringVar(&profiles, "profiles", "copies=2,copies=3,4+2", "comma-separated profiles: copies=N or K+M")
	f.IntVar(&qd, "qd", 8, "1 MiB requests in flight")
	f.IntVar(&bricks, "bricks", 6, "bricks to start (K+M needs at least K+M)")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		n, err := parseBytes(size)
		if err != nil || n < 1<<20 {
			return fmt.Errorf("--size: want at least 1MiB")
		}
		var ps []ec.Profile
		for _, s := range strings.Split(profiles, ",") {
			p, err := ec.ParseProfile(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("--profiles: %w", err)
			}
			if p.Shards() > bricks {
				return fmt.Errorf("--profiles: %s needs %d bricks, --bricks is %d", p, p.Shards(), bricks)
			}
			ps = append(ps, p)
		}
		if qd < 1 || qd > 64 || bricks < 2 || bricks > 16 {
			return fmt.Errorf("--qd must be 1 to 64 and --bricks 2 to 16")
		}
		return runBenchEC(cmd.Context(), os.Stdout, dir, bricks, ps, int64(n)&^(1<<20-1), qd)
	}
	return c
}

// ecCluster is bench ec's cluster: nodes it can stop and start again.
type ecCluster struct {
	coord  *node.Node
	bricks []*node.Node
	cfgs   []node.Config
}

func startECCluster(ctx context.Context, dir string, n int) (*ecCluster, error) {
	if err := useLocalIdentity(); err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	c, err := node.Start(ctx, node.Config{Name: "coord1", Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "coord1"), Coordinator: true, Logger: log})
	if err != nil {
		return nil, err
	}
	ecc := &ecCluster{coord: c}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("brick%d", i)
		cfg := node.Config{Name: name, Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, name), Brick: true,
			Coord: []string{c.Addr()}, Domain: map[string]string{"host": "localhost"}, Logger: log}
		b, err := node.Start(ctx, cfg)
		if err != nil {
			ecc.stop()
			return nil, err
		}
		cfg.Listen = b.Addr() // restarts keep the address the map knows
		ecc.bricks, ecc.cfgs = append(ecc.bricks, b), append(ecc.cfgs, cfg)
	}
	return ecc, nil
}

func (c *ecCluster) stop() {
	for _, b := range c.bricks {
		if b != nil {
			b.Stop()
		}
	}
	c.coord.Stop()
}

func runBenchEC(ctx context.Context, w io.Writer, dir string, bricks int, ps []ec.Profile, size int64, qd int) error {
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "plumeria-bench-ec-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	c, err := startECCluster(ctx, dir, bricks)
	if err != nil {
		return err
	}
	defer c.stop()
	cl, err := coordclient.New(c.coord.Addr())
	if err != nil {
		return err
	}
	defer cl.Close()
	data := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < len(data); i += 8 {
		v := rng.Uint64()
		for j := range 8 {
			data[i+j] = byte(v >> (8 * j))
		}
	}
	for i, p := range ps {
		name := fmt.Sprintf("bench-ec-%d-%d", i, time.Now().UnixNano()%1e6)
		fmt.Fprintf(os.Stderr, "bench ec: %s on volume %s (%s)\n", p, name, humanBytes(size))
		res, err := benchProfile(ctx, c, cl, name, p, data, qd)
		if err != nil {
			return fmt.Errorf("bench ec: %s: %w", p, err)
		}
		label := strings.NewReplacer("=", "", "+", "p").Replace(p.String())
		for _, r := range res {
			format := "ec_%s_%s %.1f %s\n"
			if strings.HasPrefix(r.unit, "ratio") {
				format = "ec_%s_%s %.3f %s\n"
			}
			fmt.Fprintf(w, format, label, r.name, r.value, r.unit)
		}
	}
	return nil
}

type ecResult struct {
	name  string
	value float64
	unit  string
}

// benchProfile runs the workloads of one profile on a new volume.
func benchProfile(ctx context.Context, c *ecCluster, cl *coordclient.Client, name string, p ec.Profile, data []byte, qd int) ([]ecResult, error) {
	replicas := uint32(2)
	if p.Mirror() {
		replicas = uint32(p.M + 1)
	}
	if _, err := ensureVolume(ctx, cl, name, replicas, false); err != nil {
		return nil, fmt.Errorf("create: %s", coordclient.ErrorMessage(err))
	}
	v, err := volume.Open(ctx, cl, name, volume.Options{Writer: "bench-ec"})
	if err != nil {
		return nil, err
	}
	defer v.Close()
	mib := float64(len(data)) / (1 << 20)
	var out []ecResult
	rate := func(what string, d time.Duration) {
		out = append(out, ecResult{what, mib / d.Seconds(), "MiB/s"})
		fmt.Fprintf(os.Stderr, "bench ec: %s %s in %v\n", what, humanBytes(int64(len(data))), d.Round(time.Millisecond))
	}
	d, err := parallelIO(ctx, len(data), qd, func(ctx context.Context, off int) error {
		return v.WriteAt(ctx, data[off:off+1<<20], uint64(off))
	})
	if err != nil {
		return nil, fmt.Errorf("write: %w", err)
	}
	rate("seq_write", d)
	raw := float64(replicas)
	if !p.Mirror() {
		var r *pb.EnsureProfileResponse
		err := cl.Call(ctx, func(ctx context.Context, cc pb.CoordinatorClient) (err error) {
			r, err = cc.EnsureProfile(ctx, &pb.EnsureProfileRequest{Volume: name, Profile: &pb.Profile{K: uint32(p.K), M: uint32(p.M)}})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("profile: %s", coordclient.ErrorMessage(err))
		}
		start := time.Now()
		st, err := v.Relayout(ctx, 0, uint64(len(data)), uint16(r.Id), nil)
		if err != nil {
			return nil, fmt.Errorf("relayout: %w", err)
		}
		rate("apply", time.Since(start))
		const refRecord = 65 // a ref's record in a home replica's store
		raw = (float64(st.StripeBytes) + float64(st.Swapped)*refRecord*float64(replicas)) / float64(len(data))
	}
	out = append(out, ecResult{"raw_ratio", raw, "ratio(lower=better)"})
	read := func(what string) error {
		d, err := parallelIO(ctx, len(data), qd, func(ctx context.Context, off int) error {
			buf := make([]byte, 1<<20)
			if err := v.ReadAt(ctx, buf, uint64(off)); err != nil {
				return err
			}
			if !bytes.Equal(buf, data[off:off+1<<20]) {
				return fmt.Errorf("%s: bytes at %d differ from those written", what, off)
			}
			return nil
		})
		if err != nil {
			return err
		}
		rate(what, d)
		return nil
	}
	if err := read("seq_read"); err != nil {
		return nil, err
	}
	// Degraded: the last brick stops; reads go on once the coordinator has
	// declared it down (the PGs it led fail over).
	last := len(c.bricks) - 1
	c.bricks[last].Stop()
	c.bricks[last] = nil
	if err := waitBrickDown(ctx, cl, c.cfgs[last].Name); err != nil {
		return nil, err
	}
	if err := read("degraded_read"); err != nil {
		return nil, err
	}
	b, err := node.Start(ctx, c.cfgs[last])
	if err != nil {
		return nil, fmt.Errorf("restart %s: %w", c.cfgs[last].Name, err)
	}
	c.bricks[last] = b
	if err := v.Decommit(ctx, 0, uint64(len(data))); err != nil {
		return nil, fmt.Errorf("decommit: %w", err)
	}
	return out, nil
}

// parallelIO runs fn for every 1 MiB offset of [0, n) with qd in flight
// and returns the time it took.
func parallelIO(ctx context.Context, n, qd int, fn func(ctx context.Context, off int) error) (time.Duration, error) {
	start := time.Now()
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(qd)
	for off := 0; off < n; off += 1 << 20 {
		g.Go(func() error { return fn(ctx, off) })
	}
	err := g.Wait()
	return time.Since(start), err
}

// waitBrickDown waits until the map says brick is down.
func waitBrickDown(ctx context.Context, cl *coordclient.Client, brick string) error {
	deadline := time.Now().Add(limits.BrickDeadAfter + 30*time.Second)
	for time.Now().Before(deadline) {
		m, err := cl.Map(ctx, 0)
		if err == nil {
			if b := m.Brick(brick); b != nil && b.State == clustermap.BrickDown {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("brick %s not declared down in time", brick)
}
