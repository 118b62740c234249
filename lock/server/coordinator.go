package server

import (
	"context"
	"errors"

	"github.com/plumeria-fs/plumeria/lock"
)

// Coordinator is what a lock server needs from the cluster's coordinator:
// the lock groups it owns, fencing of dead clerk sessions, and the record
// of recovered logs. One value serves one lock server. Methods may be
// called concurrently.
//
// What an implementation must guarantee (the lock core's contract, see
// package lock's doc, "Driving a Server"):
//
//   - Events delivers, in order, AssignGroups, FenceDone and Recovered for
//     this server, starting with an AssignGroups. Every AssignGroups has an
//     epoch no lower than the previous one this server was sent; a group
//     this server gains comes with an epoch it never saw (a restarted
//     server, i.e. a new Events subscription, gets a fresh epoch for every
//     group it owns). AssignGroups carries the map's fences (FenceDone for
//     every fenced clerk, with its registered tables) and the registry of
//     mounted sessions not yet recovered, with their tables.
//   - A group changes owner only after its former owner stopped serving
//     it: the former owner has received an AssignGroups without it, or can
//     no longer act (it is dead, or its Events channel was closed and its
//     ownership lease has run out). A server whose coordinator cannot vouch
//     for it must see its Events channel closed before its ownership lease
//     ends: Run then returns ErrCoordinatorLost and the server serves
//     nothing more.
//   - Fence returns nil once every session of clerk up to session is fenced
//     (storage refuses its writes) and recorded; FenceDone, with the tables
//     the registry holds for those sessions, then reaches every lock server
//     through Events (sent again to this server if it was already fenced).
//     Idempotent.
//   - RecordRecovered, for a fenced session, records that clerk's log up to
//     session is recovered in table and drops table from those sessions in
//     the registry (a session with no table left leaves it); Recovered then
//     reaches every lock server. Idempotent.
//   - Mounting a new session of a clerk fences its older sessions and
//     registers the new one with its tables before the session talks to
//     any lock server.
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
