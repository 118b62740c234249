package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

func coordCmd() *cobra.Command {
	c := &cobra.Command{Use: "coord", Short: "List and remove coordinators (add one by starting `plumeria server --coordinator --join ADDR`)"}
	c.AddCommand(coordListCmd(), coordRemoveCmd())
	return c
}

func coordListCmd() *cobra.Command {
	c := &cobra.Command{
		Use:     "list",
		Short:   "Show the coordinator group: members, leader, voters, and who is up",
		Example: "  plumeria coord list --coord 127.0.0.1:7001",
		Args:    cobra.NoArgs,
	}
	connect := coordFlag(c)
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		cl, err := connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		st, _, err := fetchStatus(cmd.Context(), cl)
		if err != nil {
			return fmt.Errorf("coord list: %w", err)
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "NAME\tADDR\tROLE\tVOTER\tUP\tLAST SEEN")
		for _, m := range st.Coordinators {
			role, seen := "follower", "never"
			if m.Leader {
				role, seen = "leader", "-"
			} else if m.LastSeen >= 0 {
				seen = fmt.Sprintf("%dms ago", m.LastSeen)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%v\t%v\t%s\n", m.Name, m.Addr, role, m.Voter, m.Up, seen)
		}
		return w.Flush()
	}
	return c
}

func coordRemoveCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a coordinator from the Raft group (refused for the last one, or if the rest would lack a live majority)",
		Long: `Remove a coordinator from the Raft group, through the leader. The rest must keep a
majority of live voters. A removed coordinator that still runs stops taking part; stop its
process. Restarting it with --join adds it back (no need to wipe its data directory).`,
		Example: "  plumeria coord remove --coord 127.0.0.1:7001 c3",
		Args:    cobra.ExactArgs(1),
	}
	connect := coordFlag(c)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		cl, err := connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		err = cl.Call(cmd.Context(), func(ctx context.Context, c pb.CoordinatorClient) error {
			_, err := c.RemoveCoordinator(ctx, &pb.RemoveCoordinatorRequest{Name: args[0]})
			return err
		})
		if msg := coordclient.ErrorMessage(err); err != nil && strings.HasPrefix(msg, "coord: ") {
			return errors.New(msg)
		} else if err != nil {
			return fmt.Errorf("coord remove: %s", msg)
		}
		fmt.Printf("removed coordinator %s; stop its process (restarting it with --join adds it back)\n", args[0])
		return nil
	}
	return c
}
