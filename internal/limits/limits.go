// Package limits holds every bound and size Plumeria uses, with the unit last
// in each name. Relations between limits are checked at compile time.
package limits

import "time"

const (
	// BlockBytes is the unit a brick stores and checksums. Every stored block
	// is exactly this long; partial writes are merged by the primary.
	BlockBytes = 4 << 10

	// ChunkBytesDefault is the default unit of placement of a volume: a
	// chunk hashes to one placement group. Petal used 64 KiB; 1 MiB makes
	// a streaming write or read one request per MiB (per-request costs:
	// the RPC, the PG lock, a store batch, index lookups) while the
	// placement stays fine-grained (a 1 GiB file spans every PG).
	ChunkBytesDefault = 1 << 20
	// ChunkBytesMin and ChunkBytesMax bound --chunk-size.
	ChunkBytesMin = BlockBytes
	ChunkBytesMax = 16 << 20

	// PGsPerVolumeDefault is the number of placement groups of a new volume.
	PGsPerVolumeDefault = 64
	PGsPerVolumeMax     = 4096

	// ReplicasMax bounds --replicas.
	ReplicasMax = 5

	// RPCMessageBytesMax bounds any gRPC message (a chunk write plus headers).
	RPCMessageBytesMax = ChunkBytesMax + (1 << 20)
	// RPCStreamWindowBytes and RPCConnWindowBytes are the HTTP/2 flow-control
	// windows of every gRPC connection, per stream and per connection,
	// fixed (gRPC's default starts at 64 KiB and grows by probing the
	// bandwidth-delay product): hundreds of small writes in flight to one
	// brick, or a few 1 MiB chunks, stalled on the 64 KiB windows between
	// the client's call and the brick's handler. They bound what a peer may
	// send before it is read, per connection.
	RPCStreamWindowBytes = 4 << 20
	RPCConnWindowBytes   = 16 << 20
	// RPCStreamsPerConnMax bounds the requests one client connection has
	// in flight at a server (HTTP/2 MAX_CONCURRENT_STREAMS; the client
	// queues the rest): with a brick's requests read whole before their
	// handler runs, what one client makes a brick hold is at most this
	// many requests (a chunk each, 1 MiB by default).
	RPCStreamsPerConnMax = 256
	// RPCStreamWorkers is how many goroutines a node's gRPC server keeps
	// to serve requests (more run on goroutines of their own).
	RPCStreamWorkers = 32

	// VolumeNameBytesMax bounds volume, snapshot, brick and member names.
	NameBytesMax = 128
	// ClassBytesMax bounds a storage class name (brick --class).
	ClassBytesMax = 32
	// Security (clustermap/security.go): join tokens live until they
	// expire, each remembers the names that joined with it; revoked nodes
	// are kept for good.
	JoinTokensMax     = 64
	JoinTokenNamesMax = 1024
	RevokedMax        = 4096
	// Erasure-coding profiles (brick/ec, clustermap.Profile): K data and M
	// parity shards on a stripe group of K+M bricks.
	DataShardsMax   = 32
	ParityShardsMax = 16
	ShardsMax       = 48 // K+M
	// ProfilesPerVolumeMax bounds a volume's redundancy profiles besides
	// its own replication, and StripeGroupsPerProfileMax the stripe groups
	// of one profile.
	ProfilesPerVolumeMax      = 16
	StripeGroupsPerProfileMax = 64

	// SegmentBytesMax is the size at which a brick rolls to a new segment.
	SegmentBytesMax = 64 << 20

	// VolumesMax bounds the number of volumes in a cluster map.
	VolumesMax = 1024
	// BricksMax bounds the number of bricks in a cluster map.
	BricksMax = 1024
	// SnapshotsPerVolumeMax bounds snapshots of one volume.
	SnapshotsPerVolumeMax = 4096
	// WritersMax bounds the number of fenced writer ids in the map.
	WritersMax = 1 << 16

	// ClientInflightChunksMax bounds the chunk requests a volume client has
	// in flight for one call.
	ClientInflightChunksMax = 32
	// ClientPGWritesInflight bounds the write requests a volume client has
	// under way per placement group; the writes that arrive meanwhile are
	// gathered into the next request (volume/batch.go), which carries at
	// most ClientWriteBatchBytes (or one larger piece alone) in at most
	// ClientWriteBatchExtents pieces.
	ClientPGWritesInflight  = 1
	ClientWriteBatchBytes   = 4 << 20
	ClientWriteBatchExtents = 1024
)

// Timing defaults. Durations carry their unit; names end in Max/Min only.
const (
	HeartbeatInterval = 250 * time.Millisecond
	// BrickLease is how long a brick may act as primary after the start of
	// its last successful heartbeat.
	BrickLease = 2 * time.Second
	// BrickDeadAfter is how long the coordinator waits without a heartbeat
	// before it declares a brick down. It must exceed BrickLease so that a
	// new primary is only appointed after the old one's lease ran out.
	BrickDeadAfter = 4 * time.Second
	// FenceWaitMax bounds how long Fence and Snapshot wait for bricks to
	// install the new map before declaring stragglers down.
	FenceWaitMax = 10 * time.Second
	// ClientRetryMax bounds how long a volume client retries one request
	// through map changes before it gives up.
	ClientRetryMax = 60 * time.Second
)

// ACLEntriesMax bounds the entries of one POSIX ACL (filesys/acl): both
// lists of an inode, at 8 bytes an entry, share its block with inline data
// and other attributes (filesys/acl.go checks that they fit beside a
// small directory's root).
const ACLEntriesMax = 128

// Compile-time relations: each line fails to compile if the relation breaks.
const (
	_ = uint64(ChunkBytesDefault % BlockBytes)                         // must be 0 (see below)
	_ = uint64(SegmentBytesMax - 4*ChunkBytesMax)                      // a segment holds several chunks
	_ = uint64(RPCMessageBytesMax - ClientWriteBatchBytes - (1 << 20)) // a batch and its framing fit a message
	_ = uint64(BrickDeadAfter - BrickLease - time.Second)              // dead-after exceeds lease with margin
	_ = uint64(RPCMessageBytesMax - ChunkBytesMax)
)

// zeroIfAligned fails to compile unless the default chunk is block aligned.
var _ [0]struct{} = [ChunkBytesDefault % BlockBytes]struct{}{}
