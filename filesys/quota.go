package filesys

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// Directory quotas (issue K, docs/quotas.md). A directory with
// layout.FlagQuota roots a quota realm; every inode below it carries the
// root's number (layout.Inode.Realm), so a write knows its realm from the
// inode it already holds: a file in no realm costs one comparison.
//
// Usage is kept per log slot, in ledgers (layout/quota.go): a node
// charges its own slot's ledger, under that ledger's lock (which it keeps,
// sticky, so charging costs no lock-server round trip), in the same
// transaction as the change that causes it. A ledger also holds the
// node's allowance: the node accepts a charge only while its ledger's used
// stays within it. Allowances are handed out by grow under the realm
// head's lock and every ledger's, so that the sum over slots of
// max(allowance, used) never exceeds the limit: the usage can never pass
// the limit (an overrun bound of 0 bytes and 0 inodes). A node short of
// allowance takes back the unused allowances of the others (their ledger
// locks are revoked from them: what they charged is written back first).
// After a crash the dead node's log is replayed like any other, which
// leaves its ledger exact; its unused allowance is taken back by the next
// grow.

// Errors of quotas.
var (
	// ErrQuota: the change would take a directory quota over its limit.
	ErrQuota = errors.New("disk quota exceeded") // EDQUOT
	// ErrCrossDevice: a rename or link between two quota realms
	// (`mv` copies instead).
	ErrCrossDevice = errors.New("invalid cross-device link") // EXDEV
)

// Quota attributes of a quota directory (docs/quotas.md). The quota is
// set through the trusted namespace, which the kernel lets only
// CAP_SYS_ADMIN read or write: a user who may write a directory may not
// raise its quota. Anyone who may read it reads the limits and usage
// through the user namespace.
const (
	QuotaXattr     = "trusted.plumeria.quota"  // "bytes=N inodes=M" (none: no limit); set it to set the quota
	QuotaUserXattr = "user.plumeria.quota"     // QuotaXattr's value, read only
	RbytesXattr    = "user.plumeria.rbytes"    // bytes used below the directory (read only)
	RfilesXattr    = "user.plumeria.rfiles"    // inodes used below the directory (read only)
	QuotaInfoXattr = "user.plumeria.quotainfo" // QuotaInfo as JSON (read only)
)

// Metrics of quotas (docs/operations.md, Metrics).
var (
	quotaGrowsOpts = prometheus.CounterOpts{Name: "plumeria_fs_quota_grows_total",
		Help: "Times this node took more quota allowance under the realm's locks (the only quota work that needs the lock service)."}
	quotaRefusedOpts = prometheus.CounterOpts{Name: "plumeria_fs_quota_exceeded_total",
		Help: "Changes refused with EDQUOT: a directory quota had no room left."}
)

// quotaLockBase + realm<<9 + k: the lock of quota block k of a realm;
// between the resource groups' locks and the slots' (Revoke writes back
// the blocks they cover like any metadata lock's).
const quotaLockBase = 1 << 38

func quotaLock(realm uint64, k int) uint64 { return quotaLockBase + realm<<9 + uint64(k) }

// Compile-time: a realm's locks stay in their range (k at most QuotaSlots).
const _ = uint64(1<<9 - 1 - layout.QuotaSlots)

// quotaUnlimited is the allowance in a dimension without a limit.
const quotaUnlimited = 1 << 62

// quotaTriesMax bounds how often one change asks for more allowance
// before it gives up (other nodes took it back each time).
const quotaTriesMax = 32

// quotaShareMax bounds the allowance one grow hands a node beyond what it
// needs: a node that dies keeps at most this much (until the next grow).
const quotaShareMax = 1 << 30

// innerRealm is the realm of what is created in directory ino.
func innerRealm(ino uint64, in *layout.Inode) uint64 {
	if in.Flags&layout.FlagQuota != 0 {
		return ino
	}
	return in.Realm
}

// chargedBytes is what an inode counts in its realm's bytes: the logical
// size of a regular file or symlink.
func chargedBytes(in *layout.Inode) int64 {
	if isReg(in) || in.Mode&typeMask == typeLnk {
		return int64(in.Size)
	}
	return 0
}

// quotaShort is the error of a charge this node's allowance does not
// cover: the caller gives up its locks, grows the allowance and retries.
type quotaShort struct {
	realm         uint64
	bytes, inodes int64 // more allowance needed
}

func (e *quotaShort) Error() string {
	return fmt.Sprintf("quota realm %d: %d bytes and %d inodes beyond this node's allowance", e.realm, e.bytes, e.inodes)
}

func (h *held) holds(id uint64) bool {
	for _, x := range h.locks {
		if x.id == id {
			return true
		}
	}
	return false
}

// charge adds bytes and inodes (negative: frees) to realm's usage in this
// node's ledger, staged in t; h gets the ledger's lock (the highest ids,
// so taken last and in order). A growth past this node's allowance is a
// *quotaShort and changes nothing. Realm 0 costs nothing.
func (fs *FS) charge(h *held, t *tx, realm uint64, bytes, inodes int64) error {
	return fs.chargeLedger(h, t, realm, bytes, inodes, false)
}

func (fs *FS) chargeLedger(h *held, t *tx, realm uint64, bytes, inodes int64, force bool) error {
	if realm == 0 || bytes == 0 && inodes == 0 {
		return nil
	}
	k := 1 + fs.slot
	id := quotaLock(realm, k)
	if !h.holds(id) {
		if err := h.add(t.ctx, w(id)); err != nil {
			return err
		}
	}
	b, err := t.write(layout.QuotaAddr(realm, k), id)
	if err != nil {
		return err
	}
	l, err := layout.DecodeQuotaLedger(b, realm, k)
	if err != nil {
		return fmt.Errorf("%w: quota realm %d: %v (run plumeria fsck)", ErrIO, realm, err)
	}
	short := &quotaShort{realm: realm}
	if bytes > 0 && l.UsedBytes+bytes > l.AllowBytes {
		short.bytes = l.UsedBytes + bytes - l.AllowBytes
	}
	if inodes > 0 && l.UsedInodes+inodes > l.AllowInodes {
		short.inodes = l.UsedInodes + inodes - l.AllowInodes
	}
	if !force && (short.bytes > 0 || short.inodes > 0) {
		return short
	}
	l.UsedBytes += bytes
	l.UsedInodes += inodes
	layout.EncodeQuotaLedger(b, realm, k, layout.Version(b), l)
	return nil
}

// quotaShortOf reports whether err asks for more allowance.
func quotaShortOf(err error) bool {
	if err == nil {
		return false // no allocation on the way of a write that succeeded
	}
	var short *quotaShort
	return errors.As(err, &short)
}

// withQuota runs op, and while it fails for lack of allowance grows this
// node's allowance and runs it again. ErrQuota once the realm has none.
func withQuota[T any](ctx context.Context, fs *FS, op func() (T, error)) (T, error) {
	for try := 0; ; try++ {
		v, err := op()
		var short *quotaShort
		if err == nil || !errors.As(err, &short) {
			return v, err
		}
		if try >= quotaTriesMax {
			return v, fmt.Errorf("%w: quota of directory %d: other nodes took the allowance back %d times", ErrQuota, short.realm, try)
		}
		if err := fs.grow(ctx, short); err != nil {
			if errors.Is(err, ErrQuota) {
				fs.stats.quotaRefused.Inc()
			}
			return v, err
		}
	}
}

// realmBlocks is a realm's head and ledgers staged in one transaction.
type realmBlocks struct {
	t       *tx
	realm   uint64
	head    *layout.QuotaHead
	ledgers map[int]*layout.QuotaLedger // by slot
}

// lockRealm takes realm's head lock and the lock of every ledger the head
// lists (plus this node's, which it adds to the head when write) in mode
// write or read, and decodes them.
func (fs *FS) lockRealm(ctx context.Context, h *held, t *tx, realm uint64, write bool) (*realmBlocks, error) {
	mode := r
	if write {
		mode = w
	}
	if err := h.add(ctx, mode(quotaLock(realm, 0))); err != nil {
		return nil, err
	}
	hb, err := t.read(layout.QuotaAddr(realm, 0), quotaLock(realm, 0))
	if err != nil {
		return nil, err
	}
	head, err := layout.DecodeQuotaHead(hb, realm)
	if err != nil {
		return nil, fmt.Errorf("%w: quota realm %d: %v (run plumeria fsck)", ErrIO, realm, err)
	}
	if write {
		head.AddSlot(fs.slot)
	}
	rb := &realmBlocks{t: t, realm: realm, head: head, ledgers: map[int]*layout.QuotaLedger{}}
	for _, s := range head.SlotList() {
		if err := h.add(ctx, mode(quotaLock(realm, 1+s))); err != nil {
			return nil, err
		}
		b, err := t.read(layout.QuotaAddr(realm, 1+s), quotaLock(realm, 1+s))
		if err != nil {
			return nil, err
		}
		l, err := layout.DecodeQuotaLedger(b, realm, 1+s)
		if err != nil {
			return nil, fmt.Errorf("%w: quota realm %d: %v (run plumeria fsck)", ErrIO, realm, err)
		}
		rb.ledgers[s] = l
	}
	return rb, nil
}

// put stages the head and every ledger.
func (rb *realmBlocks) put() error {
	b, err := rb.t.write(layout.QuotaAddr(rb.realm, 0), quotaLock(rb.realm, 0))
	if err != nil {
		return err
	}
	layout.EncodeQuotaHead(b, rb.realm, layout.Version(b), rb.head)
	for s, l := range rb.ledgers {
		b, err := rb.t.write(layout.QuotaAddr(rb.realm, 1+s), quotaLock(rb.realm, 1+s))
		if err != nil {
			return err
		}
		layout.EncodeQuotaLedger(b, rb.realm, 1+s, layout.Version(b), l)
	}
	return nil
}

// usage sums the ledgers.
func (rb *realmBlocks) usage() (bytes, inodes int64) {
	for _, l := range rb.ledgers {
		bytes += l.UsedBytes
		inodes += l.UsedInodes
	}
	return bytes, inodes
}

// grow gives this node allowance enough for short, taking back the unused
// allowance of other nodes if the free part of the limit does not cover
// it; ErrQuota if even that does not.
func (fs *FS) grow(ctx context.Context, short *quotaShort) error {
	h, err := fs.acquire(ctx, r(barrierLock))
	if err != nil {
		return err
	}
	defer h.release()
	t := fs.newTx(ctx)
	rb, err := fs.lockRealm(ctx, h, t, short.realm, true)
	if err != nil {
		return err
	}
	if rb.ledgers[fs.slot] == nil {
		rb.ledgers[fs.slot] = &layout.QuotaLedger{}
	}
	if err := grant(rb, fs.slot, rb.head.LimitBytes, short.bytes, "bytes",
		func(l *layout.QuotaLedger) (*int64, *int64) { return &l.UsedBytes, &l.AllowBytes }); err != nil {
		return err
	}
	if err := grant(rb, fs.slot, rb.head.LimitInodes, short.inodes, "inodes",
		func(l *layout.QuotaLedger) (*int64, *int64) { return &l.UsedInodes, &l.AllowInodes }); err != nil {
		return err
	}
	if err := rb.put(); err != nil {
		return err
	}
	fs.stats.quotaGrows.Inc()
	return t.commit()
}

// grant raises slot me's allowance in one dimension (field picks it) by
// at least need, keeping the sum of max(allowance, used) over the slots
// within limit (0: no limit).
func grant(rb *realmBlocks, me int, limit uint64, need int64, what string, field func(*layout.QuotaLedger) (used, allow *int64)) error {
	if need <= 0 {
		return nil
	}
	_, myAllow := field(rb.ledgers[me])
	if limit == 0 {
		*myAllow = quotaUnlimited
		return nil
	}
	claimed := func() int64 {
		var sum int64
		for _, l := range rb.ledgers {
			u, a := field(l)
			sum += max(*u, *a)
		}
		return sum
	}
	free := int64(limit) - claimed()
	if free < need {
		for s, l := range rb.ledgers { // take back the others' unused allowance
			if u, a := field(l); s != me && *a > *u {
				*a = *u
			}
		}
		free = int64(limit) - claimed()
	}
	if free < need {
		used := int64(0)
		for _, l := range rb.ledgers {
			u, _ := field(l)
			used += *u
		}
		return fmt.Errorf("%w: quota of directory %d: %d %s used of %d, %d more asked", ErrQuota, rb.realm, used, what, limit, need)
	}
	// Beyond the need, a share of what is free: a few grows fill the
	// realm, and two busy nodes do not take it back from each other at
	// every write.
	extra := min(free/int64(2*len(rb.ledgers)), quotaShareMax, free-need)
	*myAllow += need + max(extra, 0)
	return nil
}

// unchargeLast frees in's bytes and inode in its realm when its last
// link goes (nlink 0), at once even if it stays open: it leaves the realm
// (an open unlinked file is counted nowhere until it is freed).
func (fs *FS) unchargeLast(h *held, t *tx, in *layout.Inode) error {
	if in.Nlink > 0 || in.Realm == 0 {
		return nil
	}
	if err := fs.charge(h, t, in.Realm, -chargedBytes(in), -1); err != nil {
		return err
	}
	in.Realm = 0
	return nil
}

// crossRealm refuses a rename that moves an inode between quota realms
// (ErrCrossDevice: `mv` copies instead, which counts it).
func crossRealm(sd uint64, sdin *layout.Inode, srcIno uint64, sin *layout.Inode, dd uint64, ddin, din *layout.Inode, flags uint32) error {
	if to := innerRealm(dd, ddin); sin.Realm != to {
		return fmt.Errorf("%w: inode %d of quota realm %d into realm %d", ErrCrossDevice, srcIno, sin.Realm, to)
	}
	if flags&RenameExchange != 0 && din != nil {
		if to := innerRealm(sd, sdin); din.Realm != to {
			return fmt.Errorf("%w: an exchange between quota realms %d and %d", ErrCrossDevice, din.Realm, to)
		}
	}
	return nil
}

// Compile-time: the quota locks lie between the groups' and the slots'.
const (
	_ = uint64(quotaLockBase - rgLockBase - layout.RGsMax)
	_ = uint64(slotLockBase - quotaLockBase - layout.InodesMax<<9)
)
