package filesys

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumeria-fs/plumeria/filesys/dir"
	"github.com/plumeria-fs/plumeria/filesys/layout"
	"github.com/plumeria-fs/plumeria/internal/prom"
)

// The mover (issue J, availability policies): a pass walks the directory
// tree with each directory's availability policy (PolicyXattr, inherited;
// none up to the root: the volume's own replication, the "home"), and
// for each regular file with data in its extent compares where its live
// blocks are (PolicyDevice.Layout) with the policy's profile
// (PolicyDevice.EnsureProfile). A file not all in the profile's stripes
// is relayouted: [ExtentAddr(ino), +size) moves into stripes of the
// profile at the PG primaries while reads and writes go on
// (PolicyDevice.Relayout). Decisions, per file:
//   - inline data (in the inode) or empty: nothing to move, compliant;
//   - every live block in the profile: compliant;
//   - changed within Config.MoveQuiet: left for a later pass (new data
//     lands replicated and is coded once it stops changing);
//   - else Relayout (to profile 0 when the policy is the volume's own
//     replication and some blocks are in stripes: they move back home).
//
// A file with hard links in directories of different policies gets the
// stricter one (Policy.stricter: more failures survived first).
//
// Passes: every Config.MoveInterval a full pass from the root, tried
// under moverLock (one node at a time, as the cleaner); and woken at once
// by a change of a directory's policy (a pass over that directory's tree)
// and by a rename across directories whose policies differ (a pass over
// what was moved). A woken pass waits for moverLock. A partial pass skips
// files with more than one link (the full pass decides those, knowing all
// their directories).

// moverLock is held by the node running a mover pass.
const moverLock = 4

// MoveInterval is how often MoveLoop runs a full pass by default.
const MoveInterval = 10 * time.Minute

// MoveQuietDefault is how long a file must be unchanged before the mover
// moves it, by default.
const MoveQuietDefault = 10 * time.Minute

// moveRootsMax bounds the woken passes queued. Beyond it a policy change
// asks for one full pass instead; a rename is dropped (the periodic pass
// finds what it moved), so that a burst of renames never costs a walk of
// the whole tree.
const moveRootsMax = 64

// MoveStats counts what a pass found and did.
type MoveStats struct {
	Files          int   // regular files looked at
	Inline         int   // of them with no data in their extent (compliant)
	Compliant      int   // of them with every live block where the policy wants it
	Moved          int   // relayouted by this pass
	Quiet          int   // not compliant, changed within MoveQuiet: left for later
	Unmovable      int   // kept for the report's shape: always 0 now that data moves home too
	Failed         int   // a profile refused, or a layout or relayout failed (logged)
	TotalBytes     int64 // live bytes of the files (whole blocks)
	CompliantBytes int64 // of them where their policy wants them, after the pass
	MovedBytes     int64 // moved by this pass
}

// Pending is the files not compliant after the pass.
func (s MoveStats) Pending() int { return s.Files - s.Inline - s.Compliant - s.Moved }

// moveRoot is what a woken pass walks: dir's tree (name ""), or entry
// name of dir moved there from directory from.
type moveRoot struct {
	dir  uint64
	name string
	from uint64
}

// mover is an FS's mover state.
type mover struct {
	wake chan struct{} // capacity 1
	mu   struct {
		sync.Mutex
		roots []moveRoot
		full  bool
	}
	movedFiles, movedBytes, failures prometheus.Counter
	pendingFiles, pendingBytes       prometheus.Gauge
}

var (
	moverFilesOpts = prometheus.CounterOpts{Name: "plumeria_fs_policy_moved_files_total",
		Help: "Files the mover relayouted into their availability policy's profile."}
	moverBytesOpts = prometheus.CounterOpts{Name: "plumeria_fs_policy_moved_bytes_total",
		Help: "Live bytes the mover relayouted into their availability policy's profile."}
	moverFailuresOpts = prometheus.CounterOpts{Name: "plumeria_fs_policy_move_failures_total",
		Help: "Files the mover could not check or move (a profile refused, a layout or relayout failed)."}
	moverPendingFilesOpts = prometheus.GaugeOpts{Name: "plumeria_fs_policy_pending_files",
		Help: "Files not where their availability policy wants them after this node's last full mover pass."}
	moverPendingBytesOpts = prometheus.GaugeOpts{Name: "plumeria_fs_policy_pending_bytes",
		Help: "Live bytes not where their availability policy wants them after this node's last full mover pass."}
)

func (m *mover) init(r prometheus.Registerer, volume string) {
	m.wake = make(chan struct{}, 1)
	counter := func(o prometheus.CounterOpts) prometheus.Counter {
		return prom.Shared(r, prometheus.NewCounterVec(o, []string{"volume"})).WithLabelValues(volume)
	}
	gauge := func(o prometheus.GaugeOpts) prometheus.Gauge {
		return prom.Shared(r, prometheus.NewGaugeVec(o, []string{"volume"})).WithLabelValues(volume)
	}
	m.movedFiles, m.movedBytes, m.failures = counter(moverFilesOpts), counter(moverBytesOpts), counter(moverFailuresOpts)
	m.pendingFiles, m.pendingBytes = gauge(moverPendingFilesOpts), gauge(moverPendingBytesOpts)
}

// kick queues a woken pass over root (see moveRootsMax when too many
// wait).
func (m *mover) kick(root moveRoot) {
	m.mu.Lock()
	switch {
	case len(m.mu.roots) < moveRootsMax:
		m.mu.roots = append(m.mu.roots, root)
	case root.name == "":
		m.mu.full = true
	}
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func (m *mover) take() ([]moveRoot, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	roots, full := m.mu.roots, m.mu.full
	m.mu.roots, m.mu.full = nil, false
	return roots, full
}

// policyChanged wakes the mover for directory ino's tree.
func (fs *FS) policyChanged(ino uint64) {
	if fs.cfg.Policies != nil && !fs.cfg.ReadOnly {
		fs.mover.kick(moveRoot{dir: ino})
	}
}

// renamed wakes the mover for what a rename moved across directories; the
// mover compares the directories' policies.
func (fs *FS) renamed(sd uint64, sname string, dd uint64, dname string, flags uint32) {
	if fs.cfg.Policies == nil || fs.cfg.ReadOnly || sd == dd {
		return
	}
	fs.mover.kick(moveRoot{dir: dd, name: dname, from: sd})
	if flags&RenameExchange != 0 {
		fs.mover.kick(moveRoot{dir: sd, name: sname, from: dd})
	}
}

// MoveLoop runs a full mover pass every interval, when no other node runs
// one, and a pass over what changed whenever woken, until ctx ends.
func (fs *FS) MoveLoop(ctx context.Context, interval time.Duration) {
	if fs.cfg.Policies == nil {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		tick := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			tick = true
		case <-fs.mover.wake:
		}
		roots, full := fs.mover.take()
		if len(roots) == 0 && !full && !tick {
			continue
		}
		st, ran, err := fs.tryMove(ctx, roots, full, tick)
		switch {
		case err != nil && ctx.Err() == nil:
			fs.log.Warn("mover pass failed (retried later)", "err", err)
		case ran && (st.Moved > 0 || st.Pending() > 0):
			fs.log.Info("mover pass", "files", st.Files, "moved", st.Moved, "moved_bytes", st.MovedBytes,
				"pending", st.Pending(), "quiet", st.Quiet, "unmovable", st.Unmovable, "failed", st.Failed)
		}
	}
}

// tryMove runs the passes asked for: woken ones (roots, or a full one)
// wait for moverLock; a periodic one only tries it.
func (fs *FS) tryMove(ctx context.Context, roots []moveRoot, full, tick bool) (MoveStats, bool, error) {
	h, err := fs.acquire(ctx)
	if err != nil {
		return MoveStats{}, false, err
	}
	defer h.release()
	if len(roots) > 0 || full {
		if err := h.add(ctx, w(moverLock)); err != nil {
			return MoveStats{}, false, err
		}
	} else if ok, err := h.tryAdd(ctx, moverLock, 100*time.Millisecond); err != nil || !ok {
		return MoveStats{}, false, err
	}
	if full || tick {
		st, err := fs.movePass(ctx, nil, nil)
		return st, true, err
	}
	st, err := fs.movePass(ctx, roots, nil)
	return st, true, err
}

// MoveData runs one full mover pass now (waiting for another node's to
// end), reporting the files done so far to progress. It returns
// ErrNotSupported when the file system has no PolicyDevice.
func (fs *FS) MoveData(ctx context.Context, progress func(done, total int, st MoveStats)) (MoveStats, error) {
	if fs.cfg.Policies == nil {
		return MoveStats{}, fmt.Errorf("%w: the volume has no availability policies", ErrNotSupported)
	}
	h, err := fs.acquire(ctx, w(moverLock))
	if err != nil {
		return MoveStats{}, err
	}
	defer h.release()
	return fs.movePass(ctx, nil, progress)
}

// movePass moves the files under roots (nil: the whole tree, from the
// root) into their policies' profiles. The caller holds moverLock.
func (fs *FS) movePass(ctx context.Context, roots []moveRoot, progress func(done, total int, st MoveStats)) (MoveStats, error) {
	files, partial, err := fs.filesToMove(ctx, roots)
	if err != nil {
		return MoveStats{}, err
	}
	inos := make([]uint64, 0, len(files))
	for ino := range files {
		inos = append(inos, ino)
	}
	slices.Sort(inos)
	var st MoveStats
	pm := &passMemo{targets: map[Policy]uint16{}, refused: map[Policy]error{}}
	for i, ino := range inos {
		if progress != nil {
			progress(i, len(inos), st)
		}
		if err := fs.moveFile(ctx, ino, files[ino], partial, pm, &st); err != nil {
			return st, err
		}
	}
	if progress != nil {
		progress(len(inos), len(inos), st)
	}
	if !partial {
		fs.mover.pendingFiles.Set(float64(st.Pending()))
		fs.mover.pendingBytes.Set(float64(st.TotalBytes - st.CompliantBytes))
	}
	return st, ctx.Err()
}

// filesToMove lists the regular files a pass looks at with their
// policies: under roots, or (nil) the whole tree; partial is true for
// roots.
func (fs *FS) filesToMove(ctx context.Context, roots []moveRoot) (map[uint64]Policy, bool, error) {
	if roots == nil {
		p, _, err := fs.ownPolicy(ctx, RootIno)
		if err != nil {
			return nil, false, err
		}
		files, _, err := fs.policyWalk(ctx, RootIno, p, 0)
		return files, false, err
	}
	all := map[uint64]Policy{}
	for _, rt := range roots {
		start := rt.dir
		if rt.name != "" {
			e, err := fs.lookupEntry(ctx, rt.dir, rt.name)
			if errors.Is(err, ErrNotFound) || errors.Is(err, ErrStale) {
				continue // moved on or removed meanwhile
			}
			if err != nil {
				return nil, true, err
			}
			start = e.Ino
		}
		p, _, err := fs.PolicyAt(ctx, rt.dir)
		if err != nil {
			if errors.Is(err, ErrNotFound) || errors.Is(err, ErrStale) {
				continue
			}
			return nil, true, err
		}
		if rt.from != 0 {
			q, _, err := fs.PolicyAt(ctx, rt.from)
			if err == nil && q == p {
				continue // moved between directories of one policy: nothing below changes
			}
		}
		files, _, err := fs.policyWalk(ctx, start, p, 0)
		if err != nil {
			return nil, true, err
		}
		for ino, q := range files {
			if old, ok := all[ino]; !ok || q.stricter(old) {
				all[ino] = q
			}
		}
	}
	return all, true, nil
}

// policyWalk lists the regular files at or below ino with the policy each
// is under (inherited: the policy in force where ino is; a directory's own
// applies below it; a file with several links found twice gets the
// stricter), stopping after limit files (0: no limit; truncated then
// says it stopped). Directories removed meanwhile are skipped.
func (fs *FS) policyWalk(ctx context.Context, ino uint64, inherited Policy, limit int) (map[uint64]Policy, bool, error) {
	files := map[uint64]Policy{}
	note := func(f uint64, p Policy) {
		if old, ok := files[f]; !ok || p.stricter(old) {
			files[f] = p
		}
	}
	type dirAt struct {
		ino    uint64
		policy Policy
	}
	var todo []dirAt
	seen := map[uint64]bool{}
	kind, err := fs.inodeType(ctx, ino)
	switch {
	case errors.Is(err, ErrNotFound) || errors.Is(err, ErrStale):
		return files, false, nil
	case err != nil:
		return nil, false, err
	case kind == typeReg:
		note(ino, inherited)
	case kind == typeDir:
		todo = append(todo, dirAt{ino, inherited})
	}
	for len(todo) > 0 && ctx.Err() == nil {
		d := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[d.ino] {
			continue
		}
		seen[d.ino] = true
		p, ok, err := fs.ownPolicy(ctx, d.ino)
		if err == nil && ok {
			d.policy = p
		}
		var ents []dir.Entry
		if err == nil {
			ents, err = fs.entriesOf(ctx, d.ino)
		}
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrStale) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, false, err
		}
		for _, e := range ents {
			switch uint32(e.Type) << 12 {
			case typeReg:
				if limit > 0 && len(files) >= limit {
					return files, true, nil
				}
				note(e.Ino, d.policy)
			case typeDir:
				todo = append(todo, dirAt{e.Ino, d.policy})
			}
		}
	}
	return files, false, ctx.Err()
}

// inodeType returns ino's file type bits.
func (fs *FS) inodeType(ctx context.Context, ino uint64) (uint32, error) {
	h, err := fs.acquire(ctx, r(inodeLock(ino)))
	if err != nil {
		return 0, err
	}
	defer h.release()
	in, err := fs.newTx(ctx).inode(ino)
	if err != nil {
		return 0, err
	}
	return in.Mode & typeMask, nil
}

// entriesOf returns directory dino's entries (none if it is no longer a
// directory).
func (fs *FS) entriesOf(ctx context.Context, dino uint64) ([]dir.Entry, error) {
	h, err := fs.acquire(ctx, r(inodeLock(dino)))
	if err != nil {
		return nil, err
	}
	defer h.release()
	tx := fs.newTx(ctx)
	din, err := tx.inode(dino)
	if err != nil {
		return nil, err
	}
	if !isDir(din) {
		return nil, nil
	}
	return allEntries(tx, dino, din)
}

// passMemo holds a pass's answers per policy: the profile id, or why it
// was refused (each logged once).
type passMemo struct {
	targets map[Policy]uint16
	refused map[Policy]error
}

func (fs *FS) target(ctx context.Context, pm *passMemo, p Policy) (uint16, error) {
	if id, ok := pm.targets[p]; ok {
		return id, nil
	}
	if err, ok := pm.refused[p]; ok {
		return 0, err
	}
	id, err := fs.cfg.Policies.EnsureProfile(ctx, p)
	if err != nil {
		pm.refused[p] = err
		fs.log.Warn("mover: the cluster does not take an availability policy: its files stay where they are", "policy", p.String(), "err", err)
		return 0, err
	}
	pm.targets[p] = id
	return id, nil
}

// fileFacts is what the mover reads of a file's inode.
type fileFacts struct {
	size   uint64
	mtime  time.Time
	nlink  uint32
	inline bool
}

func (fs *FS) fileFacts(ctx context.Context, ino uint64) (fileFacts, bool, error) {
	h, err := fs.acquire(ctx, r(inodeLock(ino)))
	if err != nil {
		return fileFacts{}, false, err
	}
	defer h.release()
	in, err := fs.newTx(ctx).inode(ino)
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrStale) {
		return fileFacts{}, false, nil
	}
	if err != nil || !isReg(in) {
		return fileFacts{}, false, err
	}
	return fileFacts{size: in.Size, mtime: toTime(in.Mtime), nlink: in.Nlink, inline: in.Flags&layout.FlagInline != 0}, true, nil
}

// moveFile decides file ino under policy p (see the package comment
// above) and moves it if it should. Failures of one file are counted and
// logged, not returned; only the end of ctx is.
func (fs *FS) moveFile(ctx context.Context, ino uint64, p Policy, partial bool, pm *passMemo, st *MoveStats) error {
	f, ok, err := fs.fileFacts(ctx, ino)
	if err != nil {
		return err
	}
	if !ok || partial && f.nlink > 1 {
		return nil // removed meanwhile; or a link the full pass decides
	}
	st.Files++
	if f.inline || f.size == 0 {
		st.Inline++
		return nil
	}
	pd := fs.cfg.Policies
	off, n := layout.ExtentAddr(ino), (f.size+layout.BlockBytes-1)/layout.BlockBytes*layout.BlockBytes
	fail := func(what string, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		st.Failed++
		fs.mover.failures.Inc()
		fs.log.Warn("mover: "+what, "ino", ino, "policy", p.String(), "err", err)
		return nil
	}
	lay, err := pd.Layout(ctx, off, n)
	if err != nil {
		return fail("a file's layout does not read", err)
	}
	var total int64
	for _, b := range lay {
		total += b
	}
	st.TotalBytes += total * layout.BlockBytes
	id, err := fs.target(ctx, pm, p)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		st.Failed++
		return nil
	}
	if lay[id] == total {
		st.Compliant++
		st.CompliantBytes += total * layout.BlockBytes
		return nil
	}
	st.CompliantBytes += lay[id] * layout.BlockBytes
	if quiet := fs.moveQuiet(); quiet > 0 && toTime(fs.now()).Sub(f.mtime) < quiet {
		st.Quiet++
		return nil
	}
	start := time.Now()
	if err := pd.Relayout(ctx, off, n, id, nil); err != nil {
		return fail("relayout failed (retried next pass)", err)
	}
	moved := (total - lay[id]) * layout.BlockBytes
	st.Moved++
	st.MovedBytes += moved
	st.CompliantBytes += moved
	fs.mover.movedFiles.Inc()
	fs.mover.movedBytes.Add(float64(moved))
	fs.log.Info("mover: file moved into its policy's profile", "ino", ino, "policy", p.String(), "profile", id,
		"bytes", moved, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// moveQuiet is Config.MoveQuiet with its default.
func (fs *FS) moveQuiet() time.Duration {
	switch q := fs.cfg.MoveQuiet; {
	case q == 0:
		return MoveQuietDefault
	case q < 0:
		return 0
	default:
		return q
	}
}
