package filesys

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/plumeria-fs/plumeria/filesys/layout"
	"github.com/plumeria-fs/plumeria/filesys/redo"
)

// Recover is the clerk's callback when this node must replay the log of a
// dead node; see RecoverLog.
func (fs *FS) Recover(ctx context.Context, table, dead string, session uint64) error {
	return recoverLog(ctx, fs.cfg.Dev, dead, session, fs.log, fs.stats)
}

// RecoverOptions are what RecoverLog reports to.
type RecoverOptions struct {
	Logger     *slog.Logger          // nil: discard
	Volume     string                // the volume label of the metrics
	Registerer prometheus.Registerer // nil: prometheus.DefaultRegisterer
}

// RecoverLog replays the logs of a dead node (clerk dead, sessions up to
// session) and frees their slots. The lock service holds the dead node's
// locks until it returns nil, and the caller holds the dead node's log
// lock. It needs no mounted file system and takes no lock: the dead
// node's locks, the slot table lock among them, are held until it is done,
// and its slots cannot change (it is fenced). Replay (Calaveras §6): the
// records are coalesced per block and sorted by address; each block is read
// once, every change newer than the block's version applied, and the block
// written once.
func RecoverLog(ctx context.Context, dev Device, dead string, session uint64, opts RecoverOptions) error {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return recoverLog(ctx, dev, dead, session, opts.Logger, newStats(opts.Registerer, opts.Volume))
}

func recoverLog(ctx context.Context, dev Device, dead string, session uint64, log *slog.Logger, st *stats) error {
	start := time.Now()
	blocks, err := replaySlots(ctx, dev, dead, session, log)
	st.recoveryBlocks.Add(float64(blocks))
	if err != nil {
		st.recoveryFailures.Inc()
		return err
	}
	st.recoveries.Inc()
	st.recoverySeconds.Observe(time.Since(start).Seconds())
	return nil
}

// replaySlots replays and frees the dead node's slots and returns the
// blocks it rewrote. Its writes are WriteMetaBlocks.
func replaySlots(ctx context.Context, dev Device, dead string, session uint64, log *slog.Logger) (int, error) {
	b := make([]byte, layout.BlockBytes)
	if err := dev.ReadAt(ctx, b, layout.SuperAddr); err != nil {
		return 0, fmt.Errorf("read superblock: %w", err)
	}
	super, err := layout.DecodeSuper(b)
	if err != nil {
		return 0, err
	}
	slots, vers, err := readSlots(ctx, dev, super.UUID)
	if err != nil {
		return 0, err
	}
	blocks := 0
	for i, s := range slots {
		if !s.Used || s.Recovered || s.Name != dead || s.Session > session {
			continue
		}
		n, err := replayLog(ctx, dev, i, dev.WriteMetaBlocks)
		if err != nil {
			return blocks, fmt.Errorf("replay log slot %d of %s: %w", i, dead, err)
		}
		blocks += n
		next := layout.Slot{}
		orphans, err := orphanTableOf(ctx, dev, i)
		switch {
		case err != nil:
			log.Error("the orphan table of a dead node does not decode: its orphans are left for fsck", "node", dead, "slot", i, "err", err)
		case len(orphans) > 0:
			// Freed through the normal locked path once the dead node's
			// locks are released (orphans.go).
			next = s
			next.Recovered = true
		}
		log.Info("recovered a dead node's log", "node", dead, "session", s.Session, "slot", i, "blocks", n, "orphans", len(orphans))
		if err := dev.WriteMetaBlocks(ctx, layout.EncodeSlot(i, next, vers[i]+1), layout.SlotAddr(i)); err != nil {
			return blocks, fmt.Errorf("free log slot %d: %w", i, err)
		}
	}
	return blocks, nil
}

// ReplayLog applies log slot i's unreleased records to the blocks in
// place and returns how many blocks it wrote. It is fsck's (nothing
// mounted): it writes the blocks with WriteData, as fsck writes
// everything; recovery replays with WriteMetaBlocks.
func ReplayLog(ctx context.Context, dev Device, slot int) (int, error) {
	return replayLog(ctx, dev, slot, dev.WriteData)
}

// UnappliedLog returns how many blocks replaying log slot i would change:
// 0 when every record of the log is in place (a snapshot taken under the
// barrier; a node that wrote everything back). It writes nothing.
func UnappliedLog(ctx context.Context, dev Device, slot int) (int, error) {
	return replayLog(ctx, dev, slot, func(context.Context, []byte, uint64) error { return nil })
}

// replayLog is ReplayLog writing each block with write.
func replayLog(ctx context.Context, dev Device, slot int, write func(ctx context.Context, p []byte, off uint64) error) (int, error) {
	recs, err := redo.Recover(ctx, logDevice{dev}, redo.Options{Base: layout.LogAddr(slot), Size: layout.LogBytes})
	if err != nil {
		return 0, err
	}
	plan := redo.Plan(recs)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	written := make([]bool, len(plan))
	for k, blk := range plan {
		g.Go(func() error {
			b := make([]byte, layout.BlockBytes)
			if err := dev.ReadAt(gctx, b, blk.Addr); err != nil {
				return fmt.Errorf("read block %#x: %w", blk.Addr, err)
			}
			cur := layout.Version(b)
			v := cur
			for _, u := range blk.Updates {
				if u.Version <= cur {
					continue
				}
				if int(u.Off)+len(u.Data) > layout.BlockBytes {
					return fmt.Errorf("log record for block %#x passes its end", blk.Addr)
				}
				copy(b[u.Off:], u.Data)
				v = max(v, u.Version)
			}
			if v == cur {
				return nil
			}
			layout.SetVersion(b, v)
			written[k] = true
			if err := write(gctx, b, blk.Addr); err != nil {
				return fmt.Errorf("write block %#x: %w", blk.Addr, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	n := 0
	for _, x := range written {
		if x {
			n++
		}
	}
	return n, nil
}
