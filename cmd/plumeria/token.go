package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/internal/pki"
)

// `plumeria token create` and `plumeria node revoke` (docs/security.md).

func tokenCmd() *cobra.Command {
	c := &cobra.Command{Use: "token", Short: "Join tokens: how a new server or mount gets its certificate"}
	var roles string
	var ttl time.Duration
	create := &cobra.Command{
		Use:   "create",
		Short: "Make a join token (admin)",
		Long: `Make a join token. A node started with --token TOKEN checks that its coordinator's
certificate comes from the CA the token pins, proves the token's secret and receives a
certificate for its name and the roles it asks for (among the token's). A token works once
per node name, and stops working when it expires.`,
		Example: "  plumeria token create --roles brick,lock --ttl 1h\n  plumeria token create --roles client",
		Args:    cobra.NoArgs,
	}
	connect := coordFlag(create)
	create.Flags().StringVar(&roles, "roles", "coordinator,brick,lock", "roles a node may ask for with it: coordinator, brick, lock (servers) or client (mounts, gateways)")
	create.Flags().DurationVar(&ttl, "ttl", 24*time.Hour, "how long it works")
	create.RunE = func(cmd *cobra.Command, args []string) error {
		list := splitList(roles)
		if err := pki.ValidateRoles(list); err != nil {
			return fmt.Errorf("--roles: %w", err)
		}
		if ttl < time.Second {
			return fmt.Errorf("--ttl %v: at least 1s", ttl)
		}
		cl, err := connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		var resp *pb.CreateJoinTokenResponse
		err = cl.Call(context.Background(), func(ctx context.Context, c pb.CoordinatorClient) error {
			var err error
			resp, err = c.CreateJoinToken(ctx, &pb.CreateJoinTokenRequest{Roles: list, TtlS: int64(ttl / time.Second)})
			return err
		})
		if err != nil {
			return fmt.Errorf("token create: %w", err)
		}
		fmt.Println(resp.Token)
		fmt.Fprintf(cmd.ErrOrStderr(), "roles %s, expires %s\n", strings.Join(list, ","), time.Unix(resp.ExpiresUnixS, 0).UTC().Format(time.RFC3339))
		return nil
	}
	c.AddCommand(create)
	return c
}

func nodeCmd() *cobra.Command {
	c := &cobra.Command{Use: "node", Short: "Cluster members' identities"}
	revoke := &cobra.Command{
		Use:   "revoke NAME",
		Short: "Refuse a node from now on, at every port, whatever certificate it holds (admin)",
		Long: `Refuse a node from now on. Every member refuses calls and connections from a
certificate naming it once it has the map that lists it (within a heartbeat); its
certificate cannot be renewed and the name cannot join again. Take its data off first
(plumeria brick drain) if it is a brick.`,
		Example: "  plumeria node revoke m2",
		Args:    cobra.ExactArgs(1),
	}
	connect := coordFlag(revoke)
	revoke.RunE = func(cmd *cobra.Command, args []string) error {
		cl, err := connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		err = cl.Call(context.Background(), func(ctx context.Context, c pb.CoordinatorClient) error {
			_, err := c.RevokeNode(ctx, &pb.RevokeNodeRequest{Name: args[0]})
			return err
		})
		if err != nil {
			return fmt.Errorf("node revoke %s: %w", args[0], err)
		}
		fmt.Printf("revoked %s\n", args[0])
		return nil
	}
	c.AddCommand(revoke)
	return c
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
