package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/filesys/history"
	"github.com/plumeria-fs/plumeria/timetravel"
)

func versionsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "versions PATH",
		Short: "List the states a file or directory had in the volume's snapshots, and now",
		Long: `versions reads PATH's past through its mount (MNT/.plumeria): one line per
state, with the snapshots that hold it (oldest first), then the live one.
A path that did not exist in some snapshots (made later, or deleted then)
shows gaps. Versions are as fine as the snapshots: take them by hand
(plumeria snapshot create) or on a schedule (plumeria snapshot schedule).`,
		Example: "  plumeria versions /mnt/plumeria/home/report.txt",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := timetravel.Find(args[0])
			if err != nil {
				return err
			}
			vs, err := m.Versions()
			if err != nil {
				return fmt.Errorf("versions of %s: %w", args[0], err)
			}
			if len(vs) == 0 {
				return fmt.Errorf("%s is in no snapshot and does not exist now", args[0])
			}
			fmt.Printf("%-22s %-22s %-11s %12s  %s\n", "FROM", "TO", "TYPE", "SIZE", "MODIFIED")
			for _, v := range vs {
				from, to := "now", ""
				if !v.Live {
					from, to = label(v.First), label(v.Last)
				}
				fmt.Printf("%-22s %-22s %-11s %12d  %s\n", from, to, v.Mode.String(), v.Size, v.Mtime.UTC().Format(time.RFC3339))
			}
			return nil
		},
	}
}

// label names a snapshot by its time (what .plumeria/at and restore --at
// take), or by its name when its time is unknown.
func label(s timetravel.Snapshot) string {
	if s.At.IsZero() {
		return s.Name
	}
	return history.TimeName(s.At)
}

func restoreCmd() *cobra.Command {
	var at, to string
	c := &cobra.Command{
		Use:   "restore PATH --at TIME [--to DEST]",
		Short: "Bring back a file or directory as it was at a past time (undelete)",
		Long: `restore copies PATH as it was at TIME (the newest snapshot taken at or
before it) back into the live file system: over PATH (a file or symlink is
replaced; a directory is restored only where nothing is), or to DEST with
--to. The copy is written under a temporary name, fsync'd, then renamed into
place, so a crash leaves either the old state or the restored one. TIME is
RFC 3339 (2026-11-25T10:00:00Z) or seconds since the epoch; plumeria
versions PATH lists the times that hold PATH.`,
		Example: "  plumeria restore /mnt/plumeria/home/report.txt --at 2026-11-25T10:00:00Z",
		Args:    cobra.ExactArgs(1),
	}
	c.Flags().StringVar(&at, "at", "", "the time to go back to: RFC 3339 or seconds since the epoch")
	c.Flags().StringVar(&to, "to", "", "restore to this path instead of PATH")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if at == "" {
			return fmt.Errorf("--at is required (plumeria versions %s lists the times)", args[0])
		}
		t, err := history.ParseTime(at)
		if err != nil {
			return fmt.Errorf("--at %q is not a time: give RFC 3339 (2026-11-25T10:00:00Z) or seconds since the epoch", at)
		}
		m, err := timetravel.Find(args[0])
		if err != nil {
			return err
		}
		src, snap, err := m.Source(t)
		if err != nil {
			return fmt.Errorf("restore %s: %w", args[0], err)
		}
		dst := filepath.Join(m.Root, m.Rel)
		if to != "" {
			if dst, err = filepath.Abs(to); err != nil {
				return err
			}
			if dm, err := timetravel.Find(dst); err != nil || dm.Root != m.Root {
				return fmt.Errorf("--to %s: not on the mount of %s (%s)", to, args[0], m.Root)
			}
		}
		var bar *progressbar.ProgressBar
		progress := func(done, total int64) {
			if bar == nil && total > 64<<20 {
				bar = progressbar.DefaultBytes(total, "restore")
			}
			if bar != nil {
				bar.Set64(done)
			}
		}
		if err := timetravel.Restore(src, dst, progress); err != nil {
			return fmt.Errorf("restore %s from snapshot %s: %w", args[0], snap, err)
		}
		if bar != nil {
			bar.Finish()
		}
		fmt.Fprintf(os.Stdout, "restored %s as it was at %s (snapshot %s) to %s\n", m.Rel, t.UTC().Format(time.RFC3339), snap, dst)
		return nil
	}
	return c
}
