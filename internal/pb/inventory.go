package pb

import (
	"context"
	"io"
)

// ReadInventory streams a brick's inventory of one placement group
// (Brick.Inventory), calling fn for every entry.
func ReadInventory(ctx context.Context, cl BrickClient, r *InventoryRequest, fn func(*InventoryEntry)) error {
	st, err := cl.Inventory(ctx, r)
	if err != nil {
		return err
	}
	for {
		resp, err := st.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		for _, e := range resp.Entries {
			fn(e)
		}
	}
}
