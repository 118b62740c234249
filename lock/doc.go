// Package lock is the lock service's state machine (Frangipani §6): tables
// of sticky reader/writer locks, the clerk sessions holding them, their
// leases, the recovery of dead clerks' logs, and the rebuilding of lock
// groups that move between lock servers. It does no I/O, reads no clock,
// draws no random numbers and starts no goroutines: inputs arrive through
// Step and Tick, outputs leave through Ready and Advance (as in etcd-raft).
// The gRPC loops, the coordinator integration and the fs node live
// elsewhere.
//
// Guarantee: on every lock, at any instant, among all clerks that believe
// they hold it (Clerk.Holds, which accounts for the clerk's own view of its
// lease), there is at most one writer, and never a writer with readers.
// A dead clerk's locks are given to nobody until its log has been recovered,
// and at most one clerk recovers a given log at a time (the recoverer holds
// the dead clerk's log lock, LogLock, exclusively). Conditions: the I/O
// layer keeps the contract below, ticks run at the same rate everywhere
// within ClerkConfig.LeaseMarginTicks per lease, and the coordinator is
// linearizable.
//
// # Concepts
//
//   - A table is named by a string (one per file system); a lock by a
//     uint64. Modes are Read (shared) and Write (exclusive).
//   - A clerk session is (Clerk, Session): the fs node's writer id and the
//     fence epoch it mounted with. A remount is a new session.
//   - Locks fall into lock groups (GroupOf); the coordinator assigns each
//     group to one lock server, with an epoch. Servers track every session
//     they hear from, renewals are broadcast, lock messages go to the owner
//     of the lock's group (Route).
//   - Locks are sticky: a clerk keeps a grant until a conflicting request
//     makes the server Revoke it (to Read if only readers wait, else to
//     None), or until it has been idle for ClerkConfig.IdleTicks. The clerk
//     lets its owner flush (Flush event, Clerk.Flushed) before it sends
//     Release or Downgrade.
//   - Requests are served in arrival order: a request never overtakes an
//     earlier one, so a stream of readers cannot starve a writer. An upgrade
//     (Read to Write) queues like any request, so two upgrading readers do not
//     deadlock: the first in line gets the other revoked to None.
//   - Every grant is named by the clerk's ReqID, so duplicated, delayed and
//     reordered messages are harmless: a Release or Downgrade naming an older
//     grant is ignored, a grant nobody waits for is given back.
//
// # Leases
//
// A clerk renews every LeaseTicks/3 and believes in its locks in group g
// until LeaseTicks-LeaseMarginTicks after it SENT the last renewal the owner
// of g acknowledged. A server declares a session expired LeaseTicks after it
// RECEIVED its last renewal (or acquired a group, since the group's former
// owner may have acknowledged renewals until then). Sending precedes
// receiving, so a clerk always stops believing before any server gives its
// locks away. A clerk whose belief runs out while it holds something, or
// which is told Expired, is finished (LeaseLost): its owner must refuse
// operations until it remounts with a new session.
//
// # Recovery of a dead clerk
//
// Expired here and fenced by the coordinator (FenceRequest, FenceDone), the
// session is dead once its lease horizon has passed: its queued requests go,
// its holds freeze. The owner of the group of its log lock picks a live clerk
// with the table open, grants it the log lock and sends Recover; the clerk
// replays the log and answers RecoveryDone; the server asks the coordinator
// to record it (RecordRecovered); every server, on Recovered, frees the dead
// session's locks. A recoverer that dies is replaced; with no live clerk the
// recovery waits for one. See server_recovery.go.
//
// # Lock server failover
//
// A server that loses a group drops its locks. A server that gains one
// rebuilds it: it asks every session with the table open (QueryHeld) and
// grants nothing in the group until all have answered (Held) and every dead
// one's log is recovered. Clerks accept a group's new epoch only from
// QueryHeld (or when they hold nothing there) and then ignore older epochs,
// so a grant in flight from the former owner cannot resurface. See
// server_rebuild.go.
//
// # Driving a Server (the lock server's I/O loop)
//
//	srv, err := lock.NewServer(cfg)
//	loop: on a clerk message or a coordinator event: srv.Step(m)
//	      every tick interval: srv.Tick()
//	      then: rd := srv.Ready(); send rd.Messages to their clerk sessions
//	            (ClerkOf); carry out rd.Actions; srv.Advance(rd)
//
// Contract with the I/O layer and the coordinator:
//   - Step AssignGroups before anything else, and again on every change of
//     the groups this server owns. Epochs grow; a restarted server gets an
//     epoch it never saw. A server that loses a group must have stopped
//     serving it (its ownership lease ended) before another gains it.
//   - AssignGroups carries the map's fences and its registry of mounted,
//     not yet recovered sessions with their tables. Without the registry a
//     new owner cannot know about clerks that died unheard, so
//     Config.RebuildGraceTicks must then be at least LeaseTicks, and a dead
//     clerk's locks in a moved group may be freed before its recovery.
//   - FenceRequest: have the coordinator fence the session (idempotent),
//     then step FenceDone, with the session's registered tables, into every
//     lock server. Mounting a new session fences the older ones.
//   - RecordRecovered: have the coordinator record it and drop the session's
//     table from the registry, then step Recovered into every lock server.
//   - Delivery of messages may lose, duplicate and reorder them; the
//     protocol resends what matters.
//
// # Driving a Clerk (the fs node's lock clerk)
//
//	c, err := lock.NewClerk(cfg); c.Open(table)
//	loop: on a server message: c.Step(m); every tick: c.Tick()
//	      then: rd := c.Ready(); send each of rd.Messages where Route says;
//	            hand rd.Events to the owner; c.Advance(rd)
//	owner: Acquire to ask, Holds before each use, Flushed after a Flush,
//	       Release or Downgrade (Write to Read) to give back voluntarily,
//	       RecoveryDone after a RunRecovery, remount after LeaseLost.
//
// Tick must be called once per elapsed tick interval of monotonic time; after
// a pause (GC, suspended VM) call it as many times as intervals elapsed:
// the clerk's lease is measured in ticks.
//
// # Known limits
//
// Lock state is per server and in memory; a Held answer lists all of a
// clerk's locks in the queried groups in one message. Clerk ids hash to log
// locks, so two ids may share one (their logs are then serialised, never
// unprotected). See the Limits constants for every bound.
package lock
