package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/node"
	"github.com/plumeria-fs/plumeria/timetravel"
)

func policyCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "policy",
		Short: "Say how the data of a directory tree is kept: copies or erasure coding, failure domain, storage class",
		Long: `A directory's availability policy says how the data of the files below it
is kept: copies=N whole copies, or ec=K+M (K data and M parity shards of
each chunk), spread over distinct domain=host|rack|site (host by default),
on bricks of class=NAME (any by default). A directory without a policy
inherits its parent's; with none up to the root, data stays in the volume's
own replication. The policy is the extended attribute ` + filesys.PolicyXattr + `.

New data always lands in the volume's own replication; every mounted node's
mover moves files into their policy's layout in the background: at once
when a policy is set or a file is moved into a directory of another
policy, and every ` + filesys.MoveInterval.String() + ` otherwise, once a file has not changed for
` + filesys.MoveQuietDefault.String() + `. Files stay readable and writable throughout, and data in
stripes moves back to the volume's own replication when that becomes the
policy.`,
	}
	c.AddCommand(policySetCmd(), policyShowCmd(), policyApplyCmd())
	return c
}

func policySetCmd() *cobra.Command {
	var unset, wait bool
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "set DIR SPEC... | set DIR --unset",
		Short: "Set a directory's availability policy (inherited below it)",
		Example: "  plumeria policy set /mnt/plumeria/archive ec=8+3 domain=host\n" +
			"  plumeria policy set /mnt/plumeria/db copies=3 domain=rack class=ssd --wait",
		Args: cobra.MinimumNArgs(1),
	}
	c.Flags().BoolVar(&unset, "unset", false, "remove the directory's own policy (it inherits again)")
	c.Flags().BoolVar(&wait, "wait", false, "then wait until the data below complies, printing progress")
	c.Flags().DurationVar(&timeout, "timeout", 0, "with --wait: give up after this long (0: never)")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		dir := args[0]
		if fi, err := os.Stat(dir); err != nil {
			return fmt.Errorf("policy set: %w", err)
		} else if !fi.IsDir() {
			return fmt.Errorf("policy set: %s is not a directory (a policy holds for a directory tree)", dir)
		}
		if _, err := timetravel.Find(dir); err != nil {
			return fmt.Errorf("policy set: %w", err)
		}
		switch {
		case unset && len(args) > 1:
			return fmt.Errorf("policy set: give a policy or --unset, not both")
		case unset:
			if err := unix.Removexattr(dir, filesys.PolicyXattr); err != nil && !errors.Is(err, unix.ENODATA) {
				return fmt.Errorf("policy set %s: %w", dir, err)
			}
			fmt.Printf("%s: own policy removed\n", dir)
		case len(args) == 1:
			return fmt.Errorf("policy set: give a policy (copies=N or ec=K+M, domain=..., class=...) or --unset")
		default:
			p, err := filesys.ParsePolicy(strings.Join(args[1:], " "))
			if err != nil {
				return fmt.Errorf("policy set: %w", err)
			}
			if err := unix.Setxattr(dir, filesys.PolicyXattr, []byte(p.String()), 0); err != nil {
				switch {
				case errors.Is(err, unix.ENOTSUP):
					return fmt.Errorf("policy set %s: the mount does not take extended attributes", dir)
				case errors.Is(err, unix.EINVAL):
					return fmt.Errorf("policy set %s: the cluster refuses %s (too few bricks, domains or bricks of the class? see the fs node's log): %w", dir, p, err)
				}
				return fmt.Errorf("policy set %s: %w", dir, err)
			}
			fmt.Printf("%s: %s\n", dir, p)
		}
		if !wait {
			return nil
		}
		return waitCompliant(dir, timeout)
	}
	return c
}

// waitCompliant polls policy show of dir until its data complies.
func waitCompliant(dir string, timeout time.Duration) error {
	start := time.Now()
	last := ""
	for {
		s, err := showAvailability(dir)
		if err != nil {
			return fmt.Errorf("policy set --wait: %w", err)
		}
		line := fmt.Sprintf("%s: %s of %s where %s wants them (%s)", dir, humanBytes(s.CompliantBytes), humanBytes(s.TotalBytes), s.Policy, layoutsText(s.Layouts))
		if line != last {
			fmt.Fprintln(os.Stderr, line)
			last = line
		}
		if s.Compliant {
			fmt.Printf("%s: compliant after %v\n", dir, time.Since(start).Round(time.Second))
			return nil
		}
		if s.Note != "" {
			return fmt.Errorf("policy set --wait: %s", s.Note)
		}
		if timeout > 0 && time.Since(start) > timeout {
			return fmt.Errorf("policy set --wait: not compliant after %v", timeout)
		}
		time.Sleep(2 * time.Second)
	}
}

// availabilityShown is policy show's answer (--json).
type availabilityShown struct {
	Path           string           `json:"path"`
	Policy         string           `json:"policy"` // "home": the volume's own replication
	From           string           `json:"from"`   // the directory whose policy it is, or "volume"
	Home           string           `json:"home"`   // the volume's own replication
	Files          int              `json:"files"`
	InlineFiles    int              `json:"inline_files"` // data in the inode: nothing to move, compliant
	TotalBytes     int64            `json:"total_bytes"`
	CompliantBytes int64            `json:"compliant_bytes"`
	Layouts        map[string]int64 `json:"layouts"` // bytes by where they are: "home", "ec=4+2", ...
	Compliant      bool             `json:"compliant"`
	Truncated      bool             `json:"truncated,omitempty"` // a directory with more files than one look covers
	Note           string           `json:"note,omitempty"`
}

// availabilityOf combines the policy found at path (text "" when none:
// the home; from the directory it comes from) with the layout attribute
// read there (filesys.LayoutXattr).
func availabilityOf(path, policy, from string, info filesys.LayoutInfo) (availabilityShown, error) {
	s := availabilityShown{Path: path, Policy: "home", From: from, Home: info.Home, Files: info.Files, InlineFiles: info.InlineFiles,
		TotalBytes: info.TotalBytes, Layouts: info.Layouts, Truncated: info.Truncated}
	if s.Layouts == nil {
		s.Layouts = map[string]int64{}
	}
	home, err := filesys.ParsePolicy(info.Home)
	if err != nil {
		return availabilityShown{}, fmt.Errorf("the volume's replication %q: %w", info.Home, err)
	}
	var p filesys.Policy
	if policy != "" {
		if p, err = filesys.ParsePolicy(policy); err != nil {
			return availabilityShown{}, fmt.Errorf("%s holds a policy that does not parse: %w", from, err)
		}
	}
	want := filesys.TargetName(p, home)
	s.Policy = want
	if info.CompliantBytes != nil {
		s.CompliantBytes = *info.CompliantBytes // a directory: per file, by the policy each is under
	} else {
		s.CompliantBytes = s.Layouts[want]
	}
	s.Compliant = s.CompliantBytes == s.TotalBytes
	if !s.Compliant && want == "home" && info.CompliantBytes == nil {
		s.Note = "data in stripes under the volume's own replication: the mover moves it back home"
	}
	return s, nil
}

// showAvailability finds the policy in force at path (its own, a
// directory's, or the nearest ancestor's up to the mount's root) and
// reads where its data is.
func showAvailability(path string) (availabilityShown, error) {
	m, err := timetravel.Find(path)
	if err != nil {
		return availabilityShown{}, err
	}
	abs := filepath.Join(m.Root, m.Rel)
	dir := abs
	if fi, err := os.Stat(abs); err != nil {
		return availabilityShown{}, err
	} else if !fi.IsDir() {
		dir = filepath.Dir(abs)
	}
	policy, from := "", "volume"
	for {
		b := make([]byte, 512)
		n, err := unix.Getxattr(dir, filesys.PolicyXattr, b)
		if err == nil {
			policy, from = string(b[:n]), dir
			break
		}
		if !errors.Is(err, unix.ENODATA) {
			return availabilityShown{}, fmt.Errorf("read the policy of %s: %w", dir, err)
		}
		if dir == m.Root {
			break
		}
		dir = filepath.Dir(dir)
	}
	b := make([]byte, 64<<10)
	n, err := unix.Getxattr(abs, filesys.LayoutXattr, b)
	if errors.Is(err, unix.ENODATA) {
		return availabilityShown{}, fmt.Errorf("%s: the mount does not tell where data is (an fs node without availability policies, or a snapshot)", abs)
	}
	if err != nil {
		return availabilityShown{}, fmt.Errorf("read the layout of %s: %w", abs, err)
	}
	var info filesys.LayoutInfo
	if err := json.Unmarshal(b[:n], &info); err != nil {
		return availabilityShown{}, fmt.Errorf("the layout of %s: %w", abs, err)
	}
	return availabilityOf(abs, policy, from, info)
}

func policyShowCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "show PATH [--json]",
		Short: "Show the availability policy in force at PATH, where it comes from, and whether the data complies",
		Long: `show reads where the data of PATH is (a file, or every file below a
directory: one look at each file's layout, so O(files), at most 10000). A
directory complies when each file below it is where the policy it is under
wants it.`,
		Example: "  plumeria policy show /mnt/plumeria/archive --json",
		Args:    cobra.ExactArgs(1),
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		s, err := showAvailability(args[0])
		if err != nil {
			return fmt.Errorf("policy show: %w", err)
		}
		if asJSON {
			return json.NewEncoder(os.Stdout).Encode(s)
		}
		state := "compliant"
		if !s.Compliant {
			state = fmt.Sprintf("not compliant yet: %s of %s where it wants them", humanBytes(s.CompliantBytes), humanBytes(s.TotalBytes))
		}
		fmt.Printf("%s: %s (from %s; the volume's own: %s)\n  %s; %d files (%d inline), %s\n", s.Path, s.Policy, s.From, s.Home,
			state, s.Files, s.InlineFiles, layoutsText(s.Layouts))
		if s.Truncated {
			fmt.Println("  (only the first 10000 files looked at)")
		}
		if s.Note != "" {
			fmt.Println("  " + s.Note)
		}
		return nil
	}
	return c
}

func layoutsText(l map[string]int64) string {
	if len(l) == 0 {
		return "no data outside inodes"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(l)) {
		parts = append(parts, k+": "+humanBytes(l[k]))
	}
	return strings.Join(parts, ", ")
}

func policyApplyCmd() *cobra.Command {
	var vol string
	var quiet time.Duration
	c := &cobra.Command{
		Use:   "apply --coord ADDR --volume NAME",
		Short: "Run a pass of the mover now: move every file into its policy's layout (waits for one under way)",
		Long: `apply joins the volume as an fs node of its own (no mount), walks the
directory tree with each directory's availability policy and moves the
files not where their policy wants them. Mounted nodes run the same pass
every ` + filesys.MoveInterval.String() + ` and at once when a policy changes.`,
		Example: "  plumeria policy apply --coord 127.0.0.1:7001 --volume default --quiet 0",
		Args:    cobra.NoArgs,
	}
	connect := coordFlag(c)
	c.Flags().StringVar(&vol, "volume", "", "volume name")
	c.Flags().DurationVar(&quiet, "quiet", filesys.MoveQuietDefault, "leave files changed within this long (0: move them too)")
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
		id := fmt.Sprintf("mover-%s-%d", host, os.Getpid())
		if quiet == 0 {
			quiet = -1 // filesys: below 0 is no wait
		}
		n, err := node.MountFS(cmd.Context(), cl, vol, id, node.FSNodeOptions{CleanInterval: -1, MoveInterval: -1, MoveQuiet: quiet})
		if err != nil {
			return fmt.Errorf("policy apply: %w", err)
		}
		defer n.Close(cmd.Context())
		var bar *progressbar.ProgressBar
		start := time.Now()
		st, err := n.FS.MoveData(cmd.Context(), func(done, total int, st filesys.MoveStats) {
			if bar == nil {
				bar = progressbar.NewOptions(total, progressbar.OptionSetDescription("move "+vol), progressbar.OptionThrottle(200*time.Millisecond),
					progressbar.OptionSetWriter(os.Stderr), progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true),
					progressbar.OptionOnCompletion(func() { fmt.Fprintln(os.Stderr) }))
			}
			bar.Describe(fmt.Sprintf("move %s (%s moved)", vol, humanBytes(st.MovedBytes)))
			bar.Set(done)
		})
		if bar != nil {
			bar.Finish()
		}
		if err != nil {
			return fmt.Errorf("policy apply on %s: %w", vol, err)
		}
		fmt.Printf("applied policies on %s in %v: %d files, %d moved (%s), %d pending (%d changed recently, %d in stripes under the home policy, %d failed)\n",
			vol, time.Since(start).Round(time.Millisecond), st.Files, st.Moved, humanBytes(st.MovedBytes), st.Pending(), st.Quiet, st.Unmovable, st.Failed)
		return nil
	}
	return c
}
