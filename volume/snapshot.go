package volume

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// DeleteSnapshot deletes snapshot name of volume vol. Once it returns,
// reads of the name fail (ErrNoSnapshot) at every brick serving the map,
// and the primaries of the volume's PGs prune, in the background, the
// block versions no remaining snapshot and not the live volume reads; the
// bricks' cleaners then reclaim their space. It does not wait for that.
// Errors (wrapped): ErrNoVolume, ErrNoSnapshot, or the coordinator's.
func DeleteSnapshot(ctx context.Context, cc *coordclient.Client, vol, name string) error {
	err := cc.Call(ctx, func(ctx context.Context, c pb.CoordinatorClient) error {
		_, err := c.DeleteSnapshot(ctx, &pb.DeleteSnapshotRequest{Volume: vol, Name: name})
		return err
	})
	if err == nil {
		return nil
	}
	msg := coordclient.ErrorMessage(err)
	if status.Code(err) == codes.NotFound {
		// The coordinator's message carries clustermap's sentinel.
		switch {
		case strings.Contains(msg, clustermap.ErrNoVolume.Error()):
			return fmt.Errorf("delete snapshot %s of volume %s: %w", name, vol, ErrNoVolume)
		case strings.Contains(msg, clustermap.ErrNoSnapshot.Error()):
			return fmt.Errorf("volume %s: delete snapshot: %w %q", vol, ErrNoSnapshot, name)
		}
	}
	return fmt.Errorf("volume %s: delete snapshot %s: %s", vol, name, msg)
}
