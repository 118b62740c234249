package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/internal/doctor"
	"github.com/plumeria-fs/plumeria/internal/pki"
)

func doctorCmd() *cobra.Command {
	var o doctor.Options
	var coord string
	c := &cobra.Command{
		Use:   "doctor [--coord ADDR,...] [--listen HOST:PORT] [--data DIR] [--skip-fuse]",
		Short: "Check this node's environment and say what to fix",
		Long: `Check this node's environment, one line per check: OK, WARN or FAIL, what was
found and what to fix. Exits non-zero if any check fails. Checks: the OS and open-file
limit; FUSE (/dev/fuse, the kernel module, root or fusermount3); with --listen, that the
port is free or held by plumeria; with --data, that the directory is writable and has free
space; with --coord, that each coordinator answers and how far its clock is from this one;
the certificates of --certs (or PLUMERIA_CERTS) and how long they last.`,
		Example: "  plumeria doctor --coord 10.0.0.1:7001 --listen 10.0.0.2:7001 --data /var/lib/plumeria",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, a := range strings.Split(coord, ",") {
				if a = strings.TrimSpace(a); a != "" {
					o.Coord = append(o.Coord, a)
				}
			}
			// The identity is loaded here, not before the command, so
			// that a broken certs directory is a finding, not an exit.
			o.Certs, o.Insecure = tlsFlags.certs, tlsFlags.insecure
			o.Identity, o.IdentityErr = cliIdentity()
			pki.SetDefault(o.Identity)
			rs := doctor.Run(cmd.Context(), o)
			for _, r := range rs {
				fmt.Println(r)
			}
			if fails, _ := doctor.Count(rs); fails > 0 {
				return fmt.Errorf("doctor: %d of %d checks failed", fails, len(rs))
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&coord, "coord", "", "comma-separated coordinator addresses to reach and compare clocks with")
	f.StringVar(&o.Listen, "listen", "", "HOST:PORT the server listens on: free, or held by plumeria")
	f.StringVar(&o.Data, "data", "", "the server's data directory: writable, with free space")
	f.BoolVar(&o.SkipFUSE, "skip-fuse", false, "skip the FUSE checks (nodes that only run servers, no mounts)")
	return selfIdentity(c)
}
