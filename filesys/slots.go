package filesys

import (
	"context"
	"fmt"

	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// readSlots reads every log slot header (one request of 1 MiB). Slots of
// another file system (an earlier format) read as free.
func readSlots(ctx context.Context, dev Device, uuid [16]byte) ([]layout.Slot, []uint64, error) {
	buf := make([]byte, layout.SlotsMax*layout.BlockBytes)
	if err := dev.ReadAt(ctx, buf, layout.SlotBase); err != nil {
		return nil, nil, fmt.Errorf("read log slots: %w", err)
	}
	slots := make([]layout.Slot, layout.SlotsMax)
	vers := make([]uint64, layout.SlotsMax)
	for i := range slots {
		s, v, err := layout.DecodeSlot(buf[i*layout.BlockBytes : (i+1)*layout.BlockBytes])
		if err != nil {
			return nil, nil, fmt.Errorf("log slot %d: %w", i, err)
		}
		if s.UUID != uuid {
			s = layout.Slot{}
		}
		slots[i], vers[i] = s, v
	}
	return slots, vers, nil
}

func (fs *FS) readSlots(ctx context.Context) ([]layout.Slot, []uint64, error) {
	slots, vers, err := readSlots(ctx, fs.cfg.Dev, fs.super.UUID)
	if err != nil {
		return nil, nil, fs.ioError("read log slots", layout.SlotBase, err)
	}
	return slots, vers, nil
}

// claimSlot takes a free log slot for this node's session.
func (fs *FS) claimSlot(ctx context.Context) (int, error) {
	h, err := fs.acquire(ctx, w(slotTableLock))
	if err != nil {
		return 0, err
	}
	defer h.release()
	slots, vers, err := fs.readSlots(ctx)
	if err != nil {
		return 0, err
	}
	start := int(hashString(fs.cfg.ID) % layout.SlotsMax)
	for k := 0; k < layout.SlotsMax; k++ {
		i := (start + k) % layout.SlotsMax
		if slots[i].Used {
			continue
		}
		s := layout.Slot{Used: true, Session: fs.cfg.Session, UUID: fs.super.UUID, Name: fs.cfg.ID}
		if err := fs.cfg.Dev.WriteMetaBlocks(ctx, layout.EncodeSlot(i, s, vers[i]+1), layout.SlotAddr(i)); err != nil {
			return 0, fs.ioError("claim log slot", layout.SlotAddr(i), err)
		}
		return i, nil
	}
	return 0, fmt.Errorf("%w: all %d log slots are in use (unmount or recover other nodes first)", ErrNoSpace, layout.SlotsMax)
}

// freeSlot marks slot i free if it still belongs to (name, session), or
// only recovered if its orphan table still lists orphans.
func (fs *FS) freeSlot(ctx context.Context, i int, name string, session uint64, orphans bool) error {
	return fs.rewriteSlot(ctx, i, func(s layout.Slot) (layout.Slot, bool) {
		if !s.Used || s.Name != name || s.Session != session {
			return s, false
		}
		if orphans {
			s.Recovered = true
			return s, true
		}
		return layout.Slot{}, true
	})
}

// rewriteSlot rewrites slot i's header as next says, under the slot table
// lock; next sees the current header and may decline (false).
func (fs *FS) rewriteSlot(ctx context.Context, i int, next func(layout.Slot) (layout.Slot, bool)) error {
	h, err := fs.acquire(ctx, w(slotTableLock))
	if err != nil {
		return err
	}
	defer h.release()
	slots, vers, err := fs.readSlots(ctx)
	if err != nil {
		return err
	}
	s, ok := next(slots[i])
	if !ok {
		return nil
	}
	if err := fs.cfg.Dev.WriteMetaBlocks(ctx, layout.EncodeSlot(i, s, vers[i]+1), layout.SlotAddr(i)); err != nil {
		return fs.ioError("rewrite log slot header", layout.SlotAddr(i), err)
	}
	return nil
}
