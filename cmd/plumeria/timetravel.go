package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/filesys/history"
	"github.com/plumeria-fs/plumeria/timetravel"
)

func versionsCmd() *cobra.Command {
	var at string
	c := &cobra.Command{
		Use:   "versions PATH [--at TIME]",
		Short: "List a file's versions (each close that changed it) and the states it had in the volume's snapshots",
		Long: `versions reads PATH's past through its mount (MNT/.plumeria). On a volume
that keeps file versions (plumeria volume create --file-versions, plumeria
up --file-versions), each close of a file that changed it made a version:
one line each, oldest first, with when it was closed, its size and the node
that closed it. With --at, the file PATH named at that time is listed (one
deleted or renamed since). Then, if the volume has snapshots, one line per
state PATH had in them, with the snapshots that hold it, and the live one.
restore --at CLOSED brings a version back.`,
		Example: "  plumeria versions /mnt/plumeria/home/report.txt\n  plumeria versions /mnt/plumeria/home/old.txt --at 2026-11-25T10:00:00Z",
		Args:    cobra.ExactArgs(1),
	}
	c.Flags().StringVar(&at, "at", "", "list the file PATH named at this time (RFC 3339 or seconds since the epoch)")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		var t time.Time
		if at != "" {
			var err error
			if t, err = history.ParseTime(at); err != nil {
				return fmt.Errorf("--at %q is not a time: give RFC 3339 (2026-11-25T10:00:00Z) or seconds since the epoch", at)
			}
		}
		m, err := timetravel.Find(args[0])
		if err != nil {
			return err
		}
		fvs, kept, err := m.FileVersions(t)
		if err != nil && !(at == "" && errors.Is(err, fs.ErrNotExist)) {
			return fmt.Errorf("versions of %s: %w", args[0], err)
		}
		if kept {
			fmt.Printf("%-8s %-30s %12s %-11s %s\n", "VERSION", "CLOSED", "SIZE", "MODE", "NODE")
			for _, v := range fvs {
				if v.OlderShown {
					fmt.Printf("(%d older versions not shown)\n", v.Version)
					continue
				}
				fmt.Printf("%-8d %-30s %12d %-11s %s\n", v.Version, v.Closed.UTC().Format(time.RFC3339Nano), v.Size,
					fs.FileMode(v.Mode&0o777).String(), v.Node)
			}
			if len(fvs) == 0 {
				fmt.Println("(no version yet: a version is made when the file is closed after a change)")
			}
		}
		if at != "" {
			if !kept {
				return fmt.Errorf("%s at %s: no file versions (the volume keeps none, or it was not a regular file)", args[0], at)
			}
			return nil
		}
		vs, err := m.Versions()
		if err != nil {
			return fmt.Errorf("versions of %s: %w", args[0], err)
		}
		if len(vs) == 0 && !kept {
			return fmt.Errorf("%s is in no snapshot and does not exist now (a deleted file: plumeria versions %s --at TIME)", args[0], args[0])
		}
		if kept && len(vs) <= 1 {
			return nil // no snapshots: the live state is the newest version
		}
		if kept {
			fmt.Println()
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
	}
	return c
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
		Long: `restore copies PATH as it was at TIME (on a volume that keeps file versions,
each file's newest version closed by then; otherwise the newest snapshot
taken at or before it) back into the live file system: over PATH (a file or symlink is
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
			return fmt.Errorf("restore %s from %s: %w", args[0], snap, err)
		}
		if bar != nil {
			bar.Finish()
		}
		from := "snapshot " + snap
		if snap == "file versions" {
			from = snap
		}
		fmt.Fprintf(os.Stdout, "restored %s as it was at %s (%s) to %s\n", m.Rel, t.UTC().Format(time.RFC3339Nano), from, dst)
		return nil
	}
	return c
}
