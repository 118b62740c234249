package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

func brickCmd() *cobra.Command {
	c := &cobra.Command{Use: "brick", Short: "Drain and remove bricks (add one by starting `plumeria server --brick`)"}
	c.AddCommand(brickDrainCmd(), brickRemoveCmd())
	return c
}

func brickDrainCmd() *cobra.Command {
	var noWait bool
	c := &cobra.Command{
		Use:     "drain NAME",
		Short:   "Move every placement group off a brick, showing progress, so it can be removed",
		Example: "  plumeria brick drain --coord 127.0.0.1:7001 b3 && plumeria brick remove --coord 127.0.0.1:7001 b3",
		Args:    cobra.ExactArgs(1),
	}
	connect := coordFlag(c)
	c.Flags().BoolVar(&noWait, "no-wait", false, "start the drain and return")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		cl, err := connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		var total int64
		err = cl.Call(cmd.Context(), func(ctx context.Context, c pb.CoordinatorClient) error {
			r, err := c.DrainBrick(ctx, &pb.DrainBrickRequest{Name: args[0]})
			if err == nil {
				total = r.PgsRemaining
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("drain: %s", coordclient.ErrorMessage(err))
		}
		if noWait {
			fmt.Printf("draining %s: %d placement groups to move\n", args[0], total)
			return nil
		}
		return waitDrained(cmd.Context(), cl, args[0], total)
	}
	return c
}

// waitDrained polls status and shows a bar of placement groups moved.
func waitDrained(ctx context.Context, cl *coordclient.Client, name string, total int64) error {
	bar := progressbar.NewOptions64(total, progressbar.OptionSetDescription("draining "+name+" (placement groups and stripe group positions)"),
		progressbar.OptionSetWriter(os.Stderr), progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(os.Stderr) }))
	stuck := time.Now()
	last := total
	for {
		st, _, err := fetchStatus(ctx, cl)
		if err != nil {
			return err
		}
		remaining := int64(-1)
		for _, b := range st.Bricks {
			if b.Name == name {
				remaining = int64(b.PGs)
			}
		}
		if remaining < 0 {
			return fmt.Errorf("drain: brick %s disappeared from the map", name)
		}
		_ = bar.Set64(total - remaining)
		if remaining == 0 {
			_ = bar.Finish()
			fmt.Printf("brick %s drained; remove it with `plumeria brick remove %s`\n", name, name)
			return nil
		}
		if remaining != last {
			last, stuck = remaining, time.Now()
		} else if time.Since(stuck) > 2*time.Minute {
			return fmt.Errorf("drain: %s still holds %d placement groups and nothing moved for 2 minutes; "+
				"check `plumeria status` for bricks that are down or a lack of eligible bricks on other hosts", name, remaining)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drain: interrupted with %d placement groups left (the drain continues in the background)", remaining)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func brickRemoveCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a drained brick from the cluster map",
		Args:  cobra.ExactArgs(1),
	}
	connect := coordFlag(c)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		cl, err := connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		err = cl.Call(cmd.Context(), func(ctx context.Context, c pb.CoordinatorClient) error {
			_, err := c.RemoveBrick(ctx, &pb.RemoveBrickRequest{Name: args[0]})
			return err
		})
		if err != nil {
			return fmt.Errorf("remove: %s", coordclient.ErrorMessage(err))
		}
		fmt.Printf("brick %s removed; it can be stopped\n", args[0])
		return nil
	}
	return c
}
