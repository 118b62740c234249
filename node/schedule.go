package node

import (
	"context"
	"log/slog"
	"time"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/volume"
)

// scheduleTick is how often the leader's process looks for scheduled
// snapshots that are due.
const scheduleTick = time.Second

// scheduleRetry is how long a volume whose scheduled snapshot failed waits
// before the next try.
const scheduleRetry = 30 * time.Second

// runSchedules runs the volumes' snapshot schedules
// (clustermap.SnapshotSchedule) while this process's coordinator leads:
// it takes each snapshot that is due (SnapshotFS) and deletes the
// scheduled ones beyond the schedule's Keep. The decisions are
// clustermap.ScheduleDue's. Two leaders for a moment (a change of leader)
// at worst take a snapshot each, under different names, and the second
// one's session fences the first's.
func (n *Node) runSchedules(ctx context.Context, cc *coordclient.Client, log *slog.Logger) {
	t := time.NewTicker(scheduleTick)
	defer t.Stop()
	failed := map[string]time.Time{} // volume → last failure
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !n.coord.IsLeader() {
			continue
		}
		m := n.coord.Map()
		for i := range m.Volumes {
			v := &m.Volumes[i]
			if v.Schedule == nil || time.Since(failed[v.Name]) < scheduleRetry {
				continue
			}
			take, drop := clustermap.ScheduleDue(v, time.Now())
			if take != "" {
				sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				res, err := SnapshotFS(sctx, cc, v.Name, take, log)
				cancel()
				if err != nil {
					log.Warn("scheduled snapshot failed (retried later)", "volume", v.Name, "snapshot", take, "err", err)
					failed[v.Name] = time.Now()
					continue
				}
				delete(failed, v.Name)
				log.Info("scheduled snapshot taken", "volume", v.Name, "snapshot", take, "settle", res.Settle, "paused", res.Held)
			}
			for _, name := range drop {
				dctx, cancel := context.WithTimeout(ctx, time.Minute)
				err := volume.DeleteSnapshot(dctx, cc, v.Name, name)
				cancel()
				if err != nil {
					log.Warn("deleting an old scheduled snapshot failed (retried later)", "volume", v.Name, "snapshot", name, "err", err)
					break
				}
				log.Info("old scheduled snapshot deleted", "volume", v.Name, "snapshot", name)
			}
		}
	}
}
