package brick

import (
	"context"
	"time"

	"github.com/plumeria-fs/plumeria/internal/pb"
)

// Space the past holds. Every historyEvery the brick walks its store's
// index once per volume of its map (store.VolumeBytes: a walk of index
// entries, no data read, yielding the store's lock every scanEntriesMax
// entries) and counts the bytes the live volume reads and those kept only
// for snapshots and file versions, over every PG of the volume it holds,
// primary or backup. Heartbeats carry the latest finished count to the
// coordinator, which sums the bricks' counts per volume in its status.
// One pass runs at a time (historyLoop); it is the only work of its
// goroutine, so a pass that overruns the interval delays the next rather
// than overlapping it.

// historyEvery is the default Config.HistoryInterval: at most one pass a
// minute, as the numbers move slowly and a pass reads the whole index.
const historyEvery = time.Minute

// historyReport is one finished pass.
type historyReport struct {
	started time.Time
	vols    []*pb.VolumeBytes // AgeMs unset: filled per heartbeat
}

func (s *Server) historyLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.HistoryInterval)
	defer t.Stop()
	for {
		s.countHistory(s.ctx())
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
	}
}

// countHistory runs one pass over the volumes of the latest map. A volume
// whose walk fails is left out of the report (the coordinator then lacks
// this brick's share of it until a pass succeeds).
func (s *Server) countHistory(ctx context.Context) {
	m := s.latest.Load()
	r := &historyReport{started: time.Now()}
	for i := range m.Volumes {
		v := &m.Volumes[i]
		vb, err := s.store.VolumeBytes(ctx, v.ID, v.LiveReadGen())
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.log.Warn("count live and history bytes", "vol", v.Name, "err", err)
			continue
		}
		var stripe int64
		for sg := range v.SGs {
			sb, err := s.store.VolumeBytes(ctx, shardVol(v.ID, uint16(sg)), ^uint64(0))
			if err != nil {
				break // left out: the count is low until a pass succeeds
			}
			stripe += sb.LiveBytes + sb.HistoryBytes
		}
		r.vols = append(r.vols, &pb.VolumeBytes{Vol: v.ID, LiveBytes: vb.LiveBytes, HistoryBytes: vb.HistoryBytes, StripeBytes: stripe})
	}
	s.history.Store(r)
	s.log.Debug("counted live and history bytes", "volumes", len(r.vols), "took", time.Since(r.started).Round(time.Millisecond))
}

// historyBytes returns the latest pass's counts for a heartbeat sent at now.
func (s *Server) historyBytes(now time.Time) []*pb.VolumeBytes {
	r := s.history.Load()
	if r == nil {
		return nil
	}
	age := now.Sub(r.started).Milliseconds()
	out := make([]*pb.VolumeBytes, len(r.vols))
	for i, v := range r.vols {
		out[i] = &pb.VolumeBytes{Vol: v.Vol, LiveBytes: v.LiveBytes, HistoryBytes: v.HistoryBytes, StripeBytes: v.StripeBytes, AgeMs: age}
	}
	return out
}
