package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/fsx"
)

func fsxCmd() *cobra.Command {
	var (
		ops            int
		seed           uint64
		maxSize, maxOp string
		checkEvery     int
		disable        []string
		verbose        bool
	)
	c := &cobra.Command{
		Use:   "fsx FILE [--ops N] [--seed S]",
		Short: "Data integrity exerciser: random I/O on FILE checked against an in-memory model",
		Long: "Creates or truncates FILE and applies seeded random writes, reads, truncates, fallocates,\n" +
			"mmap reads, fsyncs and reopens, comparing every read with a model of the file.\n" +
			"Prints per-operation counts; on a mismatch prints the seed, operation, offset, bytes and\n" +
			"the last 20 operations, and exits non-zero. The same seed replays the same operations.\n" +
			"Kinds for --disable: " + strings.Join(fsx.Kinds(), ", "),
		Args: cobra.ExactArgs(1),
	}
	c.Flags().IntVar(&ops, "ops", 10000, "operations to run")
	c.Flags().Uint64Var(&seed, "seed", 0, "random seed (0: pick one and print it)")
	c.Flags().StringVar(&maxSize, "max-size", "1MiB", "largest file size")
	c.Flags().StringVar(&maxOp, "max-op", "64KiB", "largest read or write")
	c.Flags().IntVar(&checkEvery, "check-every", 1000, "compare the whole file every N operations (negative: only at the end)")
	c.Flags().StringSliceVar(&disable, "disable", nil, "operation kinds not to perform")
	c.Flags().BoolVarP(&verbose, "verbose", "v", false, "log every operation to stderr")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		maxFile, err := parseBytes(maxSize)
		if err != nil || maxFile <= 0 {
			return fmt.Errorf("--max-size: want a positive size")
		}
		maxOpBytes, err := parseBytes(maxOp)
		if err != nil || maxOpBytes <= 0 {
			return fmt.Errorf("--max-op: want a positive size")
		}
		cfg := fsx.Config{Ops: ops, Seed: seed, MaxFileBytes: maxFile, MaxOpBytes: maxOpBytes, CheckEvery: checkEvery, Disable: disable}
		if verbose {
			cfg.Log = os.Stderr
		}
		st, err := fsx.Run(cmd.Context(), args[0], cfg)
		if st.Ops > 0 || err == nil {
			fmt.Print(st)
		}
		var m *fsx.MismatchError
		if errors.As(err, &m) {
			return fmt.Errorf("%s: %w", args[0], err)
		}
		return err
	}
	return c
}
