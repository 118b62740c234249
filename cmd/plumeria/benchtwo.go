package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/bench/fsbench"
)

// benchTwoCmd is `plumeria bench two DIR_A DIR_B`: the two-node workloads
// of bench/fsbench on one directory seen through two mounts.
func benchTwoCmd() *cobra.Command {
	def := fsbench.DefaultTwoConfig()
	cfg := def
	c := &cobra.Command{
		Use:   "two DIR_A DIR_B [--ops N] [--files N]",
		Short: "Two-node costs: one file written alternately through two mounts, a directory listed on one while the other creates in it",
		Long: "DIR_A and DIR_B are the same directory of one volume seen through two mounts (two fs nodes).\n" +
			"The workloads run in a fresh subdirectory made through DIR_A (and found through DIR_B), removed\n" +
			"afterwards; each side runs in its own goroutine. Results go to stdout, one line per metric\n" +
			"(name value unit), progress to stderr:\n" +
			"  pingpong_ops ops/s           --ops operations on one file, alternately through A and B; one\n" +
			"                               operation opens the file, reads back and checks the 4 KiB the\n" +
			"                               other side wrote last, writes 4 KiB at the next page of a 1 MiB\n" +
			"                               span, and closes it: each one takes the file's lock from the other node\n" +
			"  pingpong_handoff_ms ms       the median latency of one such operation (lock hand-off included)\n" +
			"  pingpong_handoff_p90_ms ms   its 90th percentile\n" +
			"  listcreate_create files/s    --files small files created one after the other through B ...\n" +
			"  listcreate_list listings/s   ... while A lists their directory over and over until B is done\n" +
			"Every read-back and every listing is checked (a listing must hold each file created before it\n" +
			"began, once; the last one, all of them): an incoherence fails the run. A count of 0 skips its workload.",
		Example: "  # two nodes on this machine: `up` mounts the first on /tmp/p/mnt (coordinator 127.0.0.1:7001),\n" +
			"  # a second mount process of volume default is the second node\n" +
			"  plumeria up --dir /tmp/p &\n" +
			"  mkdir -p /tmp/m2 && plumeria mount --coord 127.0.0.1:7001 --volume default --name n2 /tmp/m2 &\n" +
			"  plumeria bench two /tmp/p/mnt /tmp/m2\n" +
			"  plumeria bench two /tmp/p/mnt /tmp/m2 --ops 500 --files 500",
		Args: cobra.ExactArgs(2),
	}
	c.Flags().IntVar(&cfg.PingPongOps, "ops", def.PingPongOps, "ping-pong operations (a write and the read-back before it), alternating A and B")
	c.Flags().IntVar(&cfg.Files, "files", def.Files, "files created through B while A lists their directory")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		for _, d := range args {
			if err := checkBenchDir(c, d); err != nil {
				return err
			}
		}
		cfg.Log = os.Stderr
		start := time.Now()
		fmt.Fprintf(os.Stderr, "bench two: A %s, B %s\n", args[0], args[1])
		res, err := fsbench.RunTwo(cmd.Context(), args[0], args[1], cfg)
		if err != nil {
			return fmt.Errorf("bench two: %w", err)
		}
		fmt.Fprintf(os.Stderr, "bench two: done in %v\n", time.Since(start).Round(time.Second))
		for _, r := range res {
			fmt.Println(r)
		}
		return nil
	}
	return c
}
