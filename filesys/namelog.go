package filesys

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/plumeria-fs/plumeria/filesys/dir"
	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// Directory name logs (layout/namelog.go): on a volume that keeps file
// versions, every change of a directory's entries also appends what it
// added and removed to the directory's name log, in the same transaction
// under the directory's lock, so the log is exactly as durable as the
// change. NamesAt replays it backwards from the directory's entries now to
// the names it had at a time T: a name added after T is taken away, a
// name removed after T comes back with the inode it named.

// logName appends a record of name (added or removed, naming ino of
// generation gen and type typ) to directory dino's name log; din is the
// directory's inode in the transaction (its nlog grows; the caller puts
// it). Nothing on a volume without file versions.
func (fs *FS) logName(t *tx, dino uint64, din *layout.Inode, op uint8, name string, ino, gen uint64, typ uint8, now layout.Time) error {
	if fs.vdev == nil {
		return nil
	}
	r := layout.NameRecord{Time: now, Op: op, Type: typ, DirGen: din.Gen, Ino: ino, Gen: gen, Name: name}
	blk, off, end := layout.NameLogPlace(din.NLog, r.Bytes())
	if blk >= layout.NameLogBlocksMax {
		return fmt.Errorf("%w: the name log of directory %d is full", ErrNoSpace, dino)
	}
	addr := layout.NameLogAddr(dino, blk)
	if off == 0 {
		// A new block: the next ones come with it, in one read (their
		// old contents must be read: their versions go on).
		t.readAhead(addr, min(nameLogReadAhead, layout.NameLogBlocksMax-blk), inodeLock(dino))
	}
	b, err := t.write(addr, inodeLock(dino))
	if err != nil {
		return err
	}
	if h, err := layout.DecodeHeader(b); err != nil || h.Kind != layout.KindNameLog || h.Owner != dino || h.Index != blk || off == 0 {
		// A new block, or one an earlier directory at this number left
		// (its records are behind din.NLog's start of this block).
		v := layout.Version(b)
		clear(b)
		layout.PutHeader(b, layout.Header{Kind: layout.KindNameLog, Version: v, Owner: dino, Index: blk})
	}
	if err := layout.PutNameRecord(b[layout.HeaderBytes+off:], &r); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	din.NLog = end
	return nil
}

// nameLogReadAhead is how many name log blocks a new block's read brings.
const nameLogReadAhead = 16

// NameAt is one name of a directory at a time.
type NameAt struct {
	Name     string
	Ino, Gen uint64 // Gen 0: the entry is there now (the inode's generation now)
	Type     uint8  // file type, as DirEntry.Mode >> 12
}

// skewMax bounds the difference between nodes' clocks that NamesAt
// tolerates: it reads the log back to that much before t.
const skewMax = time.Minute

// NamesAt returns directory dino's names at time t, sorted, for the
// directory of generation dgen (a directory removed since, or whose number
// was reused, had no names when it was removed), and the length of its
// name log when they were read (NameLogLen tells whether any name changed
// since: an entry with Gen 0 is the same file as long as it did not). It
// reads the log back from its end to skewMax before t.
func (fs *FS) NamesAt(ctx context.Context, dino, dgen uint64, t time.Time) ([]NameAt, uint64, error) {
	if fs.vdev == nil {
		return nil, 0, ErrNoVersions
	}
	h, err := fs.acquire(ctx, r(inodeLock(dino)))
	if err != nil {
		return nil, 0, err
	}
	defer h.release()
	tx := fs.newTx(ctx)
	din, err := tx.anyInode(dino)
	if err != nil {
		return nil, 0, err
	}
	names, err := fs.namesAt(tx, dino, dgen, din, t)
	return names, din.NLog, err
}

// NameLogLen returns the length of inode number dino's name log.
func (fs *FS) NameLogLen(ctx context.Context, dino uint64) (uint64, error) {
	h, err := fs.acquire(ctx, r(inodeLock(dino)))
	if err != nil {
		return 0, err
	}
	defer h.release()
	in, err := fs.newTx(ctx).anyInode(dino)
	if err != nil {
		return 0, err
	}
	return in.NLog, nil
}

// allEntries returns every entry of directory dino (din its inode; the
// caller holds its lock).
func allEntries(tx *tx, dino uint64, din *layout.Inode) ([]dir.Entry, error) {
	d, err := dirOf(dino, din)
	if err != nil {
		return nil, err
	}
	var out []dir.Entry
	for after, done := uint64(0), false; !done; {
		var page []dir.Entry
		if page, done, err = d.List(dirBlocks{tx, dino}, after, 1024); err != nil {
			return nil, dirError(err, "")
		}
		for _, e := range page {
			out = append(out, e)
			after = e.Cookie
		}
	}
	return out, nil
}

func (fs *FS) namesAt(tx *tx, dino, dgen uint64, din *layout.Inode, t time.Time) ([]NameAt, error) {
	names := map[string]NameAt{}
	if !din.Free() && din.Gen == dgen {
		if !isDir(din) {
			return nil, fmt.Errorf("%w: inode %d", ErrNotDir, dino)
		}
		ents, err := allEntries(tx, dino, din)
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			names[e.Name] = NameAt{Name: e.Name, Ino: e.Ino, Type: e.Type}
		}
	}
	stop := fromTime(t.Add(-skewMax))
	after := fromTime(t)
	for blk := int64(din.NLog / layout.PayloadBytes); blk >= 0; blk-- {
		recs, err := fs.nameLogBlock(tx, dino, din, uint64(blk))
		if err != nil {
			return nil, err
		}
		done := false
		for i := len(recs) - 1; i >= 0; i-- {
			r := recs[i]
			if r.DirGen < dgen || before(r.Time, stop) {
				done = true // an earlier directory's records, or long before t
				break
			}
			if r.DirGen != dgen || !before(after, r.Time) {
				continue // a later directory's, or at or before t: in the state already
			}
			switch r.Op {
			case layout.NameAdded:
				if n, ok := names[r.Name]; ok && n.Ino == r.Ino {
					delete(names, r.Name)
				}
			case layout.NameRemoved:
				names[r.Name] = NameAt{Name: r.Name, Ino: r.Ino, Gen: r.Gen, Type: r.Type}
			}
		}
		if done {
			break
		}
	}
	out := make([]NameAt, 0, len(names))
	for _, n := range names {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b NameAt) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out, nil
}

// before reports whether a is strictly before b.
func before(a, b layout.Time) bool { return a.Sec < b.Sec || a.Sec == b.Sec && a.Nsec < b.Nsec }
