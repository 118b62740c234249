package lock

// Message is one protocol message: a plain struct, carried by the I/O
// layer in any encoding. Every message between a clerk and a server names
// the clerk session (Clerk, Session): as sender when it goes to a server,
// as recipient when it comes from one.
type Message interface {
	clerkOf() (id string, session uint64)
}

// ClerkOf returns the clerk session a message is from or to; "" for the
// messages the I/O layer itself steps into a Server (AssignGroups,
// FenceDone, Recovered).
func ClerkOf(m Message) (id string, session uint64) { return m.clerkOf() }

// Messages from a clerk to the lock servers. Route says where each goes.

// OpenTable registers the clerk session as a user of Table and starts its
// lease at this server. Broadcast.
type OpenTable struct {
	Clerk   string
	Session uint64
	Table   string
}

// CloseTable releases everything the session holds or waits for in Table.
// RenewSeq is the clerk's latest renewal sequence: older renewals (which
// list Table) must not reopen it. Broadcast.
type CloseTable struct {
	Clerk    string
	Session  uint64
	Table    string
	RenewSeq uint64
}

// Renew extends the session's lease and lists its open tables (so a server
// that never saw OpenTable learns them). Broadcast every LeaseTicks/3.
type Renew struct {
	Clerk   string
	Session uint64
	Seq     uint64
	Tables  []string
}

// Request asks for Lock in Mode. ReqID is unique and increasing per clerk
// session; it names the grant that answers it.
type Request struct {
	Clerk   string
	Session uint64
	Table   string
	Lock    uint64
	Mode    Mode
	ReqID   uint64
}

// Release gives up the grant ReqID. A Release naming an older grant is
// ignored, so a stale Release never frees a newer grant.
type Release struct {
	Clerk   string
	Session uint64
	Table   string
	Lock    uint64
	ReqID   uint64
}

// Downgrade turns the Write grant ReqID into Read.
type Downgrade struct {
	Clerk   string
	Session uint64
	Table   string
	Lock    uint64
	ReqID   uint64
}

// HeldLock is one lock in a Held report.
type HeldLock struct {
	Lock  uint64
	Mode  Mode
	ReqID uint64
}

// DeadSession names a clerk session whose log is being recovered.
type DeadSession struct {
	Clerk   string
	Session uint64
}

// Held answers QueryHeld: what the clerk holds, waits for and recovers in
// Table within Groups, as of group epoch Epoch. Groups lists only the
// queried groups whose epoch the clerk accepted.
type Held struct {
	Clerk      string
	Session    uint64
	Table      string
	Epoch      uint64
	Groups     []int
	Locks      []HeldLock
	Pending    []HeldLock
	Recovering []DeadSession
}

// RecoveryDone says the clerk finished recovering the log of Dead, up to
// and including session DeadSession, in Table.
type RecoveryDone struct {
	Clerk       string
	Session     uint64
	Table       string
	Dead        string
	DeadSession uint64
}

// Messages from a server to a clerk session.

// GroupEpoch is a group a server owns and the epoch it acquired it at.
type GroupEpoch struct {
	Group int
	Epoch uint64
}

// RenewAck acknowledges renewal Seq for the groups the server owns.
type RenewAck struct {
	Clerk   string
	Session uint64
	Seq     uint64
	Groups  []GroupEpoch
}

// Grant gives the clerk Lock in Mode for request ReqID. Epoch is the
// epoch at which the server acquired the lock's group.
type Grant struct {
	Clerk   string
	Session uint64
	Table   string
	Lock    uint64
	Mode    Mode
	ReqID   uint64
	Epoch   uint64
}

// Revoke asks the holder of grant ReqID to flush and go down to To
// (Read: Downgrade; None: Release).
type Revoke struct {
	Clerk   string
	Session uint64
	Table   string
	Lock    uint64
	ReqID   uint64
	To      Mode
	Epoch   uint64
}

// QueryHeld asks what the clerk holds in Table within Groups, which the
// server acquired at Epoch and is rebuilding.
type QueryHeld struct {
	Clerk   string
	Session uint64
	Table   string
	Epoch   uint64
	Groups  []int
}

// Recover asks the clerk to replay the log of Dead in Table, covering every
// session up to DeadSession. It implicitly grants the clerk LogLock(Dead)
// in Write mode until the recovery is recorded. Epoch is that of the log
// lock's group.
type Recover struct {
	Clerk       string
	Session     uint64
	Table       string
	Dead        string
	DeadSession uint64
	Epoch       uint64
}

// Reject refuses a request (ReqID) or a table (ReqID 0) because of Reason.
type Reject struct {
	Clerk   string
	Session uint64
	Table   string
	Lock    uint64
	ReqID   uint64
	Reason  Reason
}

// Expired tells a session the lock service declared it dead. Its owner
// must refuse operations until remounted with a new session.
type Expired struct {
	Clerk   string
	Session uint64
}

// Messages the I/O layer steps into a Server, from the coordinator's map.

// AssignGroups says which groups the server owns at map epoch Epoch. It
// also carries the map's fences and its registry of mounted clerk sessions
// with their tables: a new owner needs both to rebuild safely. A server
// ignores clerk messages until its first AssignGroups. Epochs must grow;
// a restarted server must be given an epoch it never saw before.
type AssignGroups struct {
	Epoch    uint64
	Groups   []int
	Fences   []FenceDone
	Sessions []Registered
}

// Registered is one mounted clerk session in the coordinator's registry.
type Registered struct {
	Clerk   string
	Session uint64
	Tables  []string
}

// FenceDone says every session of Clerk up to Session is fenced: storage
// refuses its writes. Step it into every lock server, not only the one
// that asked. Tables lists the tables the coordinator's registry holds for
// those sessions (not yet recovered), so that every server, including the
// owner of the clerk's log lock, learns which logs need recovery.
type FenceDone struct {
	Clerk   string
	Session uint64
	Tables  []string
}

// Recovered says the log of Clerk up to Session has been recovered in
// Table and the coordinator recorded it (and dropped those sessions'
// Table from its registry). Step it into every lock server.
type Recovered struct {
	Clerk   string
	Session uint64
	Table   string
}

func (m OpenTable) clerkOf() (string, uint64)    { return m.Clerk, m.Session }
func (m CloseTable) clerkOf() (string, uint64)   { return m.Clerk, m.Session }
func (m Renew) clerkOf() (string, uint64)        { return m.Clerk, m.Session }
func (m Request) clerkOf() (string, uint64)      { return m.Clerk, m.Session }
func (m Release) clerkOf() (string, uint64)      { return m.Clerk, m.Session }
func (m Downgrade) clerkOf() (string, uint64)    { return m.Clerk, m.Session }
func (m Held) clerkOf() (string, uint64)         { return m.Clerk, m.Session }
func (m RecoveryDone) clerkOf() (string, uint64) { return m.Clerk, m.Session }
func (m RenewAck) clerkOf() (string, uint64)     { return m.Clerk, m.Session }
func (m Grant) clerkOf() (string, uint64)        { return m.Clerk, m.Session }
func (m Revoke) clerkOf() (string, uint64)       { return m.Clerk, m.Session }
func (m QueryHeld) clerkOf() (string, uint64)    { return m.Clerk, m.Session }
func (m Recover) clerkOf() (string, uint64)      { return m.Clerk, m.Session }
func (m Reject) clerkOf() (string, uint64)       { return m.Clerk, m.Session }
func (m Expired) clerkOf() (string, uint64)      { return m.Clerk, m.Session }
func (m AssignGroups) clerkOf() (string, uint64) { return "", 0 }
func (m FenceDone) clerkOf() (string, uint64)    { return "", 0 }
func (m Recovered) clerkOf() (string, uint64)    { return "", 0 }

// Route tells a clerk's I/O layer where a message from the clerk goes: to
// the server owning group, or to every lock server when all is true.
// Held goes to the owner of its groups, RecoveryDone to the owner of the
// dead clerk's log lock.
func Route(m Message, groups int) (group int, all bool) {
	switch m := m.(type) {
	case Request:
		return GroupOf(m.Table, m.Lock, groups), false
	case Release:
		return GroupOf(m.Table, m.Lock, groups), false
	case Downgrade:
		return GroupOf(m.Table, m.Lock, groups), false
	case RecoveryDone:
		return GroupOf(m.Table, LogLock(m.Dead), groups), false
	case Held:
		if len(m.Groups) > 0 {
			return m.Groups[0], false
		}
	}
	return 0, true
}

// Action is work a Server hands to its I/O layer besides messages.
type Action interface{ isAction() }

// FenceRequest asks the coordinator to fence every session of Clerk up to
// Session. When the fence is in force, step FenceDone into every server.
// Retry until done; requests are idempotent.
type FenceRequest struct {
	Clerk   string
	Session uint64
}

// RecordRecovered asks the coordinator to record that the log of Clerk up to
// Session is recovered in Table (and drop that session from its registry).
// Once recorded, step Recovered into every server. Repeated until then.
type RecordRecovered struct {
	Clerk   string
	Session uint64
	Table   string
}

func (FenceRequest) isAction()    {}
func (RecordRecovered) isAction() {}

// Event is what a Clerk hands its owner (the fs node) besides messages.
type Event interface{ isEvent() }

// Granted: the clerk now holds Lock in Mode (use Holds before each use:
// the grant is usable only while the lease is valid).
type Granted struct {
	Table string
	Lock  uint64
	Mode  Mode
}

// Flush: write back (To Read) or write back and drop (To None) what the
// cache holds under Lock, then call Clerk.Flushed. Sent for revokes and for
// idle locks the clerk gives up voluntarily.
type Flush struct {
	Table string
	Lock  uint64
	To    Mode
}

// RunRecovery: replay the log of Dead (sessions up to Session) in Table,
// then call Clerk.RecoveryDone. Abandon it if the lease is lost.
type RunRecovery struct {
	Dead    string
	Session uint64
	Table   string
}

// LeaseLost: the clerk holds nothing any more. If the cache held dirty data,
// the owner must refuse operations until it remounts with a new session.
type LeaseLost struct {
	Reason string
}

// Rejected: the server refused a request (Lock, ReqID) or a table (ReqID 0).
type Rejected struct {
	Table  string
	Lock   uint64
	Reason Reason
}

func (Granted) isEvent()     {}
func (Flush) isEvent()       {}
func (RunRecovery) isEvent() {}
func (LeaseLost) isEvent()   {}
func (Rejected) isEvent()    {}
