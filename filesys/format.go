package filesys

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/plumeria-fs/plumeria/filesys/dir"
	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// ErrFormatted refuses to format a volume that holds a file system.
var ErrFormatted = errors.New("the volume already holds a Plumeria file system (use --force to erase it)")

// Format writes a fresh file system on dev: superblock, an empty root
// directory and resource group 0. With force an existing file system is
// replaced: its log slots and groups are cleared (its inodes stay as
// unreachable free blocks whose versions new changes continue). No node
// may have the volume mounted.
func Format(ctx context.Context, dev Device, force bool, now time.Time) (layout.Super, error) {
	b := make([]byte, layout.BlockBytes)
	if err := dev.ReadAt(ctx, b, layout.SuperAddr); err != nil {
		return layout.Super{}, fmt.Errorf("read superblock: %w", err)
	}
	_, err := layout.DecodeSuper(b)
	switch {
	case err == nil && !force, err != nil && !errors.Is(err, layout.ErrNoFS) && !force:
		if err != nil {
			return layout.Super{}, fmt.Errorf("%w (block 0 holds something else: %v)", ErrFormatted, err)
		}
		return layout.Super{}, ErrFormatted
	case force:
		if err := dev.Decommit(ctx, layout.SlotBase, layout.SlotsMax*layout.BlockBytes); err != nil {
			return layout.Super{}, fmt.Errorf("clear log slots: %w", err)
		}
	}
	// Groups and the root are rewritten over whatever is there, keeping
	// versions increasing.
	rgs := make([]byte, layout.RGsMax*layout.BlockBytes)
	if err := dev.ReadAt(ctx, rgs, layout.RGBase); err != nil {
		return layout.Super{}, fmt.Errorf("read resource groups: %w", err)
	}
	for g := 0; g < layout.RGsMax; g++ {
		blk := rgs[g*layout.BlockBytes : (g+1)*layout.BlockBytes]
		v := layout.Version(blk)
		if v == 0 && g != 0 {
			continue
		}
		rg := &layout.RG{}
		rg.Set(0)
		if g == 0 {
			rg.Set(RootIno)
		} else {
			rg = &layout.RG{}
		}
		rg.Encode(blk, g, v+1)
		if err := dev.WriteData(ctx, blk, layout.RGAddr(g)); err != nil {
			return layout.Super{}, fmt.Errorf("write resource group %d: %w", g, err)
		}
	}
	if err := dev.ReadAt(ctx, b, layout.InodeAddr(RootIno)); err != nil {
		return layout.Super{}, fmt.Errorf("read root inode: %w", err)
	}
	t := layout.Time{Sec: now.Unix(), Nsec: uint32(now.Nanosecond())}
	root := &layout.Inode{Mode: typeDir | 0o755, Nlink: 2, Parent: RootIno, Atime: t, Mtime: t, Ctime: t,
		Gen: 1, Inline: dir.New(layout.InlineBytes).Encode()}
	if err := layout.EncodeInode(b, RootIno, layout.Version(b)+1, root); err != nil {
		return layout.Super{}, err
	}
	if err := dev.WriteData(ctx, b, layout.InodeAddr(RootIno)); err != nil {
		return layout.Super{}, fmt.Errorf("write root inode: %w", err)
	}
	s := layout.Super{Created: now.UnixNano()}
	if _, err := rand.Read(s.UUID[:]); err != nil {
		return layout.Super{}, err
	}
	if _, err := rand.Read(s.HandleKey[:]); err != nil {
		return layout.Super{}, err
	}
	if err := dev.WriteData(ctx, layout.EncodeSuper(s), layout.SuperAddr); err != nil {
		return layout.Super{}, fmt.Errorf("write superblock: %w", err)
	}
	return s, nil
}
