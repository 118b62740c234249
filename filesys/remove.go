package filesys

import (
	"context"
	"errors"
	"fmt"

	"github.com/plumeria-fs/plumeria/filesys/dir"
	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// LinksMax bounds an inode's link count.
const LinksMax = 65000

// Unlink removes name (not a directory) from parent.
func (fs *FS) Unlink(ctx context.Context, parent uint64, name string) error {
	return fs.remove(ctx, parent, name, false)
}

// Rmdir removes the empty directory name from parent.
func (fs *FS) Rmdir(ctx context.Context, parent uint64, name string) error {
	return fs.remove(ctx, parent, name, true)
}

func (fs *FS) remove(ctx context.Context, parent uint64, name string, rmdir bool) error {
	for {
		e, err := fs.lookupEntry(ctx, parent, name)
		if err != nil {
			return err
		}
		h, err := fs.acquire(ctx, r(barrierLock), w(inodeLock(parent)), w(inodeLock(e.Ino)), w(rgLock(layout.RGOf(e.Ino))))
		if err != nil {
			return err
		}
		freed, hwm, retry, err := fs.removeLocked(ctx, h, parent, name, e.Ino, rmdir)
		h.release()
		if again, gerr := fs.quotaAgain(ctx, err); again || gerr != nil {
			if gerr != nil {
				return gerr
			}
			continue
		}
		if retry {
			continue
		}
		if err == nil && freed {
			fs.clearExtent(ctx, e.Ino, hwm)
		}
		return err
	}
}

func (fs *FS) removeLocked(ctx context.Context, h *held, parent uint64, name string, ino uint64, rmdir bool) (freed bool, hwm uint64, retry bool, err error) {
	t := fs.newTx(ctx)
	o := newOpInodes(t)
	pin, d, err := o.dir(parent)
	if err != nil {
		return false, 0, false, err
	}
	blocks := dirBlocks{t, parent}
	e, ok, err := d.Lookup(blocks, name)
	switch {
	case err != nil:
		return false, 0, false, dirError(err, name)
	case !ok:
		return false, 0, false, fmt.Errorf("%w: %q", ErrNotFound, name)
	case e.Ino != ino:
		return false, 0, true, nil // replaced meanwhile
	}
	cin, err := o.get(ino)
	if err != nil {
		return false, 0, false, err
	}
	now := fs.now()
	if rmdir {
		cd, err := dirOf(ino, cin)
		if err != nil {
			return false, 0, false, err
		}
		if cd.Len() > 0 {
			return false, 0, false, fmt.Errorf("%w: %q", ErrNotEmpty, name)
		}
		pin.Nlink--
		cin.Nlink = 0
	} else {
		if isDir(cin) {
			return false, 0, false, fmt.Errorf("%w: %q", ErrIsDir, name)
		}
		cin.Nlink--
	}
	if _, err := d.Remove(blocks, name); err != nil {
		return false, 0, false, dirError(err, name)
	}
	if err := fs.logName(t, parent, pin, layout.NameRemoved, name, ino, cin.Gen, uint8(cin.Mode>>12), now); err != nil {
		return false, 0, false, err
	}
	saveDir(pin, d)
	pin.Mtime, pin.Ctime = now, now
	cin.Ctime = now
	o.mark(parent)
	if err := fs.unchargeLast(h, t, cin); err != nil {
		return false, 0, false, err
	}
	if cin.Nlink > 0 || (!rmdir && fs.keepOrphan(ctx, h, t, ino, cin.Gen)) {
		o.mark(ino)
	} else {
		delete(o.m, ino)
		if err := fs.freeInode(t, ino, cin); err != nil {
			return false, 0, false, err
		}
		freed, hwm = isReg(cin), cin.HWM
	}
	if err := o.put(); err != nil {
		return false, 0, false, err
	}
	return freed, hwm, false, t.commit()
}

// keepOrphan reports whether ino (generation gen), whose last link t
// removes under h, is open or held here or open on another node; if so it
// is freed on its last local Release, or by a reaper once the other nodes
// closed it (iopen.go), instead of now, and t lists it in this node's
// orphan table.
func (fs *FS) keepOrphan(ctx context.Context, h *held, t *tx, ino, gen uint64) bool {
	if fs.heldHere(ino, gen) {
		t.orphanAdd(ino, gen)
		return true
	}
	if !fs.openElsewhere(ctx, h, ino) {
		return false
	}
	t.orphanAdd(ino, gen)
	// The reaper frees it only after t commits: it needs ino's lock,
	// which h holds until then.
	fs.reapWhenClosed(ino, gen)
	return true
}

// heldHere reports whether ino (generation gen, an orphan) is open or held
// here; if so its last local Release frees it.
func (fs *FS) heldHere(ino, gen uint64) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.mu.opens[ino] > 0 {
		fs.mu.orphans[ino] = gen
		return true
	}
	return false
}

// Open records one more local open of ino, generation gen (0: any), and
// pins its open lock: no node frees the file while it is open here. An
// inode freed since the caller looked it up (a rename replaced it), or
// whose number now names a newer file, is ErrStale: the kernel then looks
// the path up again. Counting the open before checking makes the check
// race-free: an unlink that commits after the count keeps the inode.
func (fs *FS) Open(ctx context.Context, ino, gen uint64) error {
	fs.Hold(ino)
	if err := fs.pinOpen(ctx, ino); err != nil {
		fs.Unhold(context.WithoutCancel(ctx), ino)
		return err
	}
	a, err := fs.Getattr(ctx, ino)
	switch {
	case errors.Is(err, ErrNotFound):
		err = fmt.Errorf("%w: inode %d was removed", ErrStale, ino)
	case err == nil && gen != 0 && a.Gen != gen:
		err = fmt.Errorf("%w: inode %d is generation %d now, not %d", ErrStale, ino, a.Gen, gen)
	}
	if err != nil {
		fs.Release(context.WithoutCancel(ctx), ino)
	}
	return err
}

// Hold counts one more local reference to ino without checking it: the
// kernel learned its number (a LOOKUP or CREATE reply) and may still send
// requests for it. Like an open it keeps an inode unlinked here allocated,
// so that its number names no other file meanwhile; Unhold ends it. (It
// does not pin the open lock: another node may free the file, and the
// kernel's requests for it then fail with ErrStale.)
func (fs *FS) Hold(ino uint64) {
	fs.mu.Lock()
	fs.mu.opens[ino]++
	fs.mu.Unlock()
}

// Release ends one Open; the last local reference of an unlinked file
// frees it before Release returns (or leaves it to a reaper while another
// node has it open).
func (fs *FS) Release(ctx context.Context, ino uint64) {
	fs.unpinOpen(ino)
	fs.unhold(ctx, ino, false)
}

// Unhold ends one Hold (the kernel forgot ino); the last local reference
// of an unlinked file hands it to the freer (freer.go), which frees it
// with others in one transaction soon after.
func (fs *FS) Unhold(ctx context.Context, ino uint64) { fs.unhold(ctx, ino, true) }

func (fs *FS) unhold(ctx context.Context, ino uint64, queue bool) {
	fs.mu.Lock()
	fs.mu.opens[ino]--
	last := fs.mu.opens[ino] <= 0
	gen, orphan := fs.mu.orphans[ino]
	orphan = orphan && last
	if last {
		delete(fs.mu.opens, ino)
		delete(fs.mu.orphans, ino)
	}
	fs.mu.Unlock()
	if orphan && !(queue && fs.freer.add(ino, gen)) {
		fs.freeOrphan(ctx, ino, gen)
	}
}

// Link makes name in parent a new link to ino.
func (fs *FS) Link(ctx context.Context, ino, parent uint64, name string) (Attr, error) {
	if err := checkName(name); err != nil {
		return Attr{}, err
	}
	h, err := fs.acquire(ctx, r(barrierLock), w(inodeLock(parent)), w(inodeLock(ino)))
	if err != nil {
		return Attr{}, err
	}
	defer h.release()
	t := fs.newTx(ctx)
	o := newOpInodes(t)
	pin, d, err := o.dir(parent)
	if err != nil {
		return Attr{}, err
	}
	in, err := o.get(ino)
	switch {
	case err != nil:
		return Attr{}, err
	case isDir(in):
		return Attr{}, fmt.Errorf("%w: hard link to a directory", ErrNotPermitted)
	case in.Nlink >= LinksMax:
		return Attr{}, fmt.Errorf("%w: inode %d has %d links", ErrTooManyLinks, ino, in.Nlink)
	case in.Nlink == 0:
		return Attr{}, fmt.Errorf("%w: inode %d was unlinked", ErrNotFound, ino)
	case in.Realms != innerRealms(parent, pin):
		return Attr{}, fmt.Errorf("%w: a link between quota realms (%v, %v)", ErrCrossDevice, in.Realms, innerRealms(parent, pin))
	}
	if err := d.Insert(dirBlocks{t, parent}, dir.Entry{Name: name, Ino: ino, Type: uint8(in.Mode >> 12)}); err != nil {
		return Attr{}, dirError(err, name)
	}
	now := fs.now()
	if err := fs.logName(t, parent, pin, layout.NameAdded, name, ino, in.Gen, uint8(in.Mode>>12), now); err != nil {
		return Attr{}, err
	}
	saveDir(pin, d)
	pin.Mtime, pin.Ctime = now, now
	in.Nlink++
	in.Ctime = now
	o.mark(parent)
	o.mark(ino)
	if err := o.put(); err != nil {
		return Attr{}, err
	}
	if err := t.commit(); err != nil {
		return Attr{}, err
	}
	return attrOf(ino, in), nil
}
