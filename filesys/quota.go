package filesys

import (
	"context"
	"errors"
	"fmt"
	"slices"

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
// head's lock, which keeps their sum (granted) within the limit, so the
// usage can never pass the limit: an overrun bound of 0 bytes and 0
// inodes. A node short of allowance when nothing is left to grant takes
// back the unused allowances of the others under every ledger's lock
// (their locks are revoked: what they charged is written back first).
// After a crash the dead node's log is replayed like any other, which
// leaves its ledger exact; its unused allowance is taken back by the next
// grow that needs it.

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

// realms are the quota realms an inode is counted in, innermost first,
// the rest 0 (layout.Inode.Realms).
type realms = [layout.RealmsMax]uint64

// depth is how many realms rs holds.
func depth(rs realms) int {
	n := 0
	for n < len(rs) && rs[n] != 0 {
		n++
	}
	return n
}

// innerRealms are the realms of what is created in directory ino: a
// quota root's own realm first, then those it is in.
func innerRealms(ino uint64, in *layout.Inode) realms {
	if in.Flags&layout.FlagQuota == 0 {
		return in.Realms
	}
	rs := realms{ino}
	copy(rs[1:], in.Realms[:])
	return rs
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

// charge adds bytes and inodes (negative: frees) to the usage of each of
// realms rs in this node's ledgers, staged in t; h gets the ledgers'
// locks (the highest ids held, taken last, in order). A growth past this
// node's allowance in any of them is a *quotaShort and changes nothing.
// No realm costs one comparison.
func (fs *FS) charge(h *held, t *tx, rs realms, bytes, inodes int64) error {
	if rs[0] == 0 || bytes == 0 && inodes == 0 {
		return nil
	}
	order := rs
	slices.Sort(order[:depth(rs)])
	var ls [layout.RealmsMax]*layout.QuotaLedger
	var bs [layout.RealmsMax][]byte
	for i, realm := range order[:depth(rs)] {
		l, b, err := fs.ledger(h, t, realm, bytes, inodes)
		if err != nil {
			return err
		}
		ls[i], bs[i] = l, b
	}
	for i, realm := range order[:depth(rs)] {
		ls[i].UsedBytes += bytes
		ls[i].UsedInodes += inodes
		layout.EncodeQuotaLedger(bs[i], realm, 1+fs.slot, layout.Version(bs[i]), ls[i])
	}
	return nil
}

// ledger stages this node's ledger of realm in t under its lock (added to
// h) and checks that it allows the change (a *quotaShort if not).
func (fs *FS) ledger(h *held, t *tx, realm uint64, bytes, inodes int64) (*layout.QuotaLedger, []byte, error) {
	k := 1 + fs.slot
	id := quotaLock(realm, k)
	if !h.holds(id) {
		if err := h.add(t.ctx, w(id)); err != nil {
			return nil, nil, err
		}
	}
	b, err := t.write(layout.QuotaAddr(realm, k), id)
	if err != nil {
		return nil, nil, err
	}
	l, err := layout.DecodeQuotaLedger(b, realm, k)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: quota realm %d: %v (run plumeria fsck)", ErrIO, realm, err)
	}
	short := &quotaShort{realm: realm}
	if layout.Version(b) == 0 {
		return nil, nil, short // a ledger never written: grow lists the slot in the head first
	}
	if bytes > 0 && l.UsedBytes+bytes > l.AllowBytes {
		short.bytes = l.UsedBytes + bytes - l.AllowBytes
	}
	if inodes > 0 && l.UsedInodes+inodes > l.AllowInodes {
		short.inodes = l.UsedInodes + inodes - l.AllowInodes
	}
	if short.bytes > 0 || short.inodes > 0 {
		return nil, nil, short
	}
	return l, b, nil
}

// quotaShortOf reports whether err asks for more allowance.
func quotaShortOf(err error) bool {
	if err == nil {
		return false // no allocation on the way of a write that succeeded
	}
	var short *quotaShort
	return errors.As(err, &short)
}

// quotaAgain grows this node's allowance if err asks for it (a removal
// that is this node's first change of a realm: its ledger gets listed)
// and reports that the caller should run its operation again.
func (fs *FS) quotaAgain(ctx context.Context, err error) (bool, error) {
	var short *quotaShort
	if err == nil || !errors.As(err, &short) {
		return false, nil
	}
	return true, fs.grow(ctx, short)
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
	ledgers map[int]*layout.QuotaLedger // by slot: those locked
}

// lockRealm takes realm's head lock and, with all, the lock of every
// ledger the head lists, else only this node's ledger's (write only), in
// mode write or read, and decodes them. In write mode this node's slot is
// listed.
func (fs *FS) lockRealm(ctx context.Context, h *held, t *tx, realm uint64, write, all bool) (*realmBlocks, error) {
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
	slots := []int{fs.slot}
	if all {
		slots = head.SlotList()
	}
	for _, s := range slots {
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

// put stages the head and the ledgers locked.
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

// regrant takes back every unused allowance (allowance := used) and sets
// the head's granted sums from the ledgers; rb holds them all.
func (rb *realmBlocks) regrant() {
	rb.head.GrantedBytes, rb.head.GrantedInodes = 0, 0
	for _, l := range rb.ledgers {
		l.AllowBytes, l.AllowInodes = l.UsedBytes, l.UsedInodes
		rb.head.GrantedBytes += l.AllowBytes
		rb.head.GrantedInodes += l.AllowInodes
	}
}

// quotaDim is one dimension (bytes or inodes) of a realm.
type quotaDim struct {
	what    string
	limit   uint64
	need    int64
	granted *int64
	field   func(*layout.QuotaLedger) (used, allow *int64)
}

func quotaDims(rb *realmBlocks, short *quotaShort) [2]quotaDim {
	return [2]quotaDim{
		{"bytes", rb.head.LimitBytes, short.bytes, &rb.head.GrantedBytes,
			func(l *layout.QuotaLedger) (*int64, *int64) { return &l.UsedBytes, &l.AllowBytes }},
		{"inodes", rb.head.LimitInodes, short.inodes, &rb.head.GrantedInodes,
			func(l *layout.QuotaLedger) (*int64, *int64) { return &l.UsedInodes, &l.AllowInodes }},
	}
}

// grow gives this node allowance enough for short. It first takes only
// the realm head's lock and this node's ledger's: other nodes go on
// charging meanwhile. Only when the part of the limit not yet granted
// does not cover the need does it take every ledger's lock (the other
// nodes write theirs back) and take back their unused allowance; ErrQuota
// if even that does not cover it.
func (fs *FS) grow(ctx context.Context, short *quotaShort) error {
	done, err := fs.growOnce(ctx, short, false)
	if done || err != nil {
		return err
	}
	_, err = fs.growOnce(ctx, short, true)
	return err
}

func (fs *FS) growOnce(ctx context.Context, short *quotaShort, all bool) (bool, error) {
	h, err := fs.acquire(ctx, r(barrierLock))
	if err != nil {
		return false, err
	}
	defer h.release()
	t := fs.newTx(ctx)
	rb, err := fs.lockRealm(ctx, h, t, short.realm, true, all)
	if err != nil {
		return false, err
	}
	for _, d := range quotaDims(rb, short) {
		if ok, err := grant(rb, fs.slot, d, all); !ok || err != nil {
			return false, err
		}
	}
	if err := rb.put(); err != nil {
		return false, err
	}
	fs.stats.quotaGrows.Inc()
	return true, t.commit()
}

// grant raises slot me's allowance in dimension d by at least d.need,
// keeping the granted sum within the limit (0: no limit). Without all
// (rb holds only me's ledger) it reports false if that needs taking back
// other nodes' allowance.
func grant(rb *realmBlocks, me int, d quotaDim, all bool) (bool, error) {
	if d.need <= 0 {
		return true, nil
	}
	_, myAllow := d.field(rb.ledgers[me])
	if d.limit == 0 {
		*myAllow = quotaUnlimited // the granted sum is recomputed when a limit is set
		return true, nil
	}
	free := int64(d.limit) - *d.granted
	if free < d.need && !all {
		return false, nil
	}
	if free < d.need {
		for s, l := range rb.ledgers { // take back the others' unused allowance
			if u, a := d.field(l); s != me && *a > *u {
				*d.granted -= *a - *u
				*a = *u
			}
		}
		free = int64(d.limit) - *d.granted
	}
	if free < d.need {
		used, _ := rb.usage()
		if d.what == "inodes" {
			_, used = rb.usage()
		}
		return false, fmt.Errorf("%w: quota of directory %d: %d %s used of %d, %d more asked", ErrQuota, rb.realm, used, d.what, d.limit, d.need)
	}
	// Beyond the need, a share of what is free: a few grows fill the
	// realm, and two busy nodes do not take it back from each other at
	// every write.
	extra := min(free/int64(2*len(rb.head.SlotList())), quotaShareMax, free-d.need)
	g := d.need + max(extra, 0)
	*myAllow += g
	*d.granted += g
	return true, nil
}

// unchargeLast frees in's bytes and inode in its realm when its last
// link goes (nlink 0), at once even if it stays open: it leaves the realm
// (an open unlinked file is counted nowhere until it is freed).
func (fs *FS) unchargeLast(h *held, t *tx, in *layout.Inode) error {
	if in.Nlink > 0 || in.Realms[0] == 0 {
		return nil
	}
	if err := fs.charge(h, t, in.Realms, -chargedBytes(in), -1); err != nil {
		return err
	}
	in.Realms = realms{}
	return nil
}

// crossRealm refuses a rename that moves an inode between quota realms
// (ErrCrossDevice: `mv` copies instead, which counts it).
func crossRealm(sd uint64, sdin *layout.Inode, srcIno uint64, sin *layout.Inode, dd uint64, ddin, din *layout.Inode, flags uint32) error {
	if to := innerRealms(dd, ddin); sin.Realms != to {
		return fmt.Errorf("%w: inode %d of quota realms %v into realms %v", ErrCrossDevice, srcIno, sin.Realms[:depth(sin.Realms)], to[:depth(to)])
	}
	if flags&RenameExchange != 0 && din != nil {
		if to := innerRealms(sd, sdin); din.Realms != to {
			return fmt.Errorf("%w: an exchange between quota realms %v and %v", ErrCrossDevice, din.Realms[:depth(din.Realms)], to[:depth(to)])
		}
	}
	return nil
}

// Compile-time: the quota locks lie between the groups' and the slots'.
const (
	_ = uint64(quotaLockBase - rgLockBase - layout.RGsMax)
	_ = uint64(slotLockBase - quotaLockBase - layout.InodesMax<<9)
)
