package repl

import (
	"errors"
	"fmt"
)

// Kind says why a Core refused a request. The brick maps each kind to one
// gRPC code in one place (brick/codes.go); the volume client acts on the
// code: refresh the map, retry, or give up.
type Kind int

const (
	// Stale: the request was routed with a map older than the last change
	// of its PG: refresh the map and retry.
	Stale Kind = iota + 1
	// NotPrimary: this brick does not lead the PG in its map: retry.
	NotPrimary
	// NoLease: this brick's primary lease ran out: retry.
	NoLease
	// HandOff: this brick leads the PG since an epoch not every brick has
	// installed yet (the previous primary may still serve): retry.
	HandOff
	// Unreconciled: a new primary could not yet make its in-sync members
	// agree: retry.
	Unreconciled
	// Faulty: a member missed a change and awaits a resync: retry.
	Faulty
	// Fenced: the writer's session is fenced: never retry.
	Fenced
	// BadRequest: malformed: never retry.
	BadRequest
	// NoVolume: no such volume (or snapshot).
	NoVolume
	// NotMember: replication traffic from a brick that is not the PG's
	// primary, or to one that is not a member.
	NotMember
	// SeqExhausted: the seq counter of the map epoch is used up: retry
	// once the epoch changes.
	SeqExhausted
)

var kindNames = map[Kind]string{Stale: "stale", NotPrimary: "not primary", NoLease: "no lease",
	HandOff: "hand-off", Unreconciled: "unreconciled", Faulty: "faulty", Fenced: "fenced",
	BadRequest: "bad request", NoVolume: "no volume", NotMember: "not member", SeqExhausted: "seq exhausted"}

func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Refusal is a Core's typed refusal of a request.
type Refusal struct {
	Kind Kind
	Msg  string
}

func (r *Refusal) Error() string { return r.Msg }

func refuse(k Kind, format string, args ...any) error {
	return &Refusal{Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// KindOf returns the kind of a Refusal in err's chain, or 0.
func KindOf(err error) Kind {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Kind
	}
	return 0
}
