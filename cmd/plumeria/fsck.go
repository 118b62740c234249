package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/filesys/fsck"
	"github.com/plumeria-fs/plumeria/node"
)

func fsckCmd() *cobra.Command {
	var vol, snap string
	var repair bool
	c := &cobra.Command{
		Use:   "fsck --volume NAME [--repair | --snapshot SNAP]",
		Short: "Check a file system offline (no node may have it mounted) and, with --repair, fix what is safe",
		Long: `fsck verifies every invariant of the file system on a volume: superblock,
log slots, resource groups, every allocated inode, the directory tree from
the root, link counts, parents and the allocation bitmaps. Each problem is
printed on one line. With --repair it replays the log of a node that
crashed, frees orphans, fixes link counts, group counts, bitmap bits, parent
fields and entries naming free inodes. It exits 0 when the file system is
clean (or everything found was repaired), 1 otherwise.`,
		Example: "  plumeria fsck --coord 127.0.0.1:7001 --volume vol1 --repair",
		Args:    cobra.NoArgs,
	}
	connect := coordFlag(c)
	c.Flags().StringVar(&vol, "volume", "", "volume name")
	c.Flags().BoolVar(&repair, "repair", false, "repair what can be repaired safely (writes to the volume)")
	c.Flags().StringVar(&snap, "snapshot", "", "check this snapshot of the volume instead (read-only; it may be checked while nodes mount the volume)")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if snap != "" && repair {
			return fmt.Errorf("--repair and --snapshot: a snapshot is read-only")
		}
		v, done, err := openVolume(cmd.Context(), connect, vol, "fsck")
		if err != nil {
			return err
		}
		defer done()
		var bar *progressbar.ProgressBar
		var phase string
		progress := func(n, total int64, what string) {
			if what != phase {
				if bar != nil {
					bar.Finish()
				}
				phase = what
				bar = progressbar.NewOptions64(total, progressbar.OptionSetDescription("fsck "+vol+": "+what),
					progressbar.OptionSetWriter(os.Stderr), progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true),
					progressbar.OptionOnCompletion(func() { fmt.Fprintln(os.Stderr) }))
			}
			if total != bar.GetMax64() {
				bar.ChangeMax64(total)
			}
			bar.Set64(n)
		}
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		var dev filesys.Device = node.NewFSDevice(v)
		if snap != "" {
			dev = node.NewSnapshotDevice(v, snap)
			vol += "@" + snap
		}
		rep, err := fsck.Check(cmd.Context(), dev, fsck.Options{Repair: repair, Snapshot: snap != "", Progress: progress, Logger: log})
		if bar != nil {
			bar.Finish()
		}
		if err != nil {
			return fmt.Errorf("fsck of %s: %w", vol, err)
		}
		for _, p := range rep.Problems {
			fmt.Println(p)
		}
		if !rep.Clean() {
			hint := ""
			if !repair {
				hint = " (run with --repair)"
			}
			return fmt.Errorf("fsck of %s: %s; %d left%s", vol, rep.Summary(), len(rep.Problems)-rep.Repaired, hint)
		}
		fmt.Fprintf(os.Stderr, "fsck of %s: %s\n", vol, rep.Summary())
		return nil
	}
	return c
}
