package node

import (
	"context"
	"fmt"
	"time"

	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/pb"
	lockclerk "github.com/plumeria-fs/plumeria/lock/clerk"
)

// openSession opens a lock session of clerk id for table at the
// coordinator, which fences the id's older sessions first.
func openSession(ctx context.Context, cc *coordclient.Client, id, table string) (uint64, error) {
	var session uint64
	err := cc.Call(ctx, func(ctx context.Context, cl pb.CoordinatorClient) error {
		r, err := cl.OpenSession(ctx, &pb.OpenSessionRequest{Clerk: id, Tables: []string{table}})
		if err == nil {
			session = r.Session
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("open lock session of %s: %s", id, coordclient.ErrorMessage(err))
	}
	return session, nil
}

// endSession closes table on clerk cl (giving its locks back, which the
// owner has flushed) and ends the session at the coordinator, so that the
// next session of the id need not wait for this one's lease. ctx's
// cancellation does not stop it.
func endSession(ctx context.Context, cc *coordclient.Client, cl *lockclerk.Clerk, table string) error {
	cl.Close(table)
	time.Sleep(100 * time.Millisecond) // let the close reach the lock servers
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := cc.Call(cctx, func(ctx context.Context, c pb.CoordinatorClient) error {
		_, err := c.CloseSession(ctx, &pb.CloseSessionRequest{Clerk: cl.ID(), Session: cl.Session(), Table: table})
		return err
	})
	if err != nil {
		return fmt.Errorf("end the lock session of %s: %s", cl.ID(), coordclient.ErrorMessage(err))
	}
	return nil
}
