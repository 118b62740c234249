// Command plumeria is Plumeria's single binary: every role and every
// operator command is a subcommand. Each subcommand lives in its own file
// and only parses flags and calls a library.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "plumeria",
		Short:         "Plumeria: a cluster file system over replicated virtual disks",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(serverCmd(), volumeCmd(), vdiskCmd(), brickCmd(), statusCmd(), upCmd(), benchCmd(), lockCmd(), fsxCmd(), formatCmd(), mountCmd(), gatewayCmd())
	root.AddCommand(fsckCmd())
	root.AddCommand(coordCmd(), doctorCmd(), snapshotCmd(), versionsCmd(), restoreCmd(), retentionCmd(), policyCmd(), quotaCmd())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "plumeria:", err)
		os.Exit(1)
	}
}
