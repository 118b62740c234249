package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/filesys/layout"
	"github.com/plumeria-fs/plumeria/timetravel"
)

func quotaCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "quota",
		Short: "Limit the bytes and inodes of a directory tree (directory quotas)",
		Long: `A directory quota limits what the tree below a directory holds: bytes (the
logical size of its regular files and symlink targets, like CephFS rbytes)
and inodes (its files, directories, symlinks and nodes). Every node
enforces it exactly: a write, create or truncate that would take the tree
past a limit fails with EDQUOT ("Disk quota exceeded"), and deleting frees
at once. Renames and hard links into or out of a quota directory fail with
EXDEV (mv then copies). Quotas nest (4 deep): a file counts in every quota
above it. The quota is the extended
attribute ` + filesys.QuotaXattr + ` (root sets it; anyone reads it as
` + filesys.QuotaUserXattr + `); ` + filesys.RbytesXattr + ` and ` + filesys.RfilesXattr + ` read the usage.
See docs/quotas.md.`,
	}
	c.AddCommand(quotaSetCmd(), quotaShowCmd())
	return c
}

func quotaSetCmd() *cobra.Command {
	var bytesFlag, inodesFlag string
	c := &cobra.Command{
		Use:   "set DIR [--bytes SIZE] [--inodes COUNT]",
		Short: "Set a directory's quota (0 or none removes a limit)",
		Example: "  plumeria quota set /mnt/plumeria/projects/a --bytes 10GiB --inodes 1M\n" +
			"  plumeria quota set /mnt/plumeria/projects/a --inodes none",
		Args: cobra.ExactArgs(1),
	}
	c.Flags().StringVar(&bytesFlag, "bytes", "", "limit on bytes: 4096, 64MiB, 10GiB; 0 or none: no limit")
	c.Flags().StringVar(&inodesFlag, "inodes", "", "limit on inodes: 1000, 10k, 1M (decimal); 0 or none: no limit")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		dir := args[0]
		if err := quotaDir(dir); err != nil {
			return fmt.Errorf("quota set: %w", err)
		}
		var spec []string
		if cmd.Flags().Changed("bytes") {
			n, err := quotaBytes(bytesFlag)
			if err != nil {
				return fmt.Errorf("quota set: --bytes %w", err)
			}
			spec = append(spec, "bytes="+n)
		}
		if cmd.Flags().Changed("inodes") {
			n, err := quotaCount(inodesFlag)
			if err != nil {
				return fmt.Errorf("quota set: --inodes %w", err)
			}
			spec = append(spec, "inodes="+n)
		}
		if len(spec) == 0 {
			return errors.New("quota set: give --bytes and/or --inodes (0 or none removes a limit)")
		}
		if err := setQuota(dir, strings.Join(spec, " ")); err != nil {
			return err
		}
		info, err := readQuota(dir)
		if err != nil {
			return fmt.Errorf("quota set: %w", err)
		}
		printQuota(os.Stdout, dir, info)
		if over(info.UsedBytes, info.LimitBytes) || over(info.UsedInodes, info.LimitInodes) {
			fmt.Fprintf(os.Stderr, "warning: %s already uses more than the limit: nothing more is admitted until enough is deleted\n", dir)
		}
		return nil
	}
	return c
}

func over(used int64, limit uint64) bool { return limit > 0 && used > int64(limit) }

// quotaDir checks that dir is a directory on a Plumeria mount.
func quotaDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (a quota holds for a directory tree)", dir)
	}
	if _, err := timetravel.Find(dir); err != nil {
		return err
	}
	return nil
}

// quotaBytes reads a byte limit: a size with a binary unit, 0 or none.
func quotaBytes(s string) (string, error) {
	return quotaLimit(s, "a size like 4096, 64MiB or 10GiB", func(s string) (uint64, bool) {
		n, err := parseUint(s)
		return n, err == nil && n <= 1<<62
	})
}

// quotaCount reads an inode limit: a count with an optional decimal
// suffix k, M, G; 0 or none.
func quotaCount(s string) (string, error) {
	return quotaLimit(s, "a count like 1000, 10k or 1M", func(s string) (uint64, bool) {
		mul := uint64(1)
		for suffix, m := range map[string]uint64{"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9} {
			if strings.HasSuffix(s, suffix) {
				s, mul = strings.TrimSuffix(s, suffix), m
				break
			}
		}
		n, err := strconv.ParseUint(s, 10, 64)
		return n * mul, err == nil && n <= (1<<62)/mul
	})
}

// quotaLimit reads a limit as the quota attribute takes it: "none" for 0
// or none, else the number parse makes of s (false: s is not what is
// described).
func quotaLimit(s, what string, parse func(string) (uint64, bool)) (string, error) {
	s = strings.TrimSpace(s)
	if s == "none" || s == "0" {
		return "none", nil
	}
	if strings.HasPrefix(s, "-") {
		return "", fmt.Errorf("%q: a limit cannot be negative (0 or none removes it)", s)
	}
	n, ok := parse(s)
	if !ok {
		return "", fmt.Errorf("%q: not %s (or 0/none)", s, what)
	}
	return strconv.FormatUint(n, 10), nil
}

// setQuota sets the quota attribute; while the file system counts what
// is below a directory getting its first quota, it prints progress.
func setQuota(dir, spec string) error {
	done := make(chan error, 1)
	go func() { done <- unix.Setxattr(dir, filesys.QuotaXattr, []byte(spec), 0) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return quotaSetError(dir, spec, err)
		case <-tick.C:
			b, errB := getxattrString(dir, filesys.RbytesXattr)
			n, errN := getxattrString(dir, filesys.RfilesXattr)
			if errB == nil && errN == nil {
				fmt.Fprintf(os.Stderr, "%s: counting what is below: %s inodes, %s bytes so far\n", dir, n, b)
			}
		}
	}
}

func quotaSetError(dir, spec string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOTSUP):
		return fmt.Errorf("quota set %s: the mount does not take extended attributes (not a Plumeria mount?)", dir)
	case errors.Is(err, unix.EINVAL):
		return fmt.Errorf("quota set %s: refused (%s): quotas nest at most %d deep, and something below %s would be in more (or a quota above changed meanwhile: set it again): %w", dir, spec, layout.RealmsMax, dir, err)
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("quota set %s: not a directory", dir)
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("quota set %s: setting a quota needs root (CAP_SYS_ADMIN: %s is a trusted attribute)", dir, filesys.QuotaXattr)
	}
	return fmt.Errorf("quota set %s: %w", dir, err)
}

func getxattrString(path, name string) (string, error) {
	buf := make([]byte, 64<<10)
	n, err := unix.Getxattr(path, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// readQuota reads dir's QuotaInfo.
func readQuota(dir string) (filesys.QuotaInfo, error) {
	var info filesys.QuotaInfo
	s, err := getxattrString(dir, filesys.QuotaInfoXattr)
	switch {
	case errors.Is(err, unix.ENODATA):
		return info, fmt.Errorf("%s has no quota (plumeria quota set %s --bytes SIZE)", dir, dir)
	case errors.Is(err, unix.ENOTSUP):
		return info, fmt.Errorf("%s: the mount does not take extended attributes (not a Plumeria mount?)", dir)
	case err != nil:
		return info, fmt.Errorf("read the quota of %s: %w", dir, err)
	}
	if err := json.Unmarshal([]byte(s), &info); err != nil {
		return info, fmt.Errorf("the quota of %s: %w", dir, err)
	}
	return info, nil
}

func quotaShowCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:     "show DIR",
		Short:   "Show a directory's quota: limits, exact usage, what each node holds",
		Example: "  plumeria quota show /mnt/plumeria/projects/a --json",
		Args:    cobra.ExactArgs(1),
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print filesys.QuotaInfo (version 1) as JSON")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		dir := args[0]
		if err := quotaDir(dir); err != nil {
			return fmt.Errorf("quota show: %w", err)
		}
		info, err := readQuota(dir)
		if err != nil {
			return fmt.Errorf("quota show: %w", err)
		}
		if asJSON {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(info)
		}
		printQuota(os.Stdout, dir, info)
		return nil
	}
	return c
}

func printQuota(w io.Writer, dir string, info filesys.QuotaInfo) {
	fmt.Fprintf(w, "%s\n", dir)
	line := func(what string, used int64, limit uint64, human func(int64) string) {
		if limit == 0 {
			fmt.Fprintf(w, "  %-7s %s used, no limit\n", what, human(used))
			return
		}
		fmt.Fprintf(w, "  %-7s %s used of %s, %s left\n", what, human(used), human(int64(limit)), human(max(int64(limit)-used, 0)))
	}
	line("bytes", info.UsedBytes, info.LimitBytes, func(n int64) string { return fmt.Sprintf("%d (%s)", n, humanBytes(n)) })
	line("inodes", info.UsedInodes, info.LimitInodes, func(n int64) string { return strconv.FormatInt(n, 10) })
	if info.Counting {
		fmt.Fprintf(w, "  still counting what was below when the quota was set (usage partial; if that set was interrupted, set the quota again to resume)\n")
	}
	for _, s := range info.Shares {
		node := s.Node
		if node == "" {
			node = "(slot free)"
		}
		held := func(n int64, human func(int64) string) string {
			if n < 0 {
				return "unlimited"
			}
			return human(n)
		}
		fmt.Fprintf(w, "  slot %d %s: charged %d bytes, %d inodes; holds %s bytes, %s inodes more\n", s.Slot, node,
			s.ChargedBytes, s.ChargedInode, held(s.HeldBytes, humanBytes), held(s.HeldInodes, func(n int64) string { return strconv.FormatInt(n, 10) }))
	}
}
