package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/coord"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

func fetchStatus(ctx context.Context, cl *coordclient.Client) (*coord.Status, []byte, error) {
	var raw []byte
	err := cl.Call(ctx, func(ctx context.Context, c pb.CoordinatorClient) error {
		r, err := c.Status(ctx, &pb.StatusRequest{})
		if err == nil {
			raw = r.StatusJson
		}
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("status: %s", coordclient.ErrorMessage(err))
	}
	var st coord.Status
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, nil, fmt.Errorf("status: coordinator sent unreadable status: %w", err)
	}
	return &st, raw, nil
}

func statusCmd() *cobra.Command {
	var asJSON, watch bool
	c := &cobra.Command{
		Use:   "status [--json] [--watch]",
		Short: "Show coordinators, bricks, volumes and degraded data",
		Long:  "Show the cluster. --json prints the documented schema of docs/status-json.md.",
		Args:  cobra.NoArgs,
	}
	connect := coordFlag(c)
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON (schema: docs/status-json.md)")
	c.Flags().BoolVar(&watch, "watch", false, "refresh every second until interrupted")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		cl, err := connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		for {
			st, raw, err := fetchStatus(cmd.Context(), cl)
			if err != nil {
				return err
			}
			if watch && !asJSON {
				fmt.Print("\033[H\033[2J")
			}
			if asJSON {
				os.Stdout.Write(append(raw, '\n'))
			} else {
				printStatus(st)
			}
			if !watch {
				return nil
			}
			select {
			case <-cmd.Context().Done():
				return nil
			case <-time.After(time.Second):
			}
		}
	}
	return c
}

func printStatus(st *coord.Status) {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "map epoch %d, leader %s\n\n", st.MapEpoch, st.Leader)
	fmt.Fprintln(w, "COORDINATOR\tADDR\tROLE\tUP")
	for _, c := range st.Coordinators {
		role := "follower"
		if c.Leader {
			role = "leader"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%v\n", c.Name, c.Addr, role, c.Up)
	}
	fmt.Fprintln(w, "\nBRICK\tADDR\tSTATE\tCLASS\tUSED\tCAPACITY\tPGS\tTARGET\tDOMAIN")
	target := map[string]string{}
	for _, b := range st.Balance.Bricks {
		target[b.Name] = fmt.Sprintf("%.1f", b.Target)
	}
	for _, b := range st.Bricks {
		state := b.State
		if b.Draining {
			state += ",draining"
		}
		if b.Full {
			state += ",full"
		}
		tg := target[b.Name]
		if tg == "" {
			tg = "-"
		}
		var dom []string
		for _, k := range []string{"host", "rack", "site"} {
			if v := b.Domain[k]; v != "" {
				dom = append(dom, k+"="+v)
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", b.Name, b.Addr, colour(state), b.Class, humanBytes(b.UsedBytes), humanBytes(b.CapacityBytes),
			b.PGs, tg, strings.Join(dom, ","))
	}
	balanced := "balanced"
	if st.Balance.Deviation >= 2 {
		balanced = "rebalancing"
	}
	fmt.Fprintf(w, "balance: PG replicas per class in proportion to capacity (TARGET); largest deviation %.2f (%s)\n", st.Balance.Deviation, balanced)
	if len(st.Revoked) > 0 || len(st.Tokens) > 0 {
		fmt.Fprintf(w, "security: %d join tokens working, revoked nodes: %s\n", len(st.Tokens), strings.Join(append([]string{}, st.Revoked...), ", "))
	}
	fmt.Fprintln(w, "\nVOLUME\tREPLICAS\tPLACEMENT\tCHUNK\tPGS\tCHUNKS\tDEGRADED\tSYNCING PGS\tLIVE\tHISTORY\tSTRIPES\tSNAPSHOTS")
	for _, v := range st.Volumes {
		deg := fmt.Sprintf("%d chunks / %d pgs", v.DegradedChunks, v.DegradedPGs)
		if v.UnavailablePGs > 0 {
			deg += fmt.Sprintf(" (%d unavailable)", v.UnavailablePGs)
		}
		if v.DegradedPGs > 0 {
			deg = colour("down") + " " + deg
		}
		snaps := strings.Join(v.Snapshots, ",")
		if len(v.Snapshots) > 3 {
			snaps = fmt.Sprintf("%d (plumeria snapshot list)", len(v.Snapshots))
		}
		if sc := v.Schedule; sc != nil {
			snaps += " [" + sc.String() + "]"
		}
		live, history := spaceColumns(v)
		stripes := "-"
		if v.StripeGroups > 0 {
			stripes = fmt.Sprintf("%s in %d groups", humanBytes(v.StripeBytes), v.StripeGroups)
			if v.DegradedStripeGroups > 0 || v.SyncingStripeGroups > 0 {
				stripes += fmt.Sprintf(" (%d degraded, %d rebuilding)", v.DegradedStripeGroups, v.SyncingStripeGroups)
			}
		}
		place := "host"
		if v.Domain != "" {
			place = v.Domain
		}
		if v.Class != "" {
			place += ",class=" + v.Class
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%d\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n", v.Name, v.Replicas, place, humanBytes(int64(v.ChunkBytes)), v.PGs, v.Chunks, deg, v.SyncingPGs,
			live, history, stripes, snaps)
	}
	w.Flush()
}

// spaceColumns returns the LIVE and HISTORY cells of v: raw bytes on the
// bricks, every replica counted; "-" until a brick has reported them.
func spaceColumns(v coord.VolumeStatus) (live, history string) {
	if v.SpaceReportMsAgo < 0 {
		return "-", "-"
	}
	return humanBytes(v.LiveBytes), humanBytes(v.HistoryBytes)
}

// colour marks states on a terminal.
func colour(s string) string {
	if fi, err := os.Stdout.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return s
	}
	switch {
	case strings.HasPrefix(s, "up,"):
		return "\033[33m" + s + "\033[0m"
	case s == "up":
		return "\033[32m" + s + "\033[0m"
	case s == "down":
		return "\033[31m!\033[0m"
	}
	return "\033[31m" + s + "\033[0m"
}
