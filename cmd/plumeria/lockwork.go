package main

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/lock"
	lockclerk "github.com/plumeria-fs/plumeria/lock/clerk"
	"github.com/plumeria-fs/plumeria/node"
)

func lockCmd() *cobra.Command {
	c := &cobra.Command{Use: "lock", Short: "Lock service test tools"}
	c.AddCommand(lockWorkloadCmd())
	return c
}

// lockWorkloadCmd runs one clerk (as an fs node would) that takes write
// locks at random and records each use as a line "use ID LOCK START END"
// (unix nanoseconds) and each recovery it runs as "recovered DEAD SESSION",
// so a test can check, across processes, that no two uses of a lock overlap.
func lockWorkloadCmd() *cobra.Command {
	var id, table, out string
	var locks int
	c := &cobra.Command{
		Use:   "workload --coord ADDR --id ID --out FILE",
		Short: "Run a clerk that takes random write locks until interrupted, recording every use",
		Args:  cobra.NoArgs,
	}
	connect := coordFlag(c)
	c.Flags().StringVar(&id, "id", "", "clerk id (the fs node's writer id)")
	c.Flags().StringVar(&table, "table", "vol", "lock table")
	c.Flags().IntVar(&locks, "locks", 8, "lock ids used: 0..locks-1")
	c.Flags().StringVar(&out, "out", "", "record file")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if id == "" || out == "" || locks < 1 {
			return fmt.Errorf("--id, --out and --locks >= 1 are required")
		}
		f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		w := bufio.NewWriter(f)
		var mu sync.Mutex
		record := func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(w, format+"\n", args...)
			w.Flush()
		}
		cc, err := connect()
		if err != nil {
			return err
		}
		defer cc.Close()
		ctx := cmd.Context()
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		cl, err := openClerk(ctx, cc, id, table, log, func(table, dead string, s uint64) error {
			record("recovered %s %d", dead, s)
			return nil
		})
		if err != nil {
			return err
		}
		record("session %s %d", id, cl.Session())
		for ctx.Err() == nil {
			l := uint64(rand.IntN(locks))
			actx, cancel := context.WithTimeout(ctx, 60*time.Second)
			err := cl.Acquire(actx, table, l, lock.Write)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				return fmt.Errorf("acquire %d: %w", l, err)
			}
			start := time.Now().UnixNano()
			time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
			end := time.Now().UnixNano()
			record("use %s %d %d %d", id, l, start, end)
			cl.Unpin(table, l, lock.Write)
		}
		return nil
	}
	return c
}

// openClerk mounts a clerk session of id for table through the coordinator
// (which fences the id's older sessions), starts the clerk until ctx ends
// and opens the table.
func openClerk(ctx context.Context, cc *coordclient.Client, id, table string, log *slog.Logger,
	onRecover func(table, dead string, session uint64) error) (*lockclerk.Clerk, error) {
	var session uint64
	err := cc.Call(ctx, func(ctx context.Context, cl pb.CoordinatorClient) error {
		r, err := cl.OpenSession(ctx, &pb.OpenSessionRequest{Clerk: id, Tables: []string{table}})
		if err == nil {
			session = r.Session
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open session of %s: %s", id, coordclient.ErrorMessage(err))
	}
	cl, err := lockclerk.New(lockclerk.Config{ID: id, Session: session, Groups: clustermap.LockGroupsN,
		Servers: node.NewLockResolver(cc), Logger: log, OnRecover: onRecover})
	if err != nil {
		return nil, err
	}
	go cl.Run(ctx)
	if err := cl.Open(table); err != nil {
		return nil, err
	}
	return cl, nil
}
