package filesys

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/plumeria-fs/plumeria/filesys/dir"
	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// The version cleaner (Mammoth §2.6): a pass walks the directory tree from
// the root with each directory's retention policy (RetentionXattr,
// inherited), and finds the regular files in it and, through each
// directory's name log, the files deleted or renamed away from it. For
// each inode number it decides which versions of each file that had the
// number the policies keep (the policy of the directory it is, or was
// last, found in; DefaultRetention or the root's for a file found nowhere)
// and asks the volume to drop the others (VersionPruner): the bricks then
// remove every block entry that only dropped versions read, and their
// cleaners reclaim the space. Versions made during the pass (at or above
// the fver read at its start) are not touched; what the live file system
// and snapshots read is never removed.
//
// One node runs a pass at a time: the pass holds cleanerLock, which
// others only try (CleanLoop).

// VersionPruner is what a VersionDevice needs for the cleaner: drop, in
// [off, off+n), every block entry of a file version below below that
// neither the live volume, a snapshot, nor a version in keep reads.
type VersionPruner interface {
	PruneVersions(ctx context.Context, off, n uint64, keep []uint32, below uint32) error
}

// keepMax is the most versions one prune request may keep
// (clustermap.PruneKeepMax).
const keepMax = 1 << 16

// cleanerLock is held by the node running a cleaner pass.
const cleanerLock = 3

// CleanStats counts what a pass did.
type CleanStats struct {
	Files    int // inode numbers with versions looked at
	Versions int // versions found
	Dropped  int // versions the policies no longer keep, pruned
}

// CleanInterval is how often CleanLoop tries a pass.
const CleanInterval = 10 * time.Minute

// CleanLoop runs a cleaner pass every interval until ctx ends, when no
// other node runs one (it tries cleanerLock).
func (fs *FS) CleanLoop(ctx context.Context, interval time.Duration) {
	if fs.vdev == nil {
		return
	}
	if _, ok := fs.vdev.(VersionPruner); !ok {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, ran, err := fs.tryClean(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			fs.log.Warn("version cleaner pass failed (retried later)", "err", err)
		case ran && st.Dropped > 0:
			fs.log.Info("version cleaner pass", "files", st.Files, "versions", st.Versions, "dropped", st.Dropped)
		}
	}
}

func (fs *FS) tryClean(ctx context.Context) (CleanStats, bool, error) {
	h, err := fs.acquire(ctx)
	if err != nil {
		return CleanStats{}, false, err
	}
	defer h.release()
	ok, err := h.tryAdd(ctx, cleanerLock, 100*time.Millisecond)
	if err != nil || !ok {
		return CleanStats{}, false, err
	}
	st, err := fs.cleanPass(ctx, toTime(fs.now()), nil)
	return st, true, err
}

// CleanVersions runs one cleaner pass now (waiting for another node's to
// end), reporting the inode numbers done so far to progress.
func (fs *FS) CleanVersions(ctx context.Context, progress func(done, total int)) (CleanStats, error) {
	if fs.vdev == nil {
		return CleanStats{}, ErrNoVersions
	}
	h, err := fs.acquire(ctx, w(cleanerLock))
	if err != nil {
		return CleanStats{}, err
	}
	defer h.release()
	return fs.cleanPass(ctx, toTime(fs.now()), progress)
}

// incarnation is one file that had an inode number, with the policy of
// the directory it was found in.
type incarnation struct {
	gen    uint64 // 0: the file there now
	policy Retention
}

func (fs *FS) cleanPass(ctx context.Context, now time.Time, progress func(done, total int)) (CleanStats, error) {
	pruner, ok := fs.vdev.(VersionPruner)
	if !ok {
		return CleanStats{}, fmt.Errorf("%w: the volume cannot drop versions", ErrNotSupported)
	}
	rootPolicy, err := fs.policyOf(ctx, RootIno, DefaultRetention)
	if err != nil {
		return CleanStats{}, err
	}
	found := map[uint64]map[uint64]Retention{} // ino -> gen (0: now) -> policy
	note := func(ino, gen uint64, p Retention) {
		m := found[ino]
		if m == nil {
			m = map[uint64]Retention{}
			found[ino] = m
		}
		if _, ok := m[gen]; !ok {
			m[gen] = p
		}
	}
	type dirAt struct {
		ino, gen uint64 // gen 0: the directory there now
		policy   Retention
	}
	todo := []dirAt{{RootIno, 0, rootPolicy}}
	seen := map[[2]uint64]bool{}
	for len(todo) > 0 && ctx.Err() == nil {
		d := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[[2]uint64{d.ino, d.gen}] {
			continue
		}
		seen[[2]uint64{d.ino, d.gen}] = true
		if d.gen == 0 {
			p, err := fs.policyOf(ctx, d.ino, d.policy)
			if err != nil {
				if errors.Is(err, ErrNotFound) || errors.Is(err, ErrStale) {
					continue // removed meanwhile
				}
				return CleanStats{}, err
			}
			d.policy = p
		}
		ents, gone, err := fs.dirForCleaner(ctx, d.ino, d.gen)
		if err != nil {
			return CleanStats{}, err
		}
		for _, e := range ents {
			switch uint32(e.Type) << 12 {
			case typeReg:
				note(e.Ino, 0, d.policy)
			case typeDir:
				todo = append(todo, dirAt{e.Ino, 0, d.policy})
			}
		}
		for _, r := range gone {
			switch uint32(r.Type) << 12 {
			case typeReg:
				note(r.Ino, r.Gen, d.policy)
			case typeDir:
				todo = append(todo, dirAt{r.Ino, r.Gen, d.policy})
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return CleanStats{}, err
	}
	inos := make([]uint64, 0, len(found))
	for ino := range found {
		inos = append(inos, ino)
	}
	slices.Sort(inos)
	var st CleanStats
	for i, ino := range inos {
		if progress != nil {
			progress(i, len(inos))
		}
		if err := fs.cleanIno(ctx, pruner, ino, found[ino], rootPolicy, now, &st); err != nil {
			return st, err
		}
	}
	if progress != nil {
		progress(len(inos), len(inos))
	}
	return st, ctx.Err()
}

// policyOf returns directory ino's own policy, or inherited if it has none.
func (fs *FS) policyOf(ctx context.Context, ino uint64, inherited Retention) (Retention, error) {
	v, err := fs.Getxattr(ctx, ino, RetentionXattr)
	if errors.Is(err, ErrNoAttr) {
		return inherited, nil
	}
	if err != nil {
		return Retention{}, err
	}
	p, err := ParseRetention(string(v))
	if err != nil {
		fs.log.Warn("a directory's retention policy does not parse: its parent's applies", "ino", ino, "err", err)
		return inherited, nil
	}
	return p, nil
}

// dirForCleaner returns directory dino's entries now (for the directory
// there now: gen 0) and the files and directories its name log says were
// removed from it (incarnations that no longer have that name).
func (fs *FS) dirForCleaner(ctx context.Context, dino, dgen uint64) ([]dir.Entry, []layout.NameRecord, error) {
	h, err := fs.acquire(ctx, r(inodeLock(dino)))
	if err != nil {
		return nil, nil, err
	}
	defer h.release()
	tx := fs.newTx(ctx)
	din, err := tx.anyInode(dino)
	if err != nil {
		return nil, nil, err
	}
	var ents []dir.Entry
	if dgen == 0 {
		if din.Free() || !isDir(din) {
			return nil, nil, nil
		}
		dgen = din.Gen
		if ents, err = allEntries(tx, dino, din); err != nil {
			return nil, nil, err
		}
	}
	var gone []layout.NameRecord
	err = fs.eachNameRecord(tx, dino, din, func(r layout.NameRecord) {
		if r.DirGen == dgen && r.Op == layout.NameRemoved {
			gone = append(gone, r)
		}
	})
	return ents, gone, err
}

// eachNameRecord calls fn with every record of inode number dino's name
// log, oldest first. The caller holds dino's lock.
func (fs *FS) eachNameRecord(tx *tx, dino uint64, din *layout.Inode, fn func(layout.NameRecord)) error {
	for blk := uint64(0); blk <= din.NLog/layout.PayloadBytes; blk++ {
		recs, err := fs.nameLogBlock(tx, dino, din, blk)
		if err != nil {
			return err
		}
		for _, r := range recs {
			fn(r)
		}
	}
	return nil
}

// nameLogBlock returns the records of block blk of inode number dino's
// name log (din its inode; the caller holds its lock), up to the log's end.
func (fs *FS) nameLogBlock(tx *tx, dino uint64, din *layout.Inode, blk uint64) ([]layout.NameRecord, error) {
	limit := layout.PayloadBytes
	if blk == din.NLog/layout.PayloadBytes {
		limit = int(din.NLog % layout.PayloadBytes)
	}
	if limit == 0 {
		return nil, nil
	}
	b, err := tx.read(layout.NameLogAddr(dino, blk), inodeLock(dino))
	if err != nil {
		return nil, err
	}
	hd, err := layout.DecodeHeader(b)
	if err != nil || hd.Kind != layout.KindNameLog || hd.Owner != dino || hd.Index != blk {
		return nil, fmt.Errorf("%w: name log block %d of directory %d: %v (kind %v)", ErrIO, blk, dino, err, hd.Kind)
	}
	recs, err := layout.DecodeNameRecords(b[layout.HeaderBytes:], limit)
	if err != nil {
		return nil, fmt.Errorf("%w: name log block %d of directory %d: %v", ErrIO, blk, dino, err)
	}
	return recs, nil
}

// cleanIno applies the policies to every version of inode number ino:
// incs holds the files found with it (gen 0: the one there now) and their
// policies; a version of another file gets def.
func (fs *FS) cleanIno(ctx context.Context, pruner VersionPruner, ino uint64, incs map[uint64]Retention, def Retention, now time.Time, st *CleanStats) error {
	in, err := fs.settledInode(ctx, ino)
	if err != nil {
		return err
	}
	if p, ok := incs[0]; ok && !in.Free() && isReg(in) {
		delete(incs, 0)
		if _, ok := incs[in.Gen]; !ok {
			incs[in.Gen] = p
		}
	}
	pending := in.Flags&layout.FlagPending != 0 // also of a deleted file (freedInode)
	recs, err := fs.records(ctx, ino, in)
	if errors.Is(err, ErrIO) && !errors.Is(err, context.Canceled) {
		fs.log.Warn("version cleaner: a file's history does not read: skipped", "ino", ino, "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	byGen := map[uint64][]Version{}
	for _, rec := range recs {
		byGen[rec.Gen] = append(byGen[rec.Gen], versionOf(ino, rec))
	}
	if len(byGen) == 0 && !pending {
		return nil
	}
	st.Files++
	var keep, listed []uint32
	for gen, vs := range byGen {
		p, ok := incs[gen]
		if !ok {
			p = def
		}
		keep = append(keep, p.keptVersions(vs, now)...)
		for _, v := range vs {
			listed = append(listed, v.FVer)
		}
	}
	if pending {
		listed = append(listed, in.FVer) // the inode is its record
	}
	if !in.Free() && in.FVer > 0 || pending {
		// The newest version of the file there now (its record written
		// or pending) is what it reads unless changed since: kept. So
		// is a deleted file's pending version (its free inode is its
		// record until the number is reused: the next pass may drop it).
		keep = append(keep, in.FVer)
	}
	slices.Sort(keep)
	keep = slices.Compact(keep)
	kept := 0
	for _, f := range listed {
		if _, ok := slices.BinarySearch(keep, f); ok {
			kept++
		}
	}
	st.Versions += len(listed)
	if kept == len(listed) {
		return nil
	}
	if len(keep) > keepMax {
		fs.log.Warn("a file keeps more versions than one prune can name: none dropped", "ino", ino, "kept", len(keep))
		return nil
	}
	if pending {
		// Write the pending version's record first: the live volume
		// reads the newest record, which must be its own for the older
		// ones to go. The inode stays the record (a copy here is the
		// same: a pending version does not change).
		hist := layout.ExtentAddr(ino) + layout.HistoryOff
		b, err := layout.EncodeHistory(pendingRecord(ino, in))
		if err == nil {
			err = fs.vdev.WriteDataVersion(ctx, b, hist, in.FVer)
		}
		if err != nil {
			return fs.ioError("write a pending version's record", hist, err)
		}
	}
	if err := pruner.PruneVersions(ctx, layout.ExtentAddr(ino), layout.ExtentBytes, keep, in.FVer+1); err != nil {
		return fs.ioError("drop file versions", layout.ExtentAddr(ino), err)
	}
	st.Dropped += len(listed) - kept
	return nil
}
