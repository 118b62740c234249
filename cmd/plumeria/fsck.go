package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/filesys/fsck"
	"github.com/plumeria-fs/plumeria/filesys/layout"
	"github.com/plumeria-fs/plumeria/node"
)

func fsckCmd() *cobra.Command {
	var vol, snap string
	var repair, upgrade bool
	c := &cobra.Command{
		Use:   "fsck --volume NAME [--repair | --upgrade | --snapshot SNAP]",
		Short: "Check a file system offline (no node may have it mounted) and, with --repair, fix what is safe",
		Long: `fsck verifies every invariant of the file system on a volume: superblock,
log slots, resource groups, every allocated inode, the directory tree from
the root, link counts, parents and the allocation bitmaps. Each problem is
printed on one line. With --repair it replays the log of a node that
crashed, frees orphans, fixes link counts, group counts, bitmap bits, parent
fields and entries naming free inodes. With --upgrade it checks (and
repairs) a file system of an earlier format version, then rewrites its
superblock as this build's format. It exits 0 when the file system is
clean (or everything found was repaired), 1 otherwise.`,
		Example: "  plumeria fsck --coord 127.0.0.1:7001 --volume vol1 --repair",
		Args:    cobra.NoArgs,
	}
	connect := coordFlag(c)
	c.Flags().StringVar(&vol, "volume", "", "volume name")
	c.Flags().BoolVar(&repair, "repair", false, "repair what can be repaired safely (writes to the volume)")
	c.Flags().BoolVar(&upgrade, "upgrade", false, "check a file system of an earlier format, or without an NFS handle key, (repairing what is safe) and, if clean, upgrade it to this build's format")
	c.Flags().StringVar(&snap, "snapshot", "", "check this snapshot of the volume instead (read-only; it may be checked while nodes mount the volume)")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if snap != "" && (repair || upgrade) {
			return fmt.Errorf("--repair or --upgrade with --snapshot: a snapshot is read-only")
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
		rep, err := fsck.Check(cmd.Context(), dev, fsck.Options{Repair: repair, Upgrade: upgrade, Snapshot: snap != "", Progress: progress, Logger: log})
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
		if rep.Upgraded {
			fmt.Fprintf(os.Stderr, "fsck of %s: upgraded to format %d\n", vol, layout.FormatVersion)
		}
		return nil
	}
	return c
}
