package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/coordclient"
	lockclerk "github.com/plumeria-fs/plumeria/lock/clerk"
	"github.com/plumeria-fs/plumeria/node"
)

func benchLocksCmd() *cobra.Command {
	var coordAddr string
	var n int
	c := &cobra.Command{
		Use:   "locks [--coord ADDR] [--ops N]",
		Short: "Lock service latencies and one lock server's throughput, on loopback",
		Long: "Runs two clerks (as two fs nodes would) against the lock servers of a cluster.\n" +
			"Without --coord it starts a coordinator and one lock server in this process.\n" +
			"Prints: lock_cached_acquire, lock_remote_acquire, lock_handoff, lock_server_throughput.",
		Args: cobra.NoArgs,
	}
	c.Flags().StringVar(&coordAddr, "coord", "", "an existing cluster with lock servers (default: start one in this process)")
	c.Flags().IntVar(&n, "ops", 2000, "operations per measurement")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
		if coordAddr == "" {
			dir, err := os.MkdirTemp("", "plumeria-bench-locks-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			if err := useLocalIdentity(); err != nil {
				return err
			}
			cn, err := node.Start(ctx, node.Config{Name: "coord1", Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "c"), Coordinator: true, Logger: log})
			if err != nil {
				return err
			}
			defer cn.Stop()
			ln, err := node.Start(ctx, node.Config{Name: "lock1", Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "l"), Lock: true,
				Coord: []string{cn.Addr()}, Logger: log})
			if err != nil {
				return err
			}
			defer ln.Stop()
			coordAddr = cn.Addr()
		}
		cc, err := coordclient.New(coordAddr)
		if err != nil {
			return err
		}
		defer cc.Close()
		const table = "bench"
		var clerks []*lockclerk.Clerk
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		for _, id := range []string{"bench-a", "bench-b"} {
			cl, err := openClerk(cctx, cc, id, table, log, func(string, string, uint64) error { return nil })
			if err != nil {
				return err
			}
			clerks = append(clerks, cl)
		}
		for _, w := range lockclerk.Workloads {
			r, err := w.Run(ctx, clerks[0], clerks[1], table, n)
			if err != nil {
				return err
			}
			fmt.Println(r)
		}
		return nil
	}
	return c
}
