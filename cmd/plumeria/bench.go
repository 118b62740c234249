package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/plumeria-fs/plumeria/bench/fsbench"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/volume"
)

// A volume is what the block workloads run on.
var _ fsbench.Device = (*volume.Volume)(nil)

func benchCmd() *cobra.Command {
	c := &cobra.Command{Use: "bench", Short: "Benchmarks; one line per metric: name value unit"}
	benchDir(c) // `plumeria bench DIR`: file system workloads on a directory
	c.AddCommand(benchVdiskCmd(), benchLocksCmd(), benchTwoCmd(), benchNFSCmd(), benchECCmd())
	return c
}

func benchVdiskCmd() *cobra.Command {
	def := fsbench.DefaultConfig()
	cfg := def
	var coordAddr, dir, size, io, randSize string
	var replicas []int
	c := &cobra.Command{
		Use:   "vdisk [--coord ADDR] [--size 256MiB] [--replicas 1,2,3]",
		Short: "The block workloads of `plumeria bench DIR` on raw volumes of 1, 2 and 3 replicas, next to a local file",
		Long: "`plumeria bench vdisk` runs the block workloads of `plumeria bench DIR` on a local file in --dir,\n" +
			"then on a new volume per --replicas count, so that the file system's own cost shows as the\n" +
			"difference between the two benches. Results go to stdout, progress to stderr:\n" +
			"  local_file_NAME value unit          on the local file (its fsync is fdatasync(2))\n" +
			"  vdisk_rN_NAME value unit            on the volume with N replicas\n" +
			"  vdisk_rN_NAME_ratio value ratio(higher=better)   vdisk/local; ratio(lower=better) for us\n" +
			"for NAME in seq_write_fsync, seq_read MiB/s (--size in --io requests); rand_read_4k,\n" +
			"rand_write_4k IOPS (--rand-ops at random pages of --rand-size, QD1); rand_mixed_qd16 IOPS\n" +
			"(70/30 reads/writes, --rand-qd in flight); write_fsync_4k_latency and _p99 us (--fsync-ops).\n" +
			"A volume's fsync does nothing: its WriteAt returns once every replica has the bytes durable.\n" +
			"Every byte read is checked. A count or size of 0 skips its workload.\n" +
			"Without --coord it starts a coordinator and three bricks in this process on loopback, with\n" +
			"state under --dir. With --coord the volumes (bench-rN-*) stay, their data decommitted.",
		Example: "  plumeria bench vdisk --size 1GiB --replicas 2,3\n" +
			"  plumeria bench vdisk --coord 127.0.0.1:7001 --size 64MiB --rand-ops 2000",
		Args: cobra.NoArgs,
	}
	f := c.Flags()
	f.StringVar(&coordAddr, "coord", "", "an existing cluster (default: start one in this process)")
	f.StringVar(&dir, "dir", "", "scratch directory, for the local file (default: a temporary one)")
	f.StringVar(&size, "size", "256MiB", "bytes written (then synced) and read back sequentially")
	f.StringVar(&io, "io", "1MiB", "bytes per sequential request")
	f.StringVar(&randSize, "rand-size", "256MiB", "bytes of the range of the random 4 KiB reads and writes")
	randFlags(f, &cfg, def, "sync")
	f.IntSliceVar(&replicas, "replicas", []int{1, 2, 3}, fmt.Sprintf("replica counts, one volume each (1 to %d)", limits.ReplicasMax))
	f.Uint64Var(&cfg.Seed, "seed", def.Seed, "seed of the offsets and data")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		var err error
		if cfg.SeqSize, err = parseBytes(size); err != nil {
			return fmt.Errorf("--size: %w", err)
		}
		if cfg.RandSize, err = parseBytes(randSize); err != nil {
			return fmt.Errorf("--rand-size: %w", err)
		}
		ioBytes, err := parseUint(io)
		if err != nil || ioBytes == 0 || ioBytes > 64<<20 {
			return fmt.Errorf("--io: want 1 byte to 64MiB")
		}
		cfg.SeqIO = int(ioBytes)
		for _, n := range replicas {
			if n < 1 || n > limits.ReplicasMax {
				return fmt.Errorf("--replicas: %d is not 1 to %d", n, limits.ReplicasMax)
			}
		}
		cfg.Files, cfg.Mkdirs, cfg.TreeFiles = 0, 0, 0
		cfg.Log = os.Stderr
		return runBenchVdisk(cmd.Context(), os.Stdout, coordAddr, dir, replicas, cfg)
	}
	return c
}

// runBenchVdisk runs the block workloads of cfg on a local file in dir,
// then on a new volume per replica count, printing each run's lines as it
// ends.
func runBenchVdisk(ctx context.Context, w io.Writer, coordAddr, dir string, replicas []int, cfg fsbench.Config) error {
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "plumeria-bench-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	local, err := timed("a local file in "+dir, func() ([]fsbench.Result, error) {
		return fsbench.RunFile(ctx, filepath.Join(dir, "local.dat"), cfg)
	})
	if err != nil {
		return err
	}
	for _, r := range local {
		fmt.Fprintln(w, fsbench.Result{Name: "local_file_" + r.Name, Value: r.Value, Unit: r.Unit})
	}
	if coordAddr == "" {
		if err := useLocalIdentity(); err != nil {
			return err
		}
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
		lc, err := startLocalCluster(ctx, filepath.Join(dir, "cluster"), "127.0.0.1", 0, 3, "", log)
		if err != nil {
			return err
		}
		defer lc.stop()
		coordAddr = lc.coord
	}
	cl, err := coordclient.New(coordAddr)
	if err != nil {
		return err
	}
	defer cl.Close()
	for _, n := range replicas {
		name := fmt.Sprintf("bench-r%d-%d", n, time.Now().UnixNano()%1e6)
		what := fmt.Sprintf("volume %s (%d replicas)", name, n)
		if n == 1 {
			what = fmt.Sprintf("volume %s (1 replica)", name)
		}
		res, err := timed(what, func() ([]fsbench.Result, error) {
			return benchVolume(ctx, cl, name, uint32(n), cfg)
		})
		if err != nil {
			return err
		}
		printVdisk(w, fmt.Sprintf("vdisk_r%d_", n), res, local)
	}
	return nil
}

// timed runs fn, saying on stderr what runs and how long it took.
func timed(what string, fn func() ([]fsbench.Result, error)) ([]fsbench.Result, error) {
	fmt.Fprintf(os.Stderr, "bench vdisk: running on %s\n", what)
	start := time.Now()
	res, err := fn()
	if err != nil {
		return nil, fmt.Errorf("bench vdisk: %s: %w", what, err)
	}
	fmt.Fprintf(os.Stderr, "bench vdisk: %s done in %v\n", what, time.Since(start).Round(time.Second))
	return res, nil
}

// benchVolume creates volume name with n replicas, runs the block
// workloads on it, and decommits what they wrote.
func benchVolume(ctx context.Context, cl *coordclient.Client, name string, n uint32, cfg fsbench.Config) ([]fsbench.Result, error) {
	if _, err := ensureVolume(ctx, cl, name, n, false); err != nil {
		return nil, fmt.Errorf("create: %s", coordclient.ErrorMessage(err))
	}
	v, err := volume.Open(ctx, cl, name, volume.Options{})
	if err != nil {
		return nil, err
	}
	defer v.Close()
	// Warm up past the workloads' range: a new volume's primaries start
	// serving once every brick has learned the map; touch every PG first.
	vol := v.Map().Volume(name)
	chunk := uint64(vol.ChunkBytes)
	warm := (fsbench.DeviceBytes(cfg) + chunk - 1) / chunk * chunk
	end := warm + 4*uint64(len(vol.PGs))*chunk
	buf := make([]byte, 4096)
	for off := warm; off < end; off += chunk {
		if err := v.WriteAt(ctx, buf, off); err != nil {
			return nil, fmt.Errorf("warm up: %w", err)
		}
	}
	res, err := fsbench.RunDevice(ctx, v, "volume "+name, cfg)
	if err != nil {
		return nil, err
	}
	if err := v.Decommit(ctx, 0, end); err != nil {
		return nil, fmt.Errorf("decommit: %w", err)
	}
	return res, nil
}

// printVdisk prints, per result of a volume, its line under prefix and
// its ratio to the same metric on the local file (NAME_ratio).
func printVdisk(w io.Writer, prefix string, res, local []fsbench.Result) {
	for i, r := range res {
		l := local[i] // the same workloads, in the same order
		fmt.Fprintln(w, fsbench.Result{Name: prefix + r.Name, Value: r.Value, Unit: r.Unit})
		fmt.Fprintf(w, "%s%s_ratio %.3f %s\n", prefix, r.Name, r.Value/l.Value, ratioUnit(r.Unit))
	}
}

// randFlags defines the flags of the random and fsync workloads, shared by
// bench DIR and bench vdisk (sync names what follows each timed write).
func randFlags(f *pflag.FlagSet, cfg *fsbench.Config, def fsbench.Config, sync string) {
	f.IntVar(&cfg.RandOps, "rand-ops", def.RandOps, "random 4 KiB reads, then as many writes, then as many mixed reads and writes (0: none of them)")
	f.DurationVar(&cfg.RandTime, "rand-time", def.RandTime, "bound on each of the random read, write and mixed phases (0: none)")
	f.IntVar(&cfg.RandQD, "rand-qd", def.RandQD, fmt.Sprintf("random 4 KiB reads and writes (70/30) in flight at once in rand_mixed_qdN, at most %d (0: skip)", fsbench.RandQDMax))
	f.IntVar(&cfg.FsyncOps, "fsync-ops", def.FsyncOps, "4 KiB writes each followed by "+sync+" and timed with it, in write_fsync_4k_latency (0: skip)")
}
