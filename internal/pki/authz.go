package pki

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Public marks a method that a caller without a certificate may call
// (the join-token bootstrap: a newcomer has no certificate yet).
const Public = "public"

// Sets of roles used in the table.
var (
	anyMember = []string{RoleCoordinator, RoleBrick, RoleLock, RoleClient, RoleAdmin}
	// The coordinator role is in every set that a coordinator forwards:
	// a follower forwards each Coordinator RPC to the leader under its own
	// certificate, after checking its caller itself.
	coordOnly   = []string{RoleCoordinator}
	adminOps    = []string{RoleAdmin, RoleCoordinator}
	brickOps    = []string{RoleBrick, RoleCoordinator}
	lockOps     = []string{RoleLock, RoleCoordinator}
	memberBeats = []string{RoleBrick, RoleLock, RoleCoordinator}
	clerkOps    = []string{RoleClient, RoleAdmin, RoleCoordinator}
	fenceOps    = []string{RoleClient, RoleAdmin, RoleLock, RoleCoordinator}
	dataPath    = []string{RoleClient, RoleAdmin, RoleCoordinator}
	brickPeers  = []string{RoleBrick}
	// Read-only views of what a brick holds: bricks, and the operator's
	// `vdisk verify` (inventories, compared across replicas; the chaos
	// harness's replica check) and shard inspection.
	brickViews = []string{RoleBrick, RoleAdmin}
)

// methodRoles maps each full gRPC method name to the roles allowed to
// call it. A method not listed is refused to everyone: a new RPC must be
// added here (TestTableCoversServices checks every registered service).
var methodRoles = map[string][]string{
	// The cluster map and status: every member and the CLI (mounts read
	// the map; the dashboard, doctor and `plumeria status` the status).
	"/plumeria.v1.Coordinator/GetMap": anyMember,
	"/plumeria.v1.Coordinator/Status": anyMember,

	// The Raft group's membership: a coordinator joins; the operator
	// (`plumeria coord remove`) removes one.
	"/plumeria.v1.Coordinator/Join":              coordOnly,
	"/plumeria.v1.Coordinator/RemoveCoordinator": adminOps,

	// Reports only a brick makes: its registration, the PG primary's
	// backfill and replica reports, a stripe group leader's rebuild.
	"/plumeria.v1.Coordinator/RegisterBrick": brickOps,
	"/plumeria.v1.Coordinator/PGSynced":      brickOps,
	"/plumeria.v1.Coordinator/SGSynced":      brickOps,
	"/plumeria.v1.Coordinator/ReplicaFailed": brickOps,
	// Liveness of servers (kind BRICK, LOCK_SERVER, COORDINATOR); fs
	// nodes are kept alive by their lock sessions, not heartbeats.
	"/plumeria.v1.Coordinator/Heartbeat": memberBeats,

	// A lock server registers and records a dead clerk's recovery.
	"/plumeria.v1.Coordinator/RegisterLockServer": lockOps,
	"/plumeria.v1.Coordinator/RecordRecovered":    lockOps,

	// Lock sessions of clerks: fs nodes; the CLI (a snapshot takes the
	// barrier lock, `plumeria lock workload`); a coordinator's scheduled
	// snapshots.
	"/plumeria.v1.Coordinator/OpenSession":  clerkOps,
	"/plumeria.v1.Coordinator/CloseSession": clerkOps,
	// Fence: an fs node fences its older session; a lock server a dead
	// clerk; the CLI's vdisk fence.
	"/plumeria.v1.Coordinator/Fence": fenceOps,
	// Placement of a redundancy profile: `plumeria policy set` through a
	// mount (fs node) or the CLI, and `plumeria relayout`.
	"/plumeria.v1.Coordinator/EnsureProfile": clerkOps,

	// Administration: volumes, snapshots, bricks. The operator only (and
	// the coordinator's own snapshot schedules).
	"/plumeria.v1.Coordinator/CreateVolume":        adminOps,
	"/plumeria.v1.Coordinator/Snapshot":            adminOps,
	"/plumeria.v1.Coordinator/DeleteSnapshot":      adminOps,
	"/plumeria.v1.Coordinator/SetSnapshotSchedule": adminOps,
	"/plumeria.v1.Coordinator/DrainBrick":          adminOps,
	"/plumeria.v1.Coordinator/RemoveBrick":         adminOps,

	// Certificates (coord/security.go): tokens and revocations are the
	// operator's; a newcomer has no certificate, it proves a token's
	// secret instead; any member renews its own certificate.
	"/plumeria.v1.Coordinator/CreateJoinToken":  adminOps,
	"/plumeria.v1.Coordinator/RevokeNode":       adminOps,
	"/plumeria.v1.Coordinator/IssueCertificate": {Public},
	"/plumeria.v1.Coordinator/RenewCertificate": anyMember,

	// The data path, client → PG primary: fs nodes, and the CLI's vdisk,
	// bench, fsck and relayout commands, which use volumes directly.
	"/plumeria.v1.Brick/Write":         dataPath,
	"/plumeria.v1.Brick/WriteV":        dataPath,
	"/plumeria.v1.Brick/Read":          dataPath,
	"/plumeria.v1.Brick/Decommit":      dataPath,
	"/plumeria.v1.Brick/BlockVersions": dataPath,
	"/plumeria.v1.Brick/PruneVersions": dataPath,
	"/plumeria.v1.Brick/Relayout":      dataPath,
	"/plumeria.v1.Brick/Layout":        dataPath,

	// Brick to brick: replication, backfill, read repair, erasure-coded
	// shards and their garbage collection. Bricks only, except the
	// read-only views (brickViews).
	"/plumeria.v1.Brick/Replicate":      brickPeers,
	"/plumeria.v1.Brick/Inventory":      brickViews,
	"/plumeria.v1.Brick/Backfill":       brickPeers,
	"/plumeria.v1.Brick/FetchBlock":     brickViews,
	"/plumeria.v1.Brick/ShardPut":       brickPeers,
	"/plumeria.v1.Brick/ShardRead":      brickViews,
	"/plumeria.v1.Brick/ShardDelete":    brickPeers,
	"/plumeria.v1.Brick/ShardInventory": brickViews,
	"/plumeria.v1.Brick/StripeRefs":     brickPeers,

	// The lock service: a clerk's session (fs nodes, the CLI's snapshot
	// and lock workload, a coordinator's scheduled snapshots).
	"/plumeria.lock.v1.Lock/Session": clerkOps,
}

// MethodRoles returns the roles allowed to call a full method name
// ("/pkg.Service/Method"), and false for a method not in the table.
func MethodRoles(fullMethod string) ([]string, bool) {
	r, ok := methodRoles[fullMethod]
	return slices.Clone(r), ok
}

// AllowMethod adds or replaces a method's entry (roles may include
// Public). For services added outside this package; call it before
// serving.
func AllowMethod(fullMethod string, roles ...string) { methodRoles[fullMethod] = slices.Clone(roles) }

var revoked atomic.Pointer[func(name string) bool]

// SetRevoked installs the revocation check consulted on every RPC: a
// caller whose certificate names a member for which fn returns true is
// refused (Unauthenticated). nil removes the check.
func SetRevoked(fn func(name string) bool) {
	if fn == nil {
		revoked.Store(nil)
		return
	}
	revoked.Store(&fn)
}

// Peer returns the name and roles of the gRPC caller of ctx, from the
// TLS state of its connection, and ok=false when the caller presented no
// certificate verified against the cluster CA (or the connection is not
// TLS).
func Peer(ctx context.Context) (name string, roles []string, ok bool) {
	name, roles, ok = peerUnsorted(ctx)
	return name, SortRoles(roles), ok
}

// peerUnsorted is Peer with the roles in the certificate's order: the
// check of every RPC needs no sorted copy.
func peerUnsorted(ctx context.Context) (name string, roles []string, ok bool) {
	p, found := peer.FromContext(ctx)
	if !found || p.AuthInfo == nil {
		return "", nil, false
	}
	info, isTLS := p.AuthInfo.(credentials.TLSInfo)
	if !isTLS || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return "", nil, false
	}
	c := info.State.VerifiedChains[0][0]
	return c.Subject.CommonName, c.Subject.OrganizationalUnit, true
}

// Authorize decides whether the caller of ctx may call fullMethod:
// codes.Unauthenticated without a verified certificate (or a revoked
// one), codes.PermissionDenied when its roles are not allowed or the
// method is not in the table. The error names the method, the caller and
// the roles the method needs.
func Authorize(ctx context.Context, fullMethod string) error {
	want, known := methodRoles[fullMethod]
	if known && slices.Contains(want, Public) {
		return nil
	}
	name, roles, ok := peerUnsorted(ctx)
	if !ok {
		addr := "unknown address"
		if p, found := peer.FromContext(ctx); found && p.Addr != nil {
			addr = p.Addr.String()
		}
		need := "a certificate of this cluster's CA with role " + strings.Join(want, " or ")
		if !known {
			need = "an unknown method, refused to everyone"
		}
		return status.Errorf(codes.Unauthenticated, "%s: the caller at %s presented no certificate of this cluster's CA (%s; see `plumeria init` and --certs)",
			fullMethod, addr, need)
	}
	if fn := revoked.Load(); fn != nil && (*fn)(name) {
		return status.Errorf(codes.Unauthenticated, "%s: the certificate of %q is revoked", fullMethod, name)
	}
	if !known {
		return status.Errorf(codes.PermissionDenied, "%s: unknown method, refused to %q (every method must be in the role table of internal/pki)", fullMethod, name)
	}
	if !hasAny(roles, want) {
		return status.Errorf(codes.PermissionDenied, "%s: %q with roles [%s] may not call it (needs role %s)",
			fullMethod, name, strings.Join(SortRoles(roles), ","), strings.Join(want, " or "))
	}
	return nil
}

// UnaryServerInterceptor refuses a unary call that Authorize refuses.
func UnaryServerInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := Authorize(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// StreamServerInterceptor refuses a stream that Authorize refuses.
func StreamServerInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := Authorize(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}
