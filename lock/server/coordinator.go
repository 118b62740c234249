package server

import (
	"context"
	"errors"

	"github.com/plumeria-fs/plumeria/lock"
)

// Coordinator is what a lock server needs from the cluster's coordinator:
// the lock groups it owns, fencing of dead clerk sessions, and the record
// of recovered logs. One value serves one lock server. Methods may be
// called concurrently. MemCoordinator implements it in memory; the Raft
// coordinator must give the same guarantees (the lock core's contract,
// package lock's doc, "Driving a Server"):
//
// Events delivers, in order and without loss, the AssignGroups, FenceDone
// and Recovered events for this server, starting with an AssignGroups.
//   - Epochs: every AssignGroups has an epoch no lower than the previous
//     one this server was sent, and a group the server gains comes with an
//     epoch it never saw: each subscription (a restarted server) gets, for
//     every group it owns, an epoch above any sent to any earlier
//     subscription. The map epoch of the group-owner map is a fine choice.
//   - Registry: each AssignGroups carries every fence (FenceDone per
//     clerk: its highest fenced session and the registered tables of its
//     fenced sessions) and the registry: every mounted session not yet
//     recovered in all its tables, with those tables.
//   - Moves: a group gets a new owner only after its former owner stopped
//     serving it: it has received an AssignGroups without the group (the
//     coordinator waits for that), or it can no longer act because its
//     ownership lease ran out. A server learns of a loss before anyone
//     else learns of the gain.
//   - Ownership lease: a server that the coordinator cannot vouch for
//     (partitioned from it) must see its Events channel closed before its
//     ownership lease ends, so that the lease can end safely: Run then
//     returns ErrCoordinatorLost and serves nothing more. The channel also
//     closes when ctx ends; Run waits for that.
//
// Fence(clerk, session) returns nil once every session of clerk up to
// session is fenced (the bricks refuse its writes) and the fence is in the
// replicated map; then FenceDone with the clerk's highest fence and its
// registered tables reaches every lock server. It is idempotent, and a
// repeated call makes FenceDone reach the calling server again. A fence
// may name a session the coordinator never handed out (a clerk's claim);
// later mounts of that clerk must get a higher session.
//
// RecordRecovered(clerk, session, table) is only valid for a fenced
// session. It records that the clerk's log is recovered up to session in
// table, drops table from those sessions' registry entries (an entry with
// no table left goes), and then Recovered reaches every lock server.
// Idempotent.
//
// Mounting (not part of this interface; the fs node does it): a new
// session of a clerk fences the older ones (FenceDone as above) and is
// registered with its tables before it talks to any lock server. A clean
// unmount fences the session; its registry entry stays until a recovery of
// its (clean) log is recorded, so servers that missed its CloseTable free
// its locks too.
type Coordinator interface {
	// Events subscribes this server. The channel closes when ctx ends or
	// when the coordinator stops vouching for the server.
	Events(ctx context.Context) (<-chan lock.Message, error)
	// Fence has every session of clerk up to session fenced (the action
	// lock.FenceRequest). FenceDone arrives through Events.
	Fence(ctx context.Context, clerk string, session uint64) error
	// RecordRecovered records a finished recovery (the action
	// lock.RecordRecovered). Recovered arrives through Events.
	RecordRecovered(ctx context.Context, clerk string, session uint64, table string) error
}

// ErrCoordinatorLost is returned by Run when the coordinator's event
// stream ends: the server no longer knows which groups it owns.
var ErrCoordinatorLost = errors.New("lock server: coordinator event stream ended")
