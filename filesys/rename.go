package filesys

import (
	"context"
	"errors"
	"fmt"

	"github.com/plumeria-fs/plumeria/filesys/dir"
	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// Rename moves name in dir to newName in newDir atomically, replacing a
// file or an empty directory there (RenameNoReplace: refuse; with
// RenameExchange: swap the two). Moving a directory into its own subtree
// is refused (ErrInvalid).
func (fs *FS) Rename(ctx context.Context, sd uint64, sname string, dd uint64, dname string, flags uint32) error {
	if err := checkName(sname); err != nil {
		return err
	}
	if err := checkName(dname); err != nil {
		return err
	}
	if flags&^(RenameNoReplace|RenameExchange) != 0 || flags == RenameNoReplace|RenameExchange {
		return fmt.Errorf("%w: rename flags %#x", ErrInvalid, flags)
	}
	for {
		retry, freed, hwm, err := fs.renameOnce(ctx, sd, sname, dd, dname, flags)
		if again, gerr := fs.quotaAgain(ctx, err); again || gerr != nil {
			if gerr != nil {
				return gerr
			}
			continue
		}
		if retry {
			continue
		}
		if err == nil && freed != 0 {
			fs.clearExtent(ctx, freed, hwm)
		}
		if err == nil {
			fs.renamed(sd, sname, dd, dname, flags)
		}
		return err
	}
}

func (fs *FS) renameOnce(ctx context.Context, sd uint64, sname string, dd uint64, dname string, flags uint32) (retry bool, freed, hwm uint64, err error) {
	src, err := fs.lookupEntry(ctx, sd, sname)
	if err != nil {
		return false, 0, 0, err
	}
	dst, err := fs.lookupEntry(ctx, dd, dname)
	switch {
	case errors.Is(err, ErrNotFound):
		if flags&RenameExchange != 0 {
			return false, 0, 0, err
		}
		dst = dir.Entry{}
	case err != nil:
		return false, 0, 0, err
	}
	ws := []want{r(barrierLock), w(inodeLock(sd)), w(inodeLock(dd)), w(inodeLock(src.Ino))}
	if dst.Ino != 0 {
		ws = append(ws, w(inodeLock(dst.Ino)), w(rgLock(layout.RGOf(dst.Ino))))
	}
	moveDir := sd != dd && (src.Type == typeDir>>12 || dst.Type == typeDir>>12)
	var h *held
	if moveDir {
		// Directory moves are serialised so that the ancestry checked
		// here cannot change before the move is done.
		if h, err = fs.acquire(ctx, w(renameLock)); err != nil {
			return false, 0, 0, err
		}
		defer h.release()
		for _, c := range []struct{ moved, into uint64 }{{src.Ino, dd}, {dst.Ino, sd}} {
			if c.moved == 0 || (c.moved == dst.Ino && flags&RenameExchange == 0) {
				continue
			}
			if inside, err := fs.isAncestor(ctx, c.moved, c.into); err != nil {
				return false, 0, 0, err
			} else if inside {
				return false, 0, 0, fmt.Errorf("%w: cannot move a directory into itself", ErrInvalid)
			}
		}
	}
	h2, err := fs.acquire(ctx, ws...)
	if err != nil {
		return false, 0, 0, err
	}
	defer h2.release()
	return fs.renameLocked(ctx, h2, sd, sname, src.Ino, dd, dname, dst.Ino, flags)
}

// isAncestor reports whether directory a is d or one of d's ancestors. The
// caller holds the rename lock; each step takes a read lock alone.
func (fs *FS) isAncestor(ctx context.Context, a, d uint64) (bool, error) {
	for depth := 0; depth < 1<<16; depth++ {
		if d == a {
			return true, nil
		}
		if d == RootIno {
			return false, nil
		}
		h, err := fs.acquire(ctx, r(inodeLock(d)))
		if err != nil {
			return false, err
		}
		in, err := fs.newTx(ctx).inode(d)
		h.release()
		if err != nil {
			return false, err
		}
		if !isDir(in) || in.Parent == 0 {
			return false, fmt.Errorf("%w: directory %d has no parent (run plumeria fsck)", ErrIO, d)
		}
		d = in.Parent
	}
	return false, fmt.Errorf("%w: directory tree deeper than 65536 (a cycle? run plumeria fsck)", ErrIO)
}

func (fs *FS) renameLocked(ctx context.Context, h *held, sd uint64, sname string, srcIno, dd uint64, dname string, dstIno uint64, flags uint32) (retry bool, freed, hwm uint64, err error) {
	t := fs.newTx(ctx)
	o := newOpInodes(t)
	sdin, sdir, err := o.dir(sd)
	if err != nil {
		return false, 0, 0, err
	}
	ddin, ddir, err := o.dir(dd)
	if err != nil {
		return false, 0, 0, err
	}
	if sd == dd {
		ddir = sdir
	}
	sb, db := dirBlocks{t, sd}, dirBlocks{t, dd}
	se, ok, err := sdir.Lookup(sb, sname)
	if err != nil || !ok || se.Ino != srcIno {
		return err == nil, 0, 0, dirError(err, sname)
	}
	de, ok, err := ddir.Lookup(db, dname)
	if err != nil || ok != (dstIno != 0) || (ok && de.Ino != dstIno) {
		return err == nil, 0, 0, dirError(err, dname)
	}
	if srcIno == dstIno {
		return false, 0, 0, nil // two links to one file: nothing to do
	}
	if dstIno != 0 && flags&RenameNoReplace != 0 {
		return false, 0, 0, fmt.Errorf("%w: %q", ErrExists, dname)
	}
	sin, err := o.get(srcIno)
	if err != nil {
		return false, 0, 0, err
	}
	now := fs.now()
	var din *layout.Inode
	if dstIno != 0 {
		if din, err = o.get(dstIno); err != nil {
			return false, 0, 0, err
		}
	}
	if err := crossRealm(sd, sdin, srcIno, sin, dd, ddin, din, flags); err != nil {
		return false, 0, 0, err
	}
	if flags&RenameExchange != 0 {
		if err := exchange(sdir, sb, ddir, db, se, de); err != nil {
			return false, 0, 0, err
		}
		for _, c := range []struct {
			dino uint64
			din  *layout.Inode
			op   uint8
			name string
			ino  uint64
			in   *layout.Inode
		}{
			{sd, sdin, layout.NameRemoved, sname, srcIno, sin}, {dd, ddin, layout.NameRemoved, dname, dstIno, din},
			{sd, sdin, layout.NameAdded, sname, dstIno, din}, {dd, ddin, layout.NameAdded, dname, srcIno, sin},
		} {
			if err := fs.logName(t, c.dino, c.din, c.op, c.name, c.ino, c.in.Gen, uint8(c.in.Mode>>12), now); err != nil {
				return false, 0, 0, err
			}
		}
		reparent(o, sdin, ddin, sd, dd, srcIno, sin, dstIno, din)
	} else {
		if dstIno != 0 {
			if err := checkReplace(sin, din, o, dstIno, dname); err != nil {
				return false, 0, 0, err
			}
			if _, err := ddir.Remove(db, dname); err != nil {
				return false, 0, 0, dirError(err, dname)
			}
			if err := fs.logName(t, dd, ddin, layout.NameRemoved, dname, dstIno, din.Gen, uint8(din.Mode>>12), now); err != nil {
				return false, 0, 0, err
			}
			din.Ctime = now
			if isDir(din) {
				ddin.Nlink--
				din.Nlink = 0
			} else {
				din.Nlink--
			}
			if err := fs.unchargeLast(h, t, din); err != nil {
				return false, 0, 0, err
			}
			if din.Nlink == 0 && (isDir(din) || !fs.keepOrphan(ctx, h, t, dstIno, din.Gen)) {
				delete(o.m, dstIno)
				if err := fs.freeInode(t, dstIno, din); err != nil {
					return false, 0, 0, err
				}
				if isReg(din) {
					freed, hwm = dstIno, din.HWM
				}
			} else {
				o.mark(dstIno)
			}
		}
		if _, err := sdir.Remove(sb, sname); err != nil {
			return false, 0, 0, dirError(err, sname)
		}
		if err := ddir.Insert(db, dir.Entry{Name: dname, Ino: srcIno, Type: se.Type}); err != nil {
			return false, 0, 0, dirError(err, dname)
		}
		if err := fs.logName(t, sd, sdin, layout.NameRemoved, sname, srcIno, sin.Gen, se.Type, now); err != nil {
			return false, 0, 0, err
		}
		if err := fs.logName(t, dd, ddin, layout.NameAdded, dname, srcIno, sin.Gen, se.Type, now); err != nil {
			return false, 0, 0, err
		}
		reparent(o, sdin, ddin, sd, dd, srcIno, sin, 0, nil)
	}
	sin.Ctime = now
	o.mark(srcIno)
	saveDir(sdin, sdir)
	saveDir(ddin, ddir)
	sdin.Mtime, sdin.Ctime, ddin.Mtime, ddin.Ctime = now, now, now, now
	o.mark(sd)
	o.mark(dd)
	if err := o.put(); err != nil {
		return false, 0, 0, err
	}
	return false, freed, hwm, t.commit()
}

// checkReplace says whether src may replace dst.
func checkReplace(src, dst *layout.Inode, o *opInodes, dstIno uint64, name string) error {
	switch {
	case isDir(src) && !isDir(dst):
		return fmt.Errorf("%w: %q", ErrNotDir, name)
	case !isDir(src) && isDir(dst):
		return fmt.Errorf("%w: %q", ErrIsDir, name)
	case isDir(dst):
		d, err := dirOf(dstIno, dst)
		if err != nil {
			return err
		}
		if d.Len() > 0 {
			return fmt.Errorf("%w: %q", ErrNotEmpty, name)
		}
	}
	return nil
}

// exchange swaps the targets of two entries.
func exchange(sdir *dir.Dir, sb dirBlocks, ddir *dir.Dir, db dirBlocks, se, de dir.Entry) error {
	if _, err := sdir.Remove(sb, se.Name); err != nil {
		return dirError(err, se.Name)
	}
	if _, err := ddir.Remove(db, de.Name); err != nil {
		return dirError(err, de.Name)
	}
	if err := sdir.Insert(sb, dir.Entry{Name: se.Name, Ino: de.Ino, Type: de.Type}); err != nil {
		return dirError(err, se.Name)
	}
	return dirError(ddir.Insert(db, dir.Entry{Name: de.Name, Ino: se.Ino, Type: se.Type}), de.Name)
}

// reparent fixes parents and link counts after directories moved between
// sd and dd: src went to dd, and (exchange) dst went to sd.
func reparent(o *opInodes, sdin, ddin *layout.Inode, sd, dd, srcIno uint64, sin *layout.Inode, dstIno uint64, din *layout.Inode) {
	if sd == dd {
		return
	}
	if isDir(sin) {
		sin.Parent = dd
		sdin.Nlink--
		ddin.Nlink++
	}
	if din != nil && isDir(din) {
		din.Parent = sd
		ddin.Nlink--
		sdin.Nlink++
		o.mark(dstIno)
	}
}
