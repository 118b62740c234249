package main

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/node"
)

func snapshotCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "snapshot",
		Short: "File-system-consistent snapshots of a volume: create, list, delete",
		Long: `A snapshot is the whole file system as it was at one moment, read-only.
Every mounted node writes back what it changed before the snapshot is taken
(the barrier lock, Frangipani §8), so a snapshot needs no log replay. Browse
one in any mount at MNT/.plumeria/snapshots/SNAP/, or mount it on its own:
plumeria mount --volume NAME --snapshot SNAP DIR.`,
	}
	c.AddCommand(snapshotCreateCmd(), snapshotListCmd())
	return c
}

func snapshotCreateCmd() *cobra.Command {
	var vol string
	c := &cobra.Command{
		Use:     "create --volume NAME SNAP",
		Short:   "Take a snapshot of a volume's file system while it runs",
		Example: "  plumeria snapshot create --coord 127.0.0.1:7001 --volume default before-upgrade",
		Args:    cobra.ExactArgs(1),
	}
	connect := coordFlag(c)
	c.Flags().StringVar(&vol, "volume", "", "volume name")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if vol == "" {
			return fmt.Errorf("--volume is required")
		}
		cl, err := connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		fmt.Fprintf(os.Stderr, "snapshot %s: waiting for every node mounting %s to write back...\n", args[0], vol)
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		res, err := node.SnapshotFS(cmd.Context(), cl, vol, args[0], log)
		if err != nil {
			return err
		}
		fmt.Printf("snapshot %s of volume %s taken (generation %d): nodes wrote back in %s, then paused %s\n",
			args[0], vol, res.Gen, res.Settle.Round(time.Millisecond), res.Held.Round(time.Millisecond))
		return nil
	}
	return c
}

func snapshotListCmd() *cobra.Command {
	var vol string
	c := &cobra.Command{
		Use:   "list --volume NAME",
		Short: "List a volume's snapshots",
		Args:  cobra.NoArgs,
	}
	connect := coordFlag(c)
	c.Flags().StringVar(&vol, "volume", "", "volume name")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if vol == "" {
			return fmt.Errorf("--volume is required")
		}
		cl, err := connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		m, err := cl.Map(cmd.Context(), 0)
		if err != nil {
			return fmt.Errorf("read the cluster map: %s", coordclient.ErrorMessage(err))
		}
		v := m.Volume(vol)
		if v == nil {
			return fmt.Errorf("no volume %q", vol)
		}
		names := make([]string, 0, len(v.Snapshots))
		for n := range v.Snapshots {
			names = append(names, n)
		}
		slices.SortFunc(names, func(a, b string) int { // oldest first
			return cmp.Or(cmp.Compare(v.Snapshots[a], v.Snapshots[b]), strings.Compare(a, b))
		})
		fmt.Printf("%-32s %s\n", "SNAPSHOT", "GENERATION")
		for _, n := range names {
			fmt.Printf("%-32s %d\n", n, v.Snapshots[n])
		}
		return nil
	}
	return c
}
