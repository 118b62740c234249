// Package clustermap owns the cluster map: members and their failure domains,
// bricks and their state, volumes with their placement groups and ordered
// brick lists, snapshots, fencing epochs of writers, and the map epoch.
//
// It is pure code: no I/O, no clock. The coordinator replicates the map with
// Raft; bricks and clients receive it in the encoding of codec.go. Placement
// (placement.go) and failure handling (reconcile.go) are functions from a map
// to a new map, so they can be tested deterministically.
//
// Guarantee: every map that passes Validate has, for every placement group,
// a non-empty ordered brick list with no duplicates whose first brick is in
// sync (the primary), and every named brick exists.
package clustermap

import (
	"fmt"
	"slices"
	"sort"

	"github.com/cespare/xxhash/v2"

	"github.com/plumeria-fs/plumeria/internal/limits"
)

// BrickState is whether the coordinator currently hears a brick.
type BrickState string

const (
	BrickUp   BrickState = "up"
	BrickDown BrickState = "down"
)

// Domain levels, smallest first. A brick's domain maps a level to a name.
const (
	LevelHost = "host"
	LevelRack = "rack"
	LevelSite = "site"
)

// Levels lists the failure-domain levels from the smallest.
var Levels = []string{LevelHost, LevelRack, LevelSite}

// Brick is one storage server.
type Brick struct {
	Name          string            `json:"name"`
	Addr          string            `json:"addr"`
	Domain        map[string]string `json:"domain,omitempty"`
	State         BrickState        `json:"state"`
	Draining      bool              `json:"draining,omitempty"`
	CapacityBytes int64             `json:"capacity_bytes,omitempty"`
	// Class is the brick's storage class (GFS's subpools: "ssd", "hdd",
	// ...); "" is ClassDefault. A volume with a class is placed on bricks
	// of that class only (placement.go).
	Class string `json:"class,omitempty"`
	// Full is set by MarkFull when the brick's store is nearly full: it
	// takes no new PG members, and rebalancing moves members off it.
	Full bool `json:"full,omitempty"`
	// Features lists what the brick's build can do beyond format 1 of the
	// protocol, e.g. FeatureEC: only bricks with FeatureEC hold shards.
	Features []string `json:"features,omitempty"`
}

// ClassDefault is the class of a brick started without one.
const ClassDefault = "default"

// ClassName returns b's class, ClassDefault when it has none.
func (b *Brick) ClassName() string {
	if b.Class == "" {
		return ClassDefault
	}
	return b.Class
}

// Coordinator is one member of the Raft group. Its Addr serves both gRPC and Raft.
type Coordinator struct {
	Name string `json:"name"`
	Addr string `json:"addr"`
}

// PG is a placement group: the ordered bricks that hold its chunks.
// Bricks[0] is the primary. Syncing lists members still being backfilled;
// they receive every write but are not yet counted as full replicas.
type PG struct {
	Bricks  []string `json:"bricks"`
	Syncing []string `json:"syncing,omitempty"`
	// Since is the map epoch of the last change of Bricks or Syncing. A
	// backfill reports completion with the Since it started under, so a
	// late report about an earlier membership is ignored.
	Since uint64 `json:"since,omitempty"`
	// Leaving lists members that leave once the PG has its full count of
	// in-sync members without them (rebalancing onto a new brick).
	Leaving []string `json:"leaving,omitempty"`
}

// InSync returns the members that hold every acknowledged write.
func (p PG) InSync() []string {
	var out []string
	for _, b := range p.Bricks {
		if !slices.Contains(p.Syncing, b) {
			out = append(out, b)
		}
	}
	return out
}

// Primary returns the brick that orders the PG's writes.
func (p PG) Primary() string {
	if len(p.Bricks) == 0 {
		return ""
	}
	return p.Bricks[0]
}

// Volume is a sparse 2^64-byte virtual disk.
type Volume struct {
	ID              uint64            `json:"id"`
	Name            string            `json:"name"`
	Replicas        int               `json:"replicas"`
	ChunkBytes      uint32            `json:"chunk_bytes"`
	AllowSameDomain bool              `json:"allow_same_domain,omitempty"`
	Gen             uint64            `json:"gen"`                 // writes go to this generation
	Snapshots       map[string]uint64 `json:"snapshots,omitempty"` // name → newest generation it sees
	// SnapshotTimes holds when each snapshot was taken (Unix nanoseconds,
	// the leader's clock), for reads of the past by time
	// (MNT/.plumeria/at/T). Snapshots taken before it existed have none.
	SnapshotTimes map[string]int64 `json:"snapshot_times,omitempty"`
	// SnapshotsDeleted counts the snapshots deleted so far (DeleteSnapshot).
	// The primary of each PG prunes the block versions no snapshot left
	// sees until it has pruned at this count (brick/prune.go); only it
	// goes up.
	SnapshotsDeleted uint64 `json:"snapshots_deleted,omitempty"`
	// Schedule, if set, has the coordinators' leader take a snapshot of
	// the volume's file system every so often and keep the newest few
	// (schedule.go).
	Schedule *SnapshotSchedule `json:"snapshot_schedule,omitempty"`
	// FileVersions, set when the volume is created, makes its bricks keep
	// per-file versions: writes carry a file version and are stored under
	// a gen that encodes it with Gen (fileversions.go). Gen then stays at
	// most FileVersionGenMax.
	FileVersions bool `json:"file_versions,omitempty"`
	// Class, if set, keeps the volume's PGs on bricks of that class only.
	Class string `json:"class,omitempty"`
	// Domain is the failure-domain level at which the replicas of a PG
	// must be distinct (a hard rule): host ("" means host), rack or site.
	// Levels above it are only spread over as a preference.
	Domain string `json:"domain,omitempty"`
	PGs    []PG   `json:"pgs"`
	// Profiles are the other redundancies the volume's data may be moved
	// to (stripes.go), and SGs the stripe groups that hold their stripes;
	// an SG's index in SGs names it and is never reused.
	Profiles []Profile     `json:"profiles,omitempty"`
	SGs      []StripeGroup `json:"sgs,omitempty"`
}

// PGOf returns the placement group of the chunk that holds byte offset off.
func (v *Volume) PGOf(off uint64) uint32 {
	return PGOfChunk(v.ID, off/uint64(v.ChunkBytes), len(v.PGs))
}

// PGOfChunk hashes a chunk of a volume to one of n placement groups.
func PGOfChunk(vol, chunk uint64, n int) uint32 {
	var b [16]byte
	for i := 0; i < 8; i++ {
		b[i] = byte(vol >> (8 * i))
		b[8+i] = byte(chunk >> (8 * i))
	}
	return uint32(xxhash.Sum64(b[:]) % uint64(n))
}

// Map is the whole cluster map. Every change increases Epoch.
type Map struct {
	Epoch        uint64            `json:"epoch"`
	Coordinators []Coordinator     `json:"coordinators,omitempty"`
	Bricks       []Brick           `json:"bricks,omitempty"` // sorted by name
	Volumes      []Volume          `json:"volumes,omitempty"`
	Fences       map[string]uint64 `json:"fences,omitempty"` // writer id → lowest epoch allowed to write
	NextVolumeID uint64            `json:"next_volume_id"`

	// The lock service's part (locks.go).
	LockServers   []LockServer      `json:"lock_servers,omitempty"` // sorted by name
	LockGroups    []LockGroup       `json:"lock_groups,omitempty"`  // LockGroupsN once a lock server exists
	Sessions      []Session         `json:"sessions,omitempty"`
	FencesInForce map[string]uint64 `json:"fences_in_force,omitempty"`
	Recovered     []RecoveredLog    `json:"recovered,omitempty"`

	// Security (security.go): join tokens and revoked nodes.
	Tokens  []JoinToken  `json:"tokens,omitempty"`
	Revoked []Revocation `json:"revoked,omitempty"`
}

// Clone returns a deep copy that can be changed without touching m.
func (m *Map) Clone() *Map {
	c := *m
	c.Coordinators = slices.Clone(m.Coordinators)
	c.Bricks = make([]Brick, len(m.Bricks))
	for i, b := range m.Bricks {
		b.Domain = cloneMap(b.Domain)
		b.Features = slices.Clone(b.Features)
		c.Bricks[i] = b
	}
	c.Volumes = make([]Volume, len(m.Volumes))
	for i, v := range m.Volumes {
		v.Snapshots = cloneMap(v.Snapshots)
		v.SnapshotTimes = cloneMap(v.SnapshotTimes)
		if v.Schedule != nil {
			sc := *v.Schedule
			v.Schedule = &sc
		}
		v.Profiles = slices.Clone(v.Profiles)
		v.SGs = make([]StripeGroup, len(m.Volumes[i].SGs))
		for j, g := range m.Volumes[i].SGs {
			g.Bricks, g.Syncing = slices.Clone(g.Bricks), slices.Clone(g.Syncing)
			v.SGs[j] = g
		}
		if m.Volumes[i].SGs == nil {
			v.SGs = nil
		}
		v.PGs = make([]PG, len(m.Volumes[i].PGs))
		for j, p := range m.Volumes[i].PGs {
			v.PGs[j] = PG{Bricks: slices.Clone(p.Bricks), Syncing: slices.Clone(p.Syncing), Since: p.Since, Leaving: slices.Clone(p.Leaving)}
		}
		c.Volumes[i] = v
	}
	c.Fences = cloneMap(m.Fences)
	c.LockServers = slices.Clone(m.LockServers)
	c.LockGroups = slices.Clone(m.LockGroups)
	c.Sessions = make([]Session, len(m.Sessions))
	for i, s := range m.Sessions {
		s.Tables = slices.Clone(s.Tables)
		c.Sessions[i] = s
	}
	if m.Sessions == nil {
		c.Sessions = nil
	}
	c.FencesInForce = cloneMap(m.FencesInForce)
	c.Recovered = slices.Clone(m.Recovered)
	m.cloneSecurity(&c)
	return &c
}

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	if m == nil {
		return nil
	}
	c := make(map[K]V, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// Brick returns the named brick, or nil.
func (m *Map) Brick(name string) *Brick {
	i := sort.Search(len(m.Bricks), func(i int) bool { return m.Bricks[i].Name >= name })
	if i < len(m.Bricks) && m.Bricks[i].Name == name {
		return &m.Bricks[i]
	}
	return nil
}

// Volume returns the named volume, or nil.
func (m *Map) Volume(name string) *Volume {
	for i := range m.Volumes {
		if m.Volumes[i].Name == name {
			return &m.Volumes[i]
		}
	}
	return nil
}

// VolumeByID returns the volume with that id, or nil.
func (m *Map) VolumeByID(id uint64) *Volume {
	for i := range m.Volumes {
		if m.Volumes[i].ID == id {
			return &m.Volumes[i]
		}
	}
	return nil
}

// PutBrick adds or replaces a brick, keeping Bricks sorted.
func (m *Map) PutBrick(b Brick) {
	if old := m.Brick(b.Name); old != nil {
		*old = b
		return
	}
	m.Bricks = append(m.Bricks, b)
	sort.Slice(m.Bricks, func(i, j int) bool { return m.Bricks[i].Name < m.Bricks[j].Name })
}

// FenceEpoch returns the lowest epoch writer may write with (0 if never fenced).
func (m *Map) FenceEpoch(writer string) uint64 { return m.Fences[writer] }

// Validate checks the map's invariants. Maps decoded from bytes are
// validated before use; an invalid map is rejected with an error.
func (m *Map) Validate() error {
	if err := m.validateSecurity(); err != nil {
		return err
	}
	if len(m.Bricks) > limits.BricksMax || len(m.Volumes) > limits.VolumesMax || len(m.Fences) > limits.WritersMax {
		return fmt.Errorf("clustermap: %d bricks, %d volumes, %d fences exceed %d, %d, %d",
			len(m.Bricks), len(m.Volumes), len(m.Fences), limits.BricksMax, limits.VolumesMax, limits.WritersMax)
	}
	coords := map[string]bool{}
	for _, c := range m.Coordinators {
		if err := ValidName(c.Name); err != nil {
			return fmt.Errorf("clustermap: coordinator: %w", err)
		}
		if coords[c.Name] {
			return fmt.Errorf("clustermap: duplicate coordinator %q", c.Name)
		}
		coords[c.Name] = true
	}
	for i := 1; i < len(m.Bricks); i++ {
		if m.Bricks[i-1].Name >= m.Bricks[i].Name {
			return fmt.Errorf("clustermap: bricks not sorted or duplicate at %q", m.Bricks[i].Name)
		}
	}
	for _, b := range m.Bricks {
		if err := ValidName(b.Name); err != nil {
			return fmt.Errorf("clustermap: brick: %w", err)
		}
		if b.State != BrickUp && b.State != BrickDown {
			return fmt.Errorf("clustermap: brick %s: unknown state %q", b.Name, b.State)
		}
		if b.Class != "" {
			if err := ValidClass(b.Class); err != nil {
				return fmt.Errorf("clustermap: brick %s: %w", b.Name, err)
			}
		}
		if len(b.Features) > FeaturesMax {
			return fmt.Errorf("clustermap: brick %s: %d features exceed %d", b.Name, len(b.Features), FeaturesMax)
		}
		for _, f := range b.Features {
			if err := ValidName(f); err != nil {
				return fmt.Errorf("clustermap: brick %s: feature: %w", b.Name, err)
			}
		}
	}
	if err := m.validateLocks(); err != nil {
		return err
	}
	ids := map[uint64]bool{}
	names := map[string]bool{}
	for i := range m.Volumes {
		v := &m.Volumes[i]
		if ids[v.ID] || names[v.Name] {
			return fmt.Errorf("clustermap: duplicate volume %q (id %d)", v.Name, v.ID)
		}
		ids[v.ID], names[v.Name] = true, true
		if err := m.validateVolume(v); err != nil {
			return err
		}
	}
	return nil
}

func (m *Map) validateVolume(v *Volume) error {
	if err := ValidName(v.Name); err != nil {
		return fmt.Errorf("clustermap: volume: %w", err)
	}
	if v.ID == 0 || v.ID >= m.NextVolumeID {
		return fmt.Errorf("clustermap: volume %s: id %d outside [1, %d)", v.Name, v.ID, m.NextVolumeID)
	}
	if err := ValidChunkBytes(v.ChunkBytes); err != nil {
		return fmt.Errorf("clustermap: volume %s: %w", v.Name, err)
	}
	if v.Replicas < 1 || v.Replicas > limits.ReplicasMax || len(v.PGs) < 1 || len(v.PGs) > limits.PGsPerVolumeMax {
		return fmt.Errorf("clustermap: volume %s: %d replicas, %d placement groups", v.Name, v.Replicas, len(v.PGs))
	}
	if v.Class != "" {
		if err := ValidClass(v.Class); err != nil {
			return fmt.Errorf("clustermap: volume %s: %w", v.Name, err)
		}
	}
	if err := ValidDomainLevel(v.Domain); err != nil {
		return fmt.Errorf("clustermap: volume %s: %w", v.Name, err)
	}
	if v.AllowSameDomain && v.Domain != "" && v.Domain != LevelHost {
		return fmt.Errorf("clustermap: volume %s: allow_same_domain with domain %s", v.Name, v.Domain)
	}
	if v.FileVersions && v.Gen > FileVersionGenMax {
		return fmt.Errorf("clustermap: volume %s: gen %d exceeds %d, the most a volume with file versions can have", v.Name, v.Gen, FileVersionGenMax)
	}
	if len(v.Snapshots) > limits.SnapshotsPerVolumeMax {
		return fmt.Errorf("clustermap: volume %s: %d snapshots exceed %d", v.Name, len(v.Snapshots), limits.SnapshotsPerVolumeMax)
	}
	for name := range v.SnapshotTimes {
		if _, ok := v.Snapshots[name]; !ok {
			return fmt.Errorf("clustermap: volume %s: a time for snapshot %q, which is not", v.Name, name)
		}
	}
	if v.Schedule != nil {
		if err := v.Schedule.Validate(); err != nil {
			return fmt.Errorf("clustermap: volume %s: %w", v.Name, err)
		}
	}
	for name, g := range v.Snapshots {
		if err := ValidName(name); err != nil {
			return fmt.Errorf("clustermap: volume %s: snapshot: %w", v.Name, err)
		}
		if g >= v.Gen {
			return fmt.Errorf("clustermap: volume %s: snapshot gen %d not below volume gen %d", v.Name, g, v.Gen)
		}
	}
	if err := m.validateStripes(v); err != nil {
		return err
	}
	for i, p := range v.PGs {
		if len(p.Bricks) == 0 {
			return fmt.Errorf("clustermap: volume %s pg %d: no bricks", v.Name, i)
		}
		seen := map[string]bool{}
		for _, b := range p.Bricks {
			if seen[b] || m.Brick(b) == nil {
				return fmt.Errorf("clustermap: volume %s pg %d: brick %q duplicate or unknown", v.Name, i, b)
			}
			seen[b] = true
		}
		syncing := map[string]bool{}
		for _, s := range p.Syncing {
			if !seen[s] || syncing[s] {
				return fmt.Errorf("clustermap: volume %s pg %d: syncing brick %q not a member or repeated", v.Name, i, s)
			}
			syncing[s] = true
		}
		leaving := map[string]bool{}
		for _, s := range p.Leaving {
			if !seen[s] || leaving[s] {
				return fmt.Errorf("clustermap: volume %s pg %d: leaving brick %q not a member or repeated", v.Name, i, s)
			}
			leaving[s] = true
		}
		if slices.Contains(p.Syncing, p.Bricks[0]) {
			return fmt.Errorf("clustermap: volume %s pg %d: primary %s is still syncing", v.Name, i, p.Bricks[0])
		}
	}
	return nil
}
