package filesys

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// QuotaInfo is a quota directory's limits and usage, as `plumeria quota
// show --json` prints it (QuotaInfoXattr). Version 1; fields are only
// added.
type QuotaInfo struct {
	Version     int          `json:"version"`
	Dir         uint64       `json:"dir"`          // the quota directory's inode
	LimitBytes  uint64       `json:"limit_bytes"`  // 0: no limit
	LimitInodes uint64       `json:"limit_inodes"` // 0: no limit
	UsedBytes   int64        `json:"used_bytes"`   // logical size of the regular files and symlinks below
	UsedInodes  int64        `json:"used_inodes"`  // files, directories, symlinks and nodes below
	Shares      []QuotaShare `json:"shares"`       // per log slot that ever charged the realm
	// Counting: the first count of what was below the directory is not
	// finished (usage is partial); set the quota again to resume it if
	// its set was interrupted.
	Counting bool `json:"counting,omitempty"`
}

// QuotaShare is one log slot's part of a realm: what its nodes charged
// (it may be negative: a node may free what another charged) and the
// allowance it holds beyond that (-1: no limit in that dimension).
type QuotaShare struct {
	Slot         int    `json:"slot"`
	Node         string `json:"node"` // the node in the slot now ("" free)
	ChargedBytes int64  `json:"charged_bytes"`
	ChargedInode int64  `json:"charged_inodes"`
	HeldBytes    int64  `json:"held_bytes"`
	HeldInodes   int64  `json:"held_inodes"`
}

// QuotaLimits is what SetQuota changes; nil leaves a limit as it is, 0
// removes it.
type QuotaLimits struct {
	Bytes, Inodes *uint64
}

// ParseQuota reads a QuotaXattr value: space-separated bytes=N and
// inodes=N (decimal; 0 or "none": no limit), each at most once, at least
// one. Refusals wrap ErrInvalid.
func ParseQuota(s string) (QuotaLimits, error) {
	var q QuotaLimits
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return q, fmt.Errorf("%w: empty quota: give bytes=N and/or inodes=N (0 or none: no limit)", ErrInvalid)
	}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return q, fmt.Errorf("%w: quota %q: %q is not KEY=VALUE", ErrInvalid, s, f)
		}
		var n uint64
		if v != "none" {
			var err error
			if n, err = strconv.ParseUint(v, 10, 63); err != nil {
				return q, fmt.Errorf("%w: quota %q: %s=%q is not a count of 0 to 2^63-1 (or none)", ErrInvalid, s, k, v)
			}
		}
		var dst **uint64
		switch k {
		case "bytes":
			dst = &q.Bytes
		case "inodes":
			dst = &q.Inodes
		default:
			return q, fmt.Errorf("%w: quota %q: unknown key %q (bytes or inodes)", ErrInvalid, s, k)
		}
		if *dst != nil {
			return q, fmt.Errorf("%w: quota %q: %s given twice", ErrInvalid, s, k)
		}
		*dst = &n
	}
	return q, nil
}

func quotaString(bytes, inodes uint64) string {
	f := func(n uint64) string {
		if n == 0 {
			return "none"
		}
		return strconv.FormatUint(n, 10)
	}
	return "bytes=" + f(bytes) + " inodes=" + f(inodes)
}

// SetQuota sets directory ino's quota limits. The first quota of a
// directory makes it a realm root and counts what is below it (a walk of
// the subtree; its usage grows as the walk goes). Quotas nest: an inode
// is counted in every realm it is below, at most layout.RealmsMax of
// them; a quota that would put an inode in more is refused (ErrInvalid).
// A limit below the usage is accepted: nothing more is admitted until the
// usage falls below it. Removing both limits keeps the directory a realm,
// its usage counted (rbytes, rfiles).
func (fs *FS) SetQuota(ctx context.Context, ino uint64, q QuotaLimits) error {
	in, err := fs.readInode(ctx, ino)
	if err != nil {
		return err
	}
	if err := quotaRootable(ino, in); err != nil {
		return err
	}
	first := in.Flags&layout.FlagQuota == 0
	if first {
		// Refuse before anything changes (a quota set below meanwhile
		// that leaves no room is refused by the walk).
		if err := fs.quotaWalk(ctx, ino, func(_ uint64, name string, e uint64) error {
			x, err := fs.readInode(ctx, e)
			room := layout.RealmsMax // it gets one more realm
			if err == nil && x.Flags&layout.FlagQuota != 0 {
				room-- // and what is created in it one more than that
			}
			if err == nil && depth(x.Realms) >= room {
				return fmt.Errorf("%w: quotas nest at most %d deep: %q (inode %d) below directory %d is in %d quotas already", ErrInvalid, layout.RealmsMax, name, e, ino, depth(x.Realms))
			}
			if errors.Is(err, ErrNotFound) {
				err = nil
			}
			return err
		}); err != nil {
			return err
		}
	}
	counting, err := fs.setQuotaHead(ctx, ino, q)
	if err != nil || !counting {
		return err
	}
	if err := fs.quotaWalk(ctx, ino, func(d uint64, name string, _ uint64) error {
		return fs.tagEntry(ctx, ino, in.Realms, d, name)
	}); err != nil {
		return err
	}
	return fs.quotaCounted(ctx, ino)
}

// quotaCounted clears realm's QuotaCounting: its first count is done.
func (fs *FS) quotaCounted(ctx context.Context, realm uint64) error {
	h, err := fs.acquire(ctx, r(barrierLock), w(quotaLock(realm, 0)))
	if err != nil {
		return err
	}
	defer h.release()
	t := fs.newTx(ctx)
	b, err := t.write(layout.QuotaAddr(realm, 0), quotaLock(realm, 0))
	if err != nil {
		return err
	}
	head, err := layout.DecodeQuotaHead(b, realm)
	if err != nil {
		return fmt.Errorf("%w: quota realm %d: %v (run plumeria fsck)", ErrIO, realm, err)
	}
	head.Flags &^= layout.QuotaCounting
	layout.EncodeQuotaHead(b, realm, layout.Version(b), head)
	return t.commit()
}

func quotaRootable(ino uint64, in *layout.Inode) error {
	switch {
	case !isDir(in):
		return fmt.Errorf("%w: a quota is set on a directory, inode %d is not one", ErrNotDir, ino)
	case depth(in.Realms) >= layout.RealmsMax:
		return fmt.Errorf("%w: quotas nest at most %d deep: directory %d is inside %d quotas already (%v)", ErrInvalid, layout.RealmsMax, ino, depth(in.Realms), in.Realms)
	}
	return nil
}

// setQuotaHead makes ino a realm root (resetting the ledgers the number's
// blocks hold from an earlier directory) or changes its limits, taking
// back every node's unused allowance so that new limits hold at once. It
// reports whether the realm's first count is to be done (or resumed).
func (fs *FS) setQuotaHead(ctx context.Context, ino uint64, q QuotaLimits) (counting bool, _ error) {
	h, err := fs.acquire(ctx, r(barrierLock), w(inodeLock(ino)))
	if err != nil {
		return false, err
	}
	defer h.release()
	t := fs.newTx(ctx)
	in, err := t.inode(ino)
	if err != nil {
		return false, err
	}
	if err := quotaRootable(ino, in); err != nil {
		return false, err
	}
	rb, err := fs.lockRealm(ctx, h, t, ino, true, true)
	if err != nil {
		return false, err
	}
	if in.Flags&layout.FlagQuota == 0 {
		rb.head.LimitBytes, rb.head.LimitInodes = 0, 0
		rb.head.Flags = layout.QuotaCounting
		for _, l := range rb.ledgers {
			*l = layout.QuotaLedger{}
		}
		in.Flags |= layout.FlagQuota
		in.Ctime = fs.now()
		if err := t.putInode(ino, in); err != nil {
			return false, err
		}
	}
	if q.Bytes != nil {
		rb.head.LimitBytes = *q.Bytes
	}
	if q.Inodes != nil {
		rb.head.LimitInodes = *q.Inodes
	}
	rb.regrant()
	if err := rb.put(); err != nil {
		return false, err
	}
	return rb.head.Flags&layout.QuotaCounting != 0, t.commit()
}

// readInode reads inode ino under a read lock.
func (fs *FS) readInode(ctx context.Context, ino uint64) (*layout.Inode, error) {
	h, err := fs.acquire(ctx, r(inodeLock(ino)))
	if err != nil {
		return nil, err
	}
	defer h.release()
	return fs.newTx(ctx).inode(ino)
}

// quotaWalk calls visit for every entry below directory root (d is the
// entry's directory), a directory before its entries.
func (fs *FS) quotaWalk(ctx context.Context, root uint64, visit func(d uint64, name string, ino uint64) error) error {
	stack := []uint64{root}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for after, done := uint64(0), false; !done; {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("%w: quota walk: %v", ErrInterrupted, err)
			}
			ents, end, err := fs.ReadDir(ctx, d, after, 1024)
			if errors.Is(err, ErrNotFound) {
				break // removed meanwhile
			}
			if err != nil {
				return err
			}
			for _, e := range ents {
				after = e.Cookie
				if err := visit(d, e.Name, e.Ino); err != nil {
					return err
				}
				if e.Mode&typeMask == typeDir {
					stack = append(stack, e.Ino)
				}
			}
			done = end || len(ents) == 0
		}
	}
	return nil
}

// tagEntry puts what name in directory d names into realm (counting it
// there) unless it is in it already: it is then counted already (it was
// created in the realm, or tagged before). outer are the realms the root
// of realm is in: those of every inode below it end with them, and realm
// goes before them.
func (fs *FS) tagEntry(ctx context.Context, realm uint64, outer realms, d uint64, name string) error {
	e, err := fs.lookupEntry(ctx, d, name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	h, err := fs.acquire(ctx, r(barrierLock), r(inodeLock(d)), w(inodeLock(e.Ino)))
	if err != nil {
		return err
	}
	defer h.release()
	t := fs.newTx(ctx)
	if now, err := lookupLocked(t, d, name); err != nil || now.Ino != e.Ino {
		return nil // gone or replaced: what replaced it was created in the realm or is tagged by its own visit
	}
	in, err := t.inode(e.Ino)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if slices.Contains(in.Realms[:], realm) {
		return nil
	}
	n, k := depth(in.Realms), depth(outer)
	switch {
	case n < k || !slices.Equal(in.Realms[n-k:n], outer[:k]):
		return fmt.Errorf("%w: %q (inode %d) is in quotas %v, not below those of directory %d (%v): a quota changed above meanwhile; set it again", ErrInvalid, name, e.Ino, in.Realms[:n], realm, outer[:k])
	case n >= layout.RealmsMax:
		return fmt.Errorf("%w: quotas nest at most %d deep: %q (inode %d) is in %d quotas already", ErrInvalid, layout.RealmsMax, name, e.Ino, n)
	}
	var rs realms
	copy(rs[:], in.Realms[:n-k])
	rs[n-k] = realm
	copy(rs[n-k+1:], outer[:k])
	in.Realms = rs
	if err := fs.chargeCounted(ctx, h, t, realm, chargedBytes(in), 1); err != nil {
		return err
	}
	if err := t.putInode(e.Ino, in); err != nil {
		return err
	}
	return t.commit()
}

// chargeCounted charges what the first count found (it was there before
// the quota) to this node's ledger whatever the limit, with as much
// allowance, under the head's lock too (the granted sums follow).
func (fs *FS) chargeCounted(ctx context.Context, h *held, t *tx, realm uint64, bytes, inodes int64) error {
	rb, err := fs.lockRealm(ctx, h, t, realm, true, false)
	if err != nil {
		return err
	}
	l := rb.ledgers[fs.slot]
	l.UsedBytes += bytes
	l.UsedInodes += inodes
	l.AllowBytes += bytes
	l.AllowInodes += inodes
	rb.head.GrantedBytes += bytes
	rb.head.GrantedInodes += inodes
	return rb.put()
}

// QuotaInfo returns quota directory ino's limits and exact usage: it reads
// every ledger under its lock, so nodes write back what they charged.
// ErrNoAttr if ino roots no realm.
func (fs *FS) QuotaInfo(ctx context.Context, ino uint64) (QuotaInfo, error) {
	h, err := fs.acquire(ctx, r(inodeLock(ino)))
	if err != nil {
		return QuotaInfo{}, err
	}
	defer h.release()
	t := fs.newTx(ctx)
	in, err := t.inode(ino)
	if err != nil {
		return QuotaInfo{}, err
	}
	if in.Flags&layout.FlagQuota == 0 {
		return QuotaInfo{}, fmt.Errorf("%w: directory %d has no quota", ErrNoAttr, ino)
	}
	rb, err := fs.lockRealm(ctx, h, t, ino, false, true)
	if err != nil {
		return QuotaInfo{}, err
	}
	info := QuotaInfo{Version: 1, Dir: ino, LimitBytes: rb.head.LimitBytes, LimitInodes: rb.head.LimitInodes, Shares: []QuotaShare{},
		Counting: rb.head.Flags&layout.QuotaCounting != 0}
	info.UsedBytes, info.UsedInodes = rb.usage()
	var names []layout.Slot
	if !fs.cfg.ReadOnly {
		names, _, _ = fs.readSlots(ctx) // best effort: names only
	}
	for _, s := range rb.head.SlotList() {
		l := rb.ledgers[s]
		sh := QuotaShare{Slot: s, ChargedBytes: l.UsedBytes, ChargedInode: l.UsedInodes,
			HeldBytes: held1(l.UsedBytes, l.AllowBytes), HeldInodes: held1(l.UsedInodes, l.AllowInodes)}
		if s < len(names) && names[s].Used {
			sh.Node = names[s].Name
		}
		info.Shares = append(info.Shares, sh)
	}
	return info, nil
}

func held1(used, allow int64) int64 {
	switch {
	case allow >= quotaUnlimited:
		return -1
	case allow > used:
		return allow - used
	}
	return 0
}

// quotaGetxattr answers the quota attributes (ok false: name is another).
func (fs *FS) quotaGetxattr(ctx context.Context, ino uint64, name string) (_ []byte, ok bool, _ error) {
	switch name {
	case QuotaXattr, QuotaUserXattr, RbytesXattr, RfilesXattr, QuotaInfoXattr:
	default:
		return nil, false, nil
	}
	info, err := fs.QuotaInfo(ctx, ino)
	if err != nil {
		return nil, true, err
	}
	switch name {
	case QuotaXattr, QuotaUserXattr:
		return []byte(quotaString(info.LimitBytes, info.LimitInodes)), true, nil
	case RbytesXattr:
		return []byte(strconv.FormatInt(info.UsedBytes, 10)), true, nil
	case RfilesXattr:
		return []byte(strconv.FormatInt(info.UsedInodes, 10)), true, nil
	}
	b, err := json.Marshal(info)
	return b, true, err
}

// quotaSetxattr sets QuotaXattr and refuses the read-only quota
// attributes (ok false: name is another).
func (fs *FS) quotaSetxattr(ctx context.Context, ino uint64, name string, value []byte, remove bool) (ok bool, _ error) {
	switch name {
	case QuotaXattr:
	case QuotaUserXattr:
		return true, fmt.Errorf("%w: %s is read only: a quota is set through %s (root)", ErrNotPermitted, name, QuotaXattr)
	case RbytesXattr, RfilesXattr, QuotaInfoXattr:
		return true, fmt.Errorf("%w: %s is made by the file system", ErrNotPermitted, name)
	default:
		return false, nil
	}
	if remove {
		in, err := fs.readInode(ctx, ino)
		if err != nil {
			return true, err
		}
		if in.Flags&layout.FlagQuota == 0 {
			return true, fmt.Errorf("%w: directory %d has no quota", ErrNoAttr, ino)
		}
		var zero uint64
		return true, fs.SetQuota(ctx, ino, QuotaLimits{Bytes: &zero, Inodes: &zero})
	}
	q, err := ParseQuota(string(value))
	if err != nil {
		return true, err
	}
	return true, fs.SetQuota(ctx, ino, q)
}
