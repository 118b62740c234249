package brick

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/plumeria-fs/plumeria/brick/store"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// Pruning after a snapshot is deleted. The map counts a volume's deleted
// snapshots (Volume.SnapshotsDeleted); the primary of each PG whose count
// in the prune record (prunefile.go) is lower prunes it: chunk by chunk,
// under the serving map, holding the chunk's blocks as a write does, it
// decides which versions no remaining snapshot and not the live volume
// reads (store.Survivors; on a volume with file versions also no reader of
// a file version present, store.FileVersionSurvivors, so a deletion never
// drops a file version), and replicates their removal to the PG's
// members as a change with seqs of its own, as a decommit does. So every
// replica drops the same versions in the PG's order of changes, and a
// member that misses them is resynced like one that missed a write; a
// brick pruning on its own could drop a version a new primary's
// reconciliation was about to rely on. The store's live bytes drop, and
// its cleaner reclaims the segments.
//
// One prune runs at a time per brick (pruneLoop), woken by every map it
// installs and every pruneEvery after a failure. It starts again from the
// record after a restart; the record is written once a volume's PGs are
// done, and removing what is already gone does nothing.

const pruneEvery = 10 * time.Second

// pruneWriter is the writer id a prune's changes carry (fencing applies
// to clients; nobody fences this one).
var pruneWriter = &pb.Writer{Id: "plumeria.prune"}

var (
	prunedVersions = promauto.NewCounter(prometheus.CounterOpts{Name: "plumeria_brick_pruned_blocks_total",
		Help: "Block versions removed from PGs this brick leads (on every replica) because no remaining snapshot and not the live volume reads them."})
	prunedBytes = promauto.NewCounter(prometheus.CounterOpts{Name: "plumeria_brick_pruned_bytes_total",
		Help: "Bytes of the records of pruned block versions at this brick (each replica frees as many), left for the cleaner to reclaim."})
)

// kickPrune makes pruneLoop look at the serving map now.
func (s *Server) kickPrune() {
	select {
	case s.pruneKick <- struct{}{}:
	default:
	}
}

func (s *Server) pruneLoop() {
	defer s.wg.Done()
	t := time.NewTicker(pruneEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		case <-s.pruneKick:
		}
		s.pruneAll(s.ctx())
	}
}

// pruneAll prunes every PG this brick leads that was not pruned at its
// volume's count of deleted snapshots.
func (s *Server) pruneAll(ctx context.Context) {
	m := s.serving.Load()
	vols := map[uint64]bool{}
	for i := range m.Volumes {
		vols[m.Volumes[i].ID] = true
	}
	for i := range m.Volumes {
		v := &m.Volumes[i]
		want := map[uint32]bool{}
		for pg, p := range v.PGs {
			if p.Primary() == s.cfg.Name && s.pruned.at(pgKey{Vol: v.ID, PG: uint32(pg)}) < v.SnapshotsDeleted {
				want[uint32(pg)] = true
			}
		}
		if len(want) == 0 || ctx.Err() != nil {
			continue
		}
		start := time.Now()
		done, st, err := s.pruneVolume(ctx, v, want)
		if rerr := s.pruned.record(done, v.SnapshotsDeleted, vols); rerr != nil {
			err = errors.Join(err, rerr)
		}
		prunedVersions.Add(float64(st.Versions))
		prunedBytes.Add(float64(st.Bytes))
		log := s.log.Info
		if err != nil {
			log = s.log.Warn
		}
		log("pruned versions no snapshot reads", "volume", v.Name, "deleted_snapshots", v.SnapshotsDeleted,
			"pgs", len(done), "pgs_left", len(want)-len(done), "blocks", st.Blocks, "versions", st.Versions,
			"bytes", st.Bytes, "took", time.Since(start).Round(time.Millisecond), "err", err)
	}
}

// pruneVolume prunes the chunks of v's PGs in want, and returns the PGs
// it finished.
func (s *Server) pruneVolume(ctx context.Context, v *clustermap.Volume, want map[uint32]bool) ([]pgKey, store.PruneStats, error) {
	var st store.PruneStats
	failed := map[uint32]error{}
	per := uint64(v.ChunkBytes) / limits.BlockBytes
	err := s.store.Chunks(v.ID, per, func(c uint64) {
		pg := clustermap.PGOfChunk(v.ID, c, len(v.PGs))
		if !want[pg] || failed[pg] != nil {
			return
		}
		if err := ctx.Err(); err != nil {
			failed[pg] = err
			return
		}
		cs, err := s.pruneChunk(ctx, v.ID, pg, c*per, (c+1)*per)
		st.Blocks += cs.Blocks
		st.Versions += cs.Versions
		st.Bytes += cs.Bytes
		if err != nil {
			failed[pg] = fmt.Errorf("pg %d chunk %d: %w", pg, c, err)
		}
	})
	var errs []error
	for _, e := range failed {
		errs = append(errs, e)
	}
	if err != nil || ctx.Err() != nil {
		return nil, st, errors.Join(append(errs, err, ctx.Err())...)
	}
	var done []pgKey
	for pg := range want {
		if failed[pg] == nil {
			done = append(done, pgKey{Vol: v.ID, PG: pg})
		}
	}
	return done, st, errors.Join(errs...)
}

// pruneChunk prunes blocks [lo, hi) of a PG as its primary, under the
// serving map, holding the blocks as a write does.
func (s *Server) pruneChunk(ctx context.Context, vol uint64, pg uint32, lo, hi uint64) (store.PruneStats, error) {
	m, done, err := s.begin(ctx, s.serving.Load().Epoch, vol, pg)
	if err != nil {
		return store.PruneStats{}, err
	}
	defer done()
	v, p, err := pgOf(m, vol, pg, 0, 0)
	if err != nil {
		return store.PruneStats{}, err
	}
	unlock, err := s.admit(ctx, m, v, pg, p, m.Epoch, pruneWriter, []span{{lo, hi}})
	if err != nil {
		return store.PruneStats{}, err
	}
	defer unlock()
	prune := s.store.Prune
	if v.FileVersions {
		prune = s.store.PruneFileVersions // every file version present reads too
	}
	return prune(ctx, v.ID, lo, hi, v.SnapshotReadGens(), v.LiveReadGen(), func(ctx context.Context, ops []store.Op) error {
		for i := range ops {
			seq, err := s.nextSeq(m.Epoch)
			if err != nil {
				return err
			}
			ops[i].Seq = seq
		}
		// Freeing space may use the metadata reserve, as a decommit.
		return s.replicate(ctx, m, v, pg, p, pruneWriter, ops, true)
	})
}
