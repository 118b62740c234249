package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/filesys/history"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/node"
	"github.com/plumeria-fs/plumeria/volume"
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
	c.AddCommand(snapshotCreateCmd(), snapshotListCmd(), snapshotDeleteCmd(), snapshotScheduleCmd())
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
		cl, err := volumeCoord(connect, vol)
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
		cl, err := volumeCoord(connect, vol)
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
		if sc := v.Schedule; sc != nil {
			fmt.Printf("schedule: %s (%s...)\n", sc, clustermap.ScheduledPrefix)
		}
		fmt.Printf("%-32s %-25s %s\n", "SNAPSHOT", "TAKEN (MNT/.plumeria/at/)", "GENERATION")
		for _, n := range names {
			taken := "-"
			if ns, ok := v.SnapshotTimes[n]; ok {
				taken = history.TimeName(time.Unix(0, ns))
			}
			fmt.Printf("%-32s %-25s %d\n", n, taken, v.Snapshots[n])
		}
		return nil
	}
	return c
}

func snapshotDeleteCmd() *cobra.Command {
	var vol string
	c := &cobra.Command{
		Use:   "delete --volume NAME SNAP",
		Short: "Delete a snapshot; the bricks then free what only it kept",
		Long: `delete removes the snapshot at once: reads of it fail from then on, mounts
stop listing it, and files of it still open read ESTALE. In the background
the bricks drop the block versions no remaining snapshot and not the live
file system reads, and their cleaners reclaim the space (plumeria status
shows the bricks' used bytes fall).`,
		Args: cobra.ExactArgs(1),
	}
	connect := coordFlag(c)
	c.Flags().StringVar(&vol, "volume", "", "volume name")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		cl, err := volumeCoord(connect, vol)
		if err != nil {
			return err
		}
		defer cl.Close()
		if err := volume.DeleteSnapshot(cmd.Context(), cl, vol, args[0]); err != nil {
			return err
		}
		fmt.Printf("snapshot %s of volume %s deleted; the bricks free its space in the background\n", args[0], vol)
		return nil
	}
	return c
}

func snapshotScheduleCmd() *cobra.Command {
	var vol string
	var every time.Duration
	var keep, hourly, daily int
	var off bool
	c := &cobra.Command{
		Use:   "schedule --volume NAME (--every DURATION --keep N [--keep-hourly H] [--keep-daily D] | --off)",
		Short: "Have the cluster take snapshots of a volume on a schedule",
		Long: `schedule has the coordinators' leader take a snapshot of the volume's file
system every DURATION, named auto-<UTC time> (e.g. auto-20261126T120000Z),
and delete the scheduled ones no rule keeps: the newest N; with
--keep-hourly H, the newest of each of the last H hours that hold one; with
--keep-daily D, the newest of each of the last D days (UTC). Snapshots taken
by hand are never deleted by it. --off stops the schedule (its snapshots
stay).`,
		Example: "  plumeria snapshot schedule --coord 127.0.0.1:7001 --volume default --every 10m --keep 6 --keep-hourly 24 --keep-daily 30",
		Args:    cobra.NoArgs,
	}
	connect := coordFlag(c)
	c.Flags().StringVar(&vol, "volume", "", "volume name")
	c.Flags().DurationVar(&every, "every", 0, fmt.Sprintf("how often (%v to %v)", clustermap.ScheduleEveryMin, clustermap.ScheduleEveryMax))
	c.Flags().IntVar(&keep, "keep", 0, "how many of the newest scheduled snapshots to keep")
	c.Flags().IntVar(&hourly, "keep-hourly", 0, "also keep the newest of each of the last N hours")
	c.Flags().IntVar(&daily, "keep-daily", 0, "also keep the newest of each of the last N days")
	c.Flags().BoolVar(&off, "off", false, "stop the schedule")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if vol == "" {
			return fmt.Errorf("--volume is required")
		}
		req := &pb.SetSnapshotScheduleRequest{Volume: vol}
		var sched clustermap.SnapshotSchedule
		switch {
		case off && (every != 0 || keep != 0 || hourly != 0 || daily != 0):
			return fmt.Errorf("--off takes no --every or --keep*")
		case !off:
			if every%time.Second != 0 {
				return fmt.Errorf("--every %v: give whole seconds", every)
			}
			sc := clustermap.SnapshotSchedule{EverySeconds: int64(every / time.Second), Keep: keep, KeepHourly: hourly, KeepDaily: daily}
			if err := sc.Validate(); err != nil {
				return err
			}
			req.EveryS, req.Keep, req.KeepHourly, req.KeepDaily = sc.EverySeconds, int32(keep), int32(hourly), int32(daily)
			sched = sc
		}
		cl, err := connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		err = cl.Call(cmd.Context(), func(ctx context.Context, c pb.CoordinatorClient) error {
			_, err := c.SetSnapshotSchedule(ctx, req)
			return err
		})
		if err != nil {
			return fmt.Errorf("snapshot schedule of %s: %s", vol, coordclient.ErrorMessage(err))
		}
		if off {
			fmt.Printf("volume %s: no snapshot schedule\n", vol)
		} else {
			fmt.Printf("volume %s: snapshot schedule %s\n", vol, sched)
		}
		return nil
	}
	return c
}

// volumeCoord checks that --volume was given and connects to the
// coordinators.
func volumeCoord(connect func() (*coordclient.Client, error), vol string) (*coordclient.Client, error) {
	if vol == "" {
		return nil, fmt.Errorf("--volume is required")
	}
	return connect()
}
