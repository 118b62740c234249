// Command plumeria is Plumeria's single binary: every role and every
// operator command is a subcommand. Each subcommand lives in its own file
// and only parses flags and calls a library.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
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
	root.AddCommand(initCmd(), tokenCmd(), nodeCmd())
	addTLSFlags(root)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		msg := err.Error()
		if tlsFlags.certs == "" && !tlsFlags.insecure && (strings.Contains(msg, "server preface") || strings.Contains(msg, "Unavailable") || strings.Contains(msg, "connection closed")) {
			// The likeliest cause: a plaintext client of a TLS cluster.
			msg += " (no --certs given: a cluster with TLS needs --certs DIR or PLUMERIA_CERTS=DIR)"
		}
		fmt.Fprintln(os.Stderr, "plumeria:", msg)
		os.Exit(1)
	}
}
