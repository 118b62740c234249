package brick

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/brick/repl"
)

// Status codes a brick answers with; the volume client acts on the code:
//
//	FailedPrecondition  stale map epoch, or replication from a brick that
//	                    is not the PG's primary: refresh the map and retry
//	Unavailable         not primary, no lease, hand-off not settled, a
//	                    replica failed or awaits a resync: retry
//	PermissionDenied    the writer is fenced: never retry
//	InvalidArgument     malformed request: never retry
//	NotFound            unknown volume or snapshot
//	DataLoss            a block is corrupt here and on every replica, or
//	                    a ref names a stripe the map lacks
//	ResourceExhausted   a store is full
//	Unimplemented       a request this build does not serve
//
// The decisions come from the replication core (brick/repl) as typed
// refusals; codeOf is the one place that maps them to codes.
var codeOf = map[repl.Kind]codes.Code{
	repl.Stale:        codes.FailedPrecondition,
	repl.NotMember:    codes.FailedPrecondition,
	repl.NotPrimary:   codes.Unavailable,
	repl.NoLease:      codes.Unavailable,
	repl.HandOff:      codes.Unavailable,
	repl.Unreconciled: codes.Unavailable,
	repl.Faulty:       codes.Unavailable,
	repl.SeqExhausted: codes.Unavailable,
	repl.Fenced:       codes.PermissionDenied,
	repl.BadRequest:   codes.InvalidArgument,
	repl.NoVolume:     codes.NotFound,
}

// grpcErr turns a core refusal into a gRPC status; other errors pass
// through.
func grpcErr(err error) error {
	var r *repl.Refusal
	if err == nil || !errors.As(err, &r) {
		return err
	}
	code, ok := codeOf[r.Kind]
	if !ok {
		code = codes.Internal
	}
	return status.Error(code, r.Msg)
}
