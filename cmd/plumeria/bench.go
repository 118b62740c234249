package main

import (
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/volume"
)

func benchCmd() *cobra.Command {
	c := &cobra.Command{Use: "bench", Short: "Benchmarks; one line per metric: name value unit"}
	benchDir(c) // `plumeria bench DIR`: file system workloads on a directory
	c.AddCommand(benchVdiskCmd(), benchLocksCmd(), benchTwoCmd())
	return c
}

func benchVdiskCmd() *cobra.Command {
	var coordAddr, dir, size, io string
	c := &cobra.Command{
		Use:   "vdisk [--coord ADDR] [--size 256MiB]",
		Short: "Sequential write/read MiB/s of volumes with 1, 2 and 3 replicas, next to a local file",
		Long: "Without --coord it starts a coordinator and three bricks in this process on loopback,\n" +
			"with state under --dir, and reports the same workload on a local file in --dir as reference.",
		Args: cobra.NoArgs,
	}
	c.Flags().StringVar(&coordAddr, "coord", "", "an existing cluster (default: start one in this process)")
	c.Flags().StringVar(&dir, "dir", "", "scratch directory (default: a temporary one)")
	c.Flags().StringVar(&size, "size", "256MiB", "bytes written and read per run")
	c.Flags().StringVar(&io, "io", "1MiB", "bytes per request")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		total, err := parseUint(size)
		if err != nil {
			return fmt.Errorf("--size: %w", err)
		}
		ioBytes, err := parseUint(io)
		if err != nil || ioBytes == 0 || ioBytes > 64<<20 {
			return fmt.Errorf("--io: want 1 byte to 64MiB")
		}
		if dir == "" {
			if dir, err = os.MkdirTemp("", "plumeria-bench-"); err != nil {
				return err
			}
			defer os.RemoveAll(dir)
		}
		ctx := cmd.Context()
		if coordAddr == "" {
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
		buf := make([]byte, ioBytes)
		rand.Read(buf)
		w, r, err := benchLocalFile(filepath.Join(dir, "local.dat"), buf, total)
		if err != nil {
			return err
		}
		fmt.Printf("local_file_write_fsync %.1f MiB/s\nlocal_file_read %.1f MiB/s\n", w, r)
		for replicas := uint32(1); replicas <= 3; replicas++ {
			name := fmt.Sprintf("bench-r%d-%d", replicas, time.Now().UnixNano()%1e6)
			if err := ensureVolume(ctx, cl, name, replicas); err != nil {
				return fmt.Errorf("create %s: %s", name, coordclient.ErrorMessage(err))
			}
			v, err := volume.Open(ctx, cl, name, volume.Options{})
			if err != nil {
				return err
			}
			// Warm up: a new volume's primaries start serving once every
			// brick has learned the map; touch every PG before timing.
			for i := uint64(0); i < 4*uint64(len(v.Map().Volume(name).PGs)); i++ {
				if err := v.WriteAt(ctx, buf[:4096], i*uint64(v.Map().Volume(name).ChunkBytes)); err != nil {
					return err
				}
			}
			start := time.Now()
			for off := uint64(0); off < total; off += ioBytes {
				if err := v.WriteAt(ctx, buf[:min(ioBytes, total-off)], off); err != nil {
					return err
				}
			}
			ws := mibps(total, time.Since(start))
			start = time.Now()
			for off := uint64(0); off < total; off += ioBytes {
				if err := v.ReadAt(ctx, buf[:min(ioBytes, total-off)], off); err != nil {
					return err
				}
			}
			rs := mibps(total, time.Since(start))
			v.Close()
			fmt.Printf("vdisk_r%d_seq_write %.1f MiB/s\nvdisk_r%d_seq_read %.1f MiB/s\n", replicas, ws, replicas, rs)
			fmt.Printf("vdisk_r%d_write_vs_local %.3f ratio\nvdisk_r%d_read_vs_local %.3f ratio\n", replicas, ws/w, replicas, rs/r)
		}
		return nil
	}
	return c
}

func mibps(n uint64, d time.Duration) float64 { return float64(n) / (1 << 20) / d.Seconds() }

// benchLocalFile writes total bytes in buf-sized pieces, fsyncs, reads back.
func benchLocalFile(path string, buf []byte, total uint64) (w, r float64, err error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, 0, err
	}
	defer os.Remove(path)
	defer f.Close()
	start := time.Now()
	for off := uint64(0); off < total; off += uint64(len(buf)) {
		if _, err := f.Write(buf[:min(uint64(len(buf)), total-off)]); err != nil {
			return 0, 0, err
		}
	}
	if err := f.Sync(); err != nil {
		return 0, 0, err
	}
	w = mibps(total, time.Since(start))
	start = time.Now()
	if _, err := f.Seek(0, 0); err != nil {
		return 0, 0, err
	}
	for off := uint64(0); off < total; off += uint64(len(buf)) {
		if _, err := f.Read(buf[:min(uint64(len(buf)), total-off)]); err != nil {
			return 0, 0, err
		}
	}
	return w, mibps(total, time.Since(start)), nil
}
