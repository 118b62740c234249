package lock

import "errors"

// Mode is the access a clerk has to a lock. Modes are ordered:
// None < Read < Write, and a revoke asks a holder to go down to a mode.
type Mode uint8

const (
	None  Mode = iota // not held
	Read              // shared: many clerks at once
	Write             // exclusive: one clerk, no readers
)

func (m Mode) String() string {
	switch m {
	case None:
		return "none"
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return "mode(?)"
}

// valid reports whether m may be requested or held.
func (m Mode) valid() bool { return m == Read || m == Write }

// compatible reports whether two different clerks may hold a and b at once.
func compatible(a, b Mode) bool { return a != Write && b != Write }

// Limits. Every set a server or clerk keeps is bounded by one of these;
// input that would exceed a bound gets a Reject (server) or ErrLimit
// (clerk), never growth.
const (
	GroupsMax         = 1024 // lock groups in a cluster
	ClerksMax         = 4096 // clerk sessions one server tracks
	TablesMax         = 1024 // tables one server tracks
	TablesPerClerkMax = 16   // tables one clerk session has open
	NameBytesMax      = 128  // clerk id and table name length
	// LocksPerClerkMax bounds the held plus requested locks of one clerk
	// session at one server, and at the clerk in all its tables.
	LocksPerClerkMax = 1 << 20
	// PendingRequestsMax bounds the outstanding requests of one clerk
	// session at one server, and at the clerk in all its tables.
	PendingRequestsMax = 4096
	// LockWaitersMax bounds the queue of one lock. A session waits at most
	// once per lock, so with ClerksMax sessions it is a backstop.
	LockWaitersMax    = 4096
	recentRecoveriesN = 64 // finished recoveries a clerk remembers, to re-ack
	renewRingN        = 8  // renewals in flight a clerk remembers
)

// Errors returned by Step and by Clerk methods.
var (
	ErrUnknownMessage = errors.New("lock: unknown message type")
	ErrBadGroup       = errors.New("lock: lock group out of range")
	ErrConflictClaim  = errors.New("lock: held claim conflicts with another holder")
	ErrConfig         = errors.New("lock: invalid config")
	ErrLeaseLost      = errors.New("lock: clerk lease lost")
	ErrNotOpen        = errors.New("lock: table not open")
	ErrBadMode        = errors.New("lock: mode must be read or write")
	ErrReservedLock   = errors.New("lock: lock id is reserved for logs")
	ErrLimit          = errors.New("lock: limit exceeded")
)

// Reason says why a server rejected a request.
type Reason uint8

const (
	ReasonNone          Reason = iota
	ReasonBadMode              // mode not Read or Write
	ReasonReservedLock         // a log lock other than the clerk's own
	ReasonLocksPerClerk        // LocksPerClerkMax
	ReasonPendingMax           // PendingRequestsMax
	ReasonWaitersMax           // LockWaitersMax
	ReasonTablesMax            // TablesMax or TablesPerClerkMax
	ReasonClerksMax            // ClerksMax
	ReasonBadName              // empty, or longer than NameBytesMax
)

var reasonNames = [...]string{"none", "bad mode", "reserved lock", "too many locks for clerk",
	"too many pending requests", "too many waiters on lock", "too many tables", "too many clerks",
	"bad name"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "reason(?)"
}

// logLockBit marks the reserved range of lock ids: the top half.
const logLockBit = 1 << 63

// LogLock is the lock that guards clerk's log in every table. Its id lies in
// the reserved range (top bit set), which ordinary requests may not use; a
// clerk may request only its own log lock. The fs node holds LogLock(self)
// in Write mode while it writes its log; the server grants a dead clerk's log
// lock to the clerk that recovers it. Two clerk ids could hash to one log
// lock: that only serialises their logs, it never breaks exclusion.
// Part of the protocol: never change.
func LogLock(clerk string) uint64 {
	return logLockBit | mix(fnv(clerk, 0))&(logLockBit-1)
}

// IsLogLock reports whether lock lies in the reserved log-lock range.
func IsLogLock(lock uint64) bool { return lock&logLockBit != 0 }

// GroupOf is the lock group of lock in table, in [0, groups). Lock groups
// are the unit the coordinator assigns to lock servers. Every node must
// compute the same value: part of the protocol, never change.
func GroupOf(table string, lock uint64, groups int) int {
	if groups <= 0 {
		fail("GroupOf: %d groups", groups)
	}
	return int(mix(fnv(table, lock)) % uint64(groups))
}

// fnv is FNV-1a over s and then the 8 little-endian bytes of x.
func fnv(s string, x uint64) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * prime
	}
	for i := 0; i < 8; i++ {
		h = (h ^ (x >> (8 * i) & 0xff)) * prime
	}
	return h
}

// mix is the splitmix64 finaliser: spreads consecutive inputs.
func mix(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}
