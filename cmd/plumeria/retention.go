package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/node"
	"github.com/plumeria-fs/plumeria/timetravel"
)

func retentionCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "retention",
		Short: "Say how long file versions are kept, per directory tree (volumes with file versions)",
		Long: `On a volume that keeps file versions, a directory's retention policy says
which versions of the files below it the cleaner keeps: every version for a
while (--all), then the newest of each hour (--hourly), then the newest of
each day (--daily), then of each week (--weekly); or --none (scratch: only what files read now) or
--forever. A directory without a policy inherits its parent's; the root's
default is ` + filesys.DefaultRetention.String() + `. The policy is the
extended attribute ` + filesys.RetentionXattr + ` of the directory. Every
mounted node tries a cleaner pass every ` + filesys.CleanInterval.String() + ` (one at a time in the
cluster); plumeria retention clean runs one now.`,
	}
	c.AddCommand(retentionSetCmd(), retentionShowCmd(), retentionCleanCmd())
	return c
}

func retentionSetCmd() *cobra.Command {
	var all, hourly, daily, weekly string
	var none, forever, unset bool
	c := &cobra.Command{
		Use:   "set DIR (--all D --hourly D --daily D --weekly D | --none | --forever | --unset)",
		Short: "Set a directory's retention policy (inherited below it)",
		Example: "  plumeria retention set /mnt/plumeria/home --all 1h --hourly 24h --daily 30d\n" +
			"  plumeria retention set /mnt/plumeria/tmp --none",
		Args: cobra.ExactArgs(1),
	}
	c.Flags().StringVar(&all, "all", "", "keep every version closed within this (90m, 24h, 7d)")
	c.Flags().StringVar(&hourly, "hourly", "", "keep the newest version of each hour within this")
	c.Flags().StringVar(&daily, "daily", "", "keep the newest version of each day within this")
	c.Flags().StringVar(&weekly, "weekly", "", "keep the newest version of each week within this (52w)")
	c.Flags().BoolVar(&none, "none", false, "keep no old versions")
	c.Flags().BoolVar(&forever, "forever", false, "keep every version")
	c.Flags().BoolVar(&unset, "unset", false, "remove the directory's own policy (it inherits again)")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		dir := args[0]
		if fi, err := os.Stat(dir); err != nil {
			return fmt.Errorf("retention set: %w", err)
		} else if !fi.IsDir() {
			return fmt.Errorf("retention set: %s is not a directory (a policy holds for a directory tree)", dir)
		}
		if _, err := timetravel.Find(dir); err != nil {
			return fmt.Errorf("retention set: %w", err)
		}
		var parts []string
		for _, p := range []struct{ k, v string }{{"all", all}, {"hourly", hourly}, {"daily", daily}, {"weekly", weekly}} {
			if p.v != "" {
				parts = append(parts, p.k+"="+p.v)
			}
		}
		n := 0
		for _, b := range []bool{len(parts) > 0, none, forever, unset} {
			if b {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("retention set: give --all/--hourly/--daily/--weekly, or --none, --forever or --unset alone")
		}
		if unset {
			if err := unix.Removexattr(dir, filesys.RetentionXattr); err != nil && !errors.Is(err, unix.ENODATA) {
				return fmt.Errorf("retention set %s: %w", dir, err)
			}
			fmt.Printf("%s: own policy removed; it inherits %s\n", dir, mustShow(dir))
			return nil
		}
		policy := strings.Join(parts, " ")
		switch {
		case none:
			policy = "none"
		case forever:
			policy = "forever"
		}
		r, err := filesys.ParseRetention(policy)
		if err != nil {
			return fmt.Errorf("retention set: %w", err)
		}
		if err := unix.Setxattr(dir, filesys.RetentionXattr, []byte(r.String()), 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) {
				return fmt.Errorf("retention set %s: the mount does not take extended attributes", dir)
			}
			return fmt.Errorf("retention set %s: %w", dir, err)
		}
		fmt.Printf("%s: %s\n", dir, r)
		return nil
	}
	return c
}

// policyShown is retention show's answer.
type policyShown struct {
	Path   string `json:"path"`
	Policy string `json:"policy"`
	From   string `json:"from"` // the directory whose policy it is, or "default"
}

// showPolicy finds the policy in force at path: its own (a directory's),
// or the nearest ancestor's up to the mount's root, or the default.
func showPolicy(path string) (policyShown, error) {
	m, err := timetravel.Find(path)
	if err != nil {
		return policyShown{}, err
	}
	abs := filepath.Join(m.Root, m.Rel)
	dir := abs
	if fi, err := os.Stat(abs); err != nil {
		return policyShown{}, err
	} else if !fi.IsDir() {
		dir = filepath.Dir(abs)
	}
	for {
		b := make([]byte, 256)
		n, err := unix.Getxattr(dir, filesys.RetentionXattr, b)
		switch {
		case err == nil:
			r, perr := filesys.ParseRetention(string(b[:n]))
			if perr != nil {
				return policyShown{}, fmt.Errorf("%s holds a policy that does not parse: %w", dir, perr)
			}
			return policyShown{Path: abs, Policy: r.String(), From: dir}, nil
		case !errors.Is(err, unix.ENODATA):
			return policyShown{}, fmt.Errorf("read the policy of %s: %w", dir, err)
		}
		if dir == m.Root {
			return policyShown{Path: abs, Policy: filesys.DefaultRetention.String(), From: "default"}, nil
		}
		dir = filepath.Dir(dir)
	}
}

func mustShow(dir string) string {
	p, err := showPolicy(dir)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return p.Policy + " from " + p.From
}

func retentionShowCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:     "show PATH [--json]",
		Short:   "Show the retention policy in force at PATH and where it comes from",
		Example: "  plumeria retention show /mnt/plumeria/home/report.txt",
		Args:    cobra.ExactArgs(1),
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		p, err := showPolicy(args[0])
		if err != nil {
			return fmt.Errorf("retention show: %w", err)
		}
		if asJSON {
			return json.NewEncoder(os.Stdout).Encode(p)
		}
		fmt.Printf("%s: %s (from %s)\n", p.Path, p.Policy, p.From)
		return nil
	}
	return c
}

func retentionCleanCmd() *cobra.Command {
	var vol string
	c := &cobra.Command{
		Use:   "clean --coord ADDR --volume NAME",
		Short: "Run a pass of the version cleaner now (waits for one under way)",
		Long: `clean joins the volume as an fs node of its own (no mount), walks the
directory tree with each directory's retention policy and drops the file
versions no policy keeps; the bricks then reclaim their space. Mounted
nodes run the same pass every ` + filesys.CleanInterval.String() + `.`,
		Example: "  plumeria retention clean --coord 127.0.0.1:7001 --volume default",
		Args:    cobra.NoArgs,
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
		host, _ := os.Hostname()
		id := fmt.Sprintf("cleaner-%s-%d", host, os.Getpid())
		n, err := node.MountFS(cmd.Context(), cl, vol, id, node.FSNodeOptions{CleanInterval: -1})
		if err != nil {
			return fmt.Errorf("retention clean: %w", err)
		}
		defer n.Close(cmd.Context())
		var bar *progressbar.ProgressBar
		start := time.Now()
		st, err := n.FS.CleanVersions(cmd.Context(), func(done, total int) {
			if bar == nil {
				bar = progressbar.NewOptions(total, progressbar.OptionSetDescription("clean "+vol), progressbar.OptionThrottle(200*time.Millisecond),
					progressbar.OptionSetWriter(os.Stderr), progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true),
					progressbar.OptionOnCompletion(func() { fmt.Fprintln(os.Stderr) }))
			}
			bar.Set(done)
		})
		if bar != nil {
			bar.Finish()
		}
		if errors.Is(err, filesys.ErrNoVersions) {
			return fmt.Errorf("retention clean: volume %s keeps no file versions", vol)
		}
		if err != nil {
			return fmt.Errorf("retention clean of %s: %w", vol, err)
		}
		fmt.Printf("cleaned %s in %v: %d files with versions, %d versions, %d dropped\n", vol, time.Since(start).Round(time.Millisecond), st.Files, st.Versions, st.Dropped)
		return nil
	}
	return c
}
