package layout

import (
	"encoding/binary"
	"fmt"
)

// Directory quotas (format version 3). A directory with FlagQuota set is
// the root of a quota realm: every inode below it carries the root's
// number as its realm (the inode header's realm field, inode.go), and the
// realm's usage lives in QuotaSlots+1 metadata blocks at QuotaAddr(r, k):
//
//	k = 0          the realm's head: its limits and which log slots
//	               have a ledger (covered by lock QuotaLockID(r, 0))
//	k = 1 + slot   log slot slot's ledger for the realm: what the node in
//	               that slot charged (bytes, inodes) and the allowance it
//	               may charge up to (covered by lock QuotaLockID(r, k))
//
// The realm's usage is the sum of its ledgers' used fields. A node charges
// only its own slot's ledger, in the same logged transaction as the size
// or inode change that causes it, so replaying a dead node's log makes the
// ledgers exact again. Ledgers are logged and versioned like all metadata.
//
// Head payload, little-endian:
//
//	 0                 8                  16               48          52                  60                   68
//	| limitBytes u64 | limitInodes u64 | slots 256 bits | flags u32 | grantedBytes i64 | grantedInodes i64 | zero... |
//
// flags: QuotaCounting (bit 0), the walk that counts what was below the
// directory when it got its quota is not finished (interrupted: setting
// the quota again resumes it). granted is the sum of the allowances of
// the listed ledgers, kept with them (meaningless in a dimension without
// a limit, recomputed when a limit is set). A slot with a written ledger
// is always listed.
//
// Ledger payload, little-endian (signed: a node may free what another
// charged, so one ledger's used may go below zero; their sum never does):
//
//	 0               8                16               24
//	| usedBytes i64 | usedInodes i64 | allowBytes i64 | allowInodes i64 |
//
// A limit of 0 is no limit. Header kind KindQuota, owner the realm root's
// inode number, index k. A never-written block is a zero head or ledger.
// Part of format version 3: never edit; add a version instead.
const (
	QuotaBase  = 1 << 45
	QuotaShift = 21 // 2 MiB of address space per realm root
	QuotaSlots = SlotsMax

	quotaHeadBytes   = 68
	quotaLedgerBytes = 32

	QuotaCounting = 1 << 0 // head flag: the first count is under way
)

// The quota blocks end before the name logs and after the inodes.
const (
	_ = uint64(NameLogBase - QuotaBase - InodesMax<<QuotaShift)
	_ = uint64(QuotaBase - InodeBase - InodesMax*BlockBytes)
	_ = uint64(1<<QuotaShift - (QuotaSlots+1)*BlockBytes)
)

// QuotaAddr is the address of block k of realm r's quota blocks.
func QuotaAddr(r uint64, k int) uint64 { return QuotaBase + r<<QuotaShift + uint64(k)*BlockBytes }

// QuotaHead is a realm's head block.
type QuotaHead struct {
	LimitBytes, LimitInodes uint64 // 0: no limit
	Slots                   [QuotaSlots / 8]byte
	Flags                   uint32 // QuotaCounting
	GrantedBytes            int64  // the sum of the ledgers' AllowBytes
	GrantedInodes           int64  // the sum of the ledgers' AllowInodes
}

// HasSlot reports whether slot s has a ledger in the realm.
func (h *QuotaHead) HasSlot(s int) bool { return h.Slots[s/8]&(1<<(s%8)) != 0 }

// AddSlot records that slot s has a ledger.
func (h *QuotaHead) AddSlot(s int) { h.Slots[s/8] |= 1 << (s % 8) }

// SlotList lists the slots with a ledger, ascending.
func (h *QuotaHead) SlotList() []int {
	var out []int
	for s := 0; s < QuotaSlots; s++ {
		if h.HasSlot(s) {
			out = append(out, s)
		}
	}
	return out
}

// QuotaLedger is one log slot's ledger of a realm.
type QuotaLedger struct {
	UsedBytes, UsedInodes   int64
	AllowBytes, AllowInodes int64
}

// EncodeQuotaHead writes h as realm r's head into b (len BlockBytes).
func EncodeQuotaHead(b []byte, r, version uint64, h *QuotaHead) {
	clear(b)
	PutHeader(b, Header{Kind: KindQuota, Version: version, Owner: r, Index: 0})
	p := b[HeaderBytes:]
	binary.LittleEndian.PutUint64(p[0:], h.LimitBytes)
	binary.LittleEndian.PutUint64(p[8:], h.LimitInodes)
	copy(p[16:48], h.Slots[:])
	binary.LittleEndian.PutUint32(p[48:], h.Flags)
	binary.LittleEndian.PutUint64(p[52:], uint64(h.GrantedBytes))
	binary.LittleEndian.PutUint64(p[60:], uint64(h.GrantedInodes))
}

// DecodeQuotaHead reads realm r's head block.
func DecodeQuotaHead(b []byte, r uint64) (*QuotaHead, error) {
	if err := checkQuotaBlock(b, r, 0); err != nil {
		return nil, err
	}
	h := &QuotaHead{}
	p := b[HeaderBytes:]
	h.LimitBytes = binary.LittleEndian.Uint64(p[0:])
	h.LimitInodes = binary.LittleEndian.Uint64(p[8:])
	copy(h.Slots[:], p[16:48])
	h.Flags = binary.LittleEndian.Uint32(p[48:])
	h.GrantedBytes = int64(binary.LittleEndian.Uint64(p[52:]))
	h.GrantedInodes = int64(binary.LittleEndian.Uint64(p[60:]))
	return h, nil
}

// EncodeQuotaLedger writes l as block k (1+slot) of realm r into b.
func EncodeQuotaLedger(b []byte, r uint64, k int, version uint64, l *QuotaLedger) {
	clear(b)
	PutHeader(b, Header{Kind: KindQuota, Version: version, Owner: r, Index: uint64(k)})
	p := b[HeaderBytes:]
	binary.LittleEndian.PutUint64(p[0:], uint64(l.UsedBytes))
	binary.LittleEndian.PutUint64(p[8:], uint64(l.UsedInodes))
	binary.LittleEndian.PutUint64(p[16:], uint64(l.AllowBytes))
	binary.LittleEndian.PutUint64(p[24:], uint64(l.AllowInodes))
}

// DecodeQuotaLedger reads block k (1+slot) of realm r.
func DecodeQuotaLedger(b []byte, r uint64, k int) (*QuotaLedger, error) {
	if err := checkQuotaBlock(b, r, k); err != nil {
		return nil, err
	}
	p := b[HeaderBytes:]
	return &QuotaLedger{
		UsedBytes:   int64(binary.LittleEndian.Uint64(p[0:])),
		UsedInodes:  int64(binary.LittleEndian.Uint64(p[8:])),
		AllowBytes:  int64(binary.LittleEndian.Uint64(p[16:])),
		AllowInodes: int64(binary.LittleEndian.Uint64(p[24:])),
	}, nil
}

func checkQuotaBlock(b []byte, r uint64, k int) error {
	h, err := DecodeHeader(b)
	switch {
	case err != nil:
		return err
	case h.Kind == KindNone:
		return nil
	case h.Kind != KindQuota || h.Owner != r || h.Index != uint64(k):
		return fmt.Errorf("%w: a %v block of %d/%d where quota block %d of realm %d belongs", ErrCorrupt, h.Kind, h.Owner, h.Index, k, r)
	}
	return nil
}
